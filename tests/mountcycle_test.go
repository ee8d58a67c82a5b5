package tests

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"tandemfs/internal/cluster"
	"tandemfs/internal/testcluster"
)

// mountCycles is how many times TestAMountUnmountedAsSoonAsItIsUpEnds
// mounts and unmounts: a round takes about a fifth of a second.
const mountCycles = 20

// A mount unmounted as soon as it is up can be unmounted and then ends by
// itself, every time. Over io_uring, a request the mount made to its own
// mount as it started (go-fuse's poll hack, the readahead setting's stat)
// once arrived while the kernel's queues were still registering and was
// never taken; the mount's process then waited in the kernel for ever,
// unkillable (CI, 2026-11-27: three of six runs; docs/architecture.md,
// "Kernel transport"). Its only requests to itself now are go-fuse's ring
// pumps, which keep the mount busy for moments. Mounting over and over,
// with the directory used at once, is how that race showed.
func TestAMountUnmountedAsSoonAsItIsUpEnds(t *testing.T) {
	c := testcluster.Start(t)
	base := t.TempDir()
	for round := range mountCycles {
		dir := filepath.Join(base, fmt.Sprintf("m%d", round))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		cmd, log := startMount(t, c, dir)
		if err := waitFUSEMount(dir, 10*time.Second); err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("round %d: %v; the mount's log:\n%s", round, err, log)
		}
		if _, err := os.ReadDir(dir); err != nil {
			t.Errorf("round %d: reading the new mount: %v", round, err)
		}
		if err := unmountSoon(dir, 2*time.Second); err != nil {
			t.Errorf("round %d: unmount: %v (the mount's threads waited in: %s)", round, err, threadWaits(cmd.Process.Pid))
			syscall.Unmount(dir, syscall.MNT_DETACH)
		}
		if err := waitExit(cmd, 10*time.Second); err != nil {
			t.Fatalf("round %d: the mount's process %d %v; the mount's log:\n%s", round, cmd.Process.Pid, err, log)
		}
	}
}

// startMount starts tandem mount of c's cluster on dir, with extra flags
// for tandem mount (without, the transport is the default one, io_uring
// where the kernel has it).
func startMount(t *testing.T, c *testcluster.Cluster, dir string, flags ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	args := append([]string{"mount", "--meta", c.Layout.MetaAddr, "--secret-file", c.Layout.SecretFile}, flags...)
	cmd := exec.Command(testcluster.Binary(t), append(args, dir)...)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, &log
}

// waitFUSEMount waits until dir is the root of a FUSE mount.
func waitFUSEMount(dir string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		var st syscall.Statfs_t
		if syscall.Statfs(dir, &st) == nil && st.Type == 0x65735546 { // FUSE_SUPER_MAGIC
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s is not a FUSE mount after %v", dir, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// unmountSoon unmounts dir, retrying while it is busy for up to limit: a
// mount's own requests to itself as it starts (go-fuse's ring pumps)
// keep it busy for moments; one never answered keeps it busy for good.
func unmountSoon(dir string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		err := syscall.Unmount(dir, 0)
		if err != syscall.EBUSY || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitExit waits for cmd to end by itself. One that does not is killed,
// and the error says where its threads waited: a process stuck in the
// kernel does not end even then, and the test must not wait for it.
func waitExit(cmd *exec.Cmd, limit time.Duration) error {
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	select {
	case <-exited:
		return nil
	case <-time.After(limit):
	}
	waits := threadWaits(cmd.Process.Pid)
	cmd.Process.Kill()
	return fmt.Errorf("did not end within %v of its unmount; its threads waited in: %s", limit, waits)
}

// threadWaits lists, for each thread of pid, its state and the kernel
// function it waits in, and for a thread waiting for a FUSE reply its
// kernel stack and, if it is opening a file, the file.
func threadWaits(pid int) string {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
	var out []string
	for _, task := range tasks {
		wchan, _ := os.ReadFile(filepath.Join(task, "wchan"))
		stat, _ := os.ReadFile(filepath.Join(task, "stat"))
		state := "?"
		if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
			state = string(stat[i+2])
		}
		w := fmt.Sprintf("%s %s %s", filepath.Base(task), state, wchan)
		if string(wchan) == "request_wait_answer" {
			stack, _ := os.ReadFile(filepath.Join(task, "stack"))
			w += fmt.Sprintf(" [stack: %s%s]", strings.ReplaceAll(strings.TrimSpace(string(stack)), "\n", " | "), openingPath(pid, task))
		}
		out = append(out, w)
	}
	return strings.Join(out, ", ")
}

// openingPath returns ", opening PATH" for a thread in openat(2), read
// from the process's memory, or "".
func openingPath(pid int, task string) string {
	sc, _ := os.ReadFile(filepath.Join(task, "syscall"))
	f := strings.Fields(string(sc))
	if len(f) < 3 || f[0] != "257" { // openat(dirfd, path, ...)
		return ""
	}
	addr, err := strconv.ParseUint(strings.TrimPrefix(f[2], "0x"), 16, 64)
	if err != nil {
		return ""
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return ""
	}
	defer mem.Close()
	b := make([]byte, 4096)
	n, _ := mem.ReadAt(b, int64(addr))
	if i := bytes.IndexByte(b[:n], 0); i >= 0 {
		return fmt.Sprintf(", opening %q", b[:i])
	}
	return ""
}

// A mount whose metadata service is gone, while an application waits on
// it, stops with `tandem down --force` at once and for good: the mount is
// detached without a request to it, its process aborts its FUSE
// connection and ends, no thread of it is left in the kernel, and the
// application gets an error. Before, `tandem down` waited in a statfs of
// the mount until the client gave up on the metadata service (two
// minutes), and the mount's process, stopped with requests to its own
// mount out (go-fuse's ring pumps, which the stalled queue set off), was
// left with threads in D state that not even SIGKILL ended (2026-11-28).
func TestAMountStuckOnAGoneMetadataServiceStopsWithDownForce(t *testing.T) {
	c := testcluster.Start(t)
	pid := cluster.Pid(c.Dir(), "mount")
	if pid <= 0 {
		t.Fatal("no PID recorded for the mount")
	}
	dir := filepath.Join(c.Mount(), "loop")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	app := exec.Command("sh", "-c", `i=0; while : > "$0/f$i"; do i=$((i+1)); done`, dir)
	if err := app.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	c.KillProcess("meta")
	time.Sleep(3 * time.Second) // the loop waits on the client, which retries

	start := time.Now()
	if err := cluster.Down(c.Dir(), true, nil); err != nil {
		t.Fatalf("tandem down --force: %v", err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("tandem down --force took %v", took)
	}
	if err := waitProcessGone(pid, 10*time.Second); err != nil {
		t.Fatalf("the mount's process: %v", err)
	}
	if err := waitExit(app, 10*time.Second); err != nil {
		t.Fatalf("the application on the mount: %v", err)
	}
	if app.ProcessState.Success() {
		t.Fatal("the application's create loop ended without an error")
	}
}

// waitProcessGone waits for process pid to end entirely: gone, or a zombie
// with no thread left (its parent reaps it), not a zombie whose threads
// wait in the kernel.
func waitProcessGone(pid int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil || (bytes.Contains(status, []byte("State:\tZ")) && bytes.Contains(status, []byte("Threads:\t1\n"))) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still there %v after tandem down; its threads waited in: %s", limit, threadWaits(pid))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
