package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"tandemfs/internal/testcluster"
)

// How the kernel's requests reach the mount: over FUSE-over-io_uring by
// default where the kernel has it (Linux 6.14+), each on the CPU of the
// task that made it, over /dev/fuse with --io-uring off. These check the
// choice, and what only the ring can get wrong; every other test runs
// over the default.

const enableUring = "/sys/module/fuse/parameters/enable_uring"

// needIoUring skips a test on a kernel without FUSE over io_uring.
func needIoUring(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(enableUring); err != nil {
		t.Skipf("this kernel has no FUSE over io_uring (%v)", err)
	}
}

// transportOf waits until the mount reports a transport other than
// /dev/fuse or the time is up, and returns it: a ring's queues register
// while the first requests already flow over /dev/fuse.
func transportOf(t *testing.T, mount string, wait time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		tr := clientStats(t, mount).Transport
		if tr != "/dev/fuse" || time.Now().After(deadline) {
			return tr
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ringMount mounts the cluster a second time with --io-uring on and
// waits until the ring serves it.
func ringMount(t *testing.T, c *testcluster.Cluster) string {
	t.Helper()
	mnt := secondMount(t, c, "--io-uring", "on")
	if tr := transportOf(t, mnt, 5*time.Second); tr != "io_uring" {
		t.Fatalf("with --io-uring on the transport is %q, want io_uring", tr)
	}
	return mnt
}

func TestByDefaultTheMountServesOverIoUringWhereTheKernelHasIt(t *testing.T) {
	needIoUring(t)
	c := testcluster.Start(t)
	if err := os.WriteFile(filepath.Join(c.Mount(), "f"), []byte("over io_uring"), 0o644); err != nil {
		t.Fatal(err)
	}
	if tr := transportOf(t, c.Mount(), 5*time.Second); tr != "io_uring" {
		t.Fatalf("by default the transport is %q, want io_uring", tr)
	}
}

func TestWithIoUringOffTheMountServesOverDevFuse(t *testing.T) {
	c := testcluster.Start(t)
	mnt := secondMount(t, c, "--io-uring", "off")
	if err := os.WriteFile(filepath.Join(mnt, "f"), []byte("over /dev/fuse"), 0o644); err != nil {
		t.Fatal(err)
	}
	if tr := transportOf(t, mnt, 300*time.Millisecond); tr != "/dev/fuse" {
		t.Fatalf("with --io-uring off the transport is %q", tr)
	}
	if data, err := os.ReadFile(filepath.Join(c.Mount(), "f")); err != nil || string(data) != "over /dev/fuse" {
		t.Fatalf("through the default mount: %q, %v", data, err)
	}
}

func TestWithIoUringOnRequestsFromEveryCPUAreServedOverTheRing(t *testing.T) {
	needIoUring(t)
	c := testcluster.Start(t)
	mnt := ringMount(t, c)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for cpu := 0; cpu < min(4, numCPU()); cpu++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			script := fmt.Sprintf(`d=%s/cpu%d; mkdir $d && for i in $(seq 50); do echo $i > $d/f$i; done && cat $d/f* | wc -l`, mnt, cpu)
			out, err := exec.Command("taskset", "-c", fmt.Sprint(cpu), "sh", "-c", script).CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != "50" {
				errs <- fmt.Errorf("cpu %d: %v: %s", cpu, err, out)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// What the ring's mount wrote, the other mount reads.
	data, err := os.ReadFile(filepath.Join(c.Mount(), "cpu0", "f7"))
	if err != nil || string(data) != "7\n" {
		t.Fatalf("cpu0/f7 through the /dev/fuse mount: %q, %v", data, err)
	}
}

// A ring worker serves one request at a time, and a lock waited for
// holds its worker until granted. A burst of waiters, more than a CPU's
// queue has workers, must not hold up the request that ends the wait
// (the holder's release, made on the same CPU): the kernel queues what
// finds no worker waiting and hands it only to a worker that answers
// another request, so the mount notices a queue whose workers all wait
// and gives it requests to answer until the queued ones are served.
func TestABurstOfLockWaitersOnOneCPUDoesNotHoldUpTheRelease(t *testing.T) {
	needIoUring(t)
	c := testcluster.Start(t)
	mnt := ringMount(t, c)
	lock := filepath.Join(mnt, "lock")
	if err := os.WriteFile(lock, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	onCPU0 := func(args ...string) *exec.Cmd {
		return exec.Command("taskset", append([]string{"-c", "0"}, args...)...)
	}
	holder := onCPU0("flock", lock, "sleep", "2")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the holder has it
	const waiters = 64                 // sixteen times the workers a queue starts with, at once
	var wg sync.WaitGroup
	errs := make(chan error, waiters)
	start := time.Now()
	for i := 0; i < waiters; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if out, err := onCPU0("flock", "-w", "30", lock, "true").CombinedOutput(); err != nil {
				errs <- fmt.Errorf("waiter %d: %v: %s", i, err, out)
			}
		}()
	}
	if err := holder.Wait(); err != nil {
		t.Fatalf("holder: %v", err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("%d waiters took %v", waiters, took)
	}
}

func numCPU() int {
	out, err := exec.Command("nproc").Output()
	n := 1
	if err == nil {
		fmt.Sscan(string(out), &n)
	}
	return n
}
