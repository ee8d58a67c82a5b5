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

// How the kernel's requests reach the mount: over FUSE-over-io_uring,
// on the CPU of the task that made them, where the kernel allows it
// (Linux 6.14+, the fuse module's enable_uring on; scripts/test.sh turns
// it on), else over /dev/fuse. Every other test here runs over whichever
// the machine allows; these check the choice itself and what only the
// ring can get wrong.

const enableUring = "/sys/module/fuse/parameters/enable_uring"

// needIoUring skips a test on a kernel that does not serve FUSE over
// io_uring.
func needIoUring(t *testing.T) {
	t.Helper()
	data, err := os.ReadFile(enableUring)
	if err != nil || strings.TrimSpace(string(data)) != "Y" {
		t.Skipf("FUSE over io_uring is off here (%s: %q, %v)", enableUring, data, err)
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

func TestTheMountServesTheKernelOverIoUringWhereTheKernelAllows(t *testing.T) {
	needIoUring(t)
	c := testcluster.Start(t)
	if tr := transportOf(t, c.Mount(), 5*time.Second); tr != "io_uring" {
		t.Fatalf("transport %q, want io_uring", tr)
	}
	// Requests from every CPU, each answered on its own.
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for cpu := 0; cpu < min(4, numCPU()); cpu++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			script := fmt.Sprintf(`d=%s/cpu%d; mkdir $d && for i in $(seq 50); do echo $i > $d/f$i; done && cat $d/f* | wc -l`, c.Mount(), cpu)
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
}

func TestAMountWithIoUringOffServesOverDevFuse(t *testing.T) {
	c := testcluster.Start(t)
	mnt := secondMount(t, c, "--io-uring", "off")
	if err := os.WriteFile(filepath.Join(mnt, "f"), []byte("over /dev/fuse"), 0o644); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(c.Mount(), "f")); err != nil || string(data) != "over /dev/fuse" {
		t.Fatalf("read through the other mount: %q, %v", data, err)
	}
	if tr := transportOf(t, mnt, 300*time.Millisecond); tr != "/dev/fuse" {
		t.Fatalf("with --io-uring off the transport is %q", tr)
	}
}

// A ring worker serves one request at a time, and a lock waited for
// holds its worker until granted. Waiters beyond a CPU's workers must not
// hold up the request that ends the wait (the holder's release, made on
// the same CPU): the queue starts more workers when all are busy.
func TestLockWaitersBeyondTheRingWorkersDoNotHoldUpTheRelease(t *testing.T) {
	needIoUring(t)
	c := testcluster.Start(t)
	if tr := transportOf(t, c.Mount(), 5*time.Second); tr != "io_uring" {
		t.Fatalf("transport %q, want io_uring", tr)
	}
	lock := filepath.Join(c.Mount(), "lock")
	if err := os.WriteFile(lock, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	onCPU0 := func(args ...string) *exec.Cmd {
		return exec.Command("taskset", append([]string{"-c", "0"}, args...)...)
	}
	holder := onCPU0("flock", lock, "sleep", "1")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the holder has it
	const waiters = 12                 // three times the workers a queue starts with
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
