package cluster

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"tandemfs/internal/fuseconn"
)

// Down unmounts the cluster's mount and stops exactly the processes Up
// recorded: the client first, then storage servers, then the metadata
// service, each with SIGTERM and, after a grace period, SIGKILL.
// With force, a busy mount is detached lazily instead of failing.
func Down(dir string, force bool, progress io.Writer) error {
	l, err := LoadLayout(dir)
	if err != nil {
		return err
	}
	say := func(format string, args ...any) {
		if progress != nil {
			fmt.Fprintf(progress, format+"\n", args...)
		}
	}
	// The mount is looked up in mountinfo, not with a stat of the mount
	// point: that is a request to the mount's process, which waits for
	// the metadata service when that is down (up to --give-up).
	dev, mounted := "", false
	if l.Mount != "" {
		dev, mounted = fuseconn.Device(mountPointPath(l.Mount))
	}
	if mounted {
		if err := syscall.Unmount(l.Mount, 0); err != nil {
			if !force {
				return fmt.Errorf("unmounting %s: %v (is a process using it? `tandem down --force` detaches it lazily)", l.Mount, err)
			}
			if err := syscall.Unmount(l.Mount, syscall.MNT_DETACH); err != nil {
				return fmt.Errorf("unmounting %s: %v", l.Mount, err)
			}
		}
		say("unmounted %s", l.Mount)
	} else if l.Mount != "" && isStaleMount(l.Mount) {
		// Not found under the path mountinfo gives it, yet a mount whose
		// process is gone: detached so that the next up can mount there.
		syscall.Unmount(l.Mount, syscall.MNT_DETACH)
	}
	var errs []error
	var notRunning []string
	report := func(name string, wasRunning bool, err error) {
		switch {
		case err != nil:
			errs = append(errs, err)
		case wasRunning:
			say("stopped %s", name)
		default:
			notRunning = append(notRunning, name)
		}
	}
	// The mount first. One detached lazily aborts its connection itself
	// on SIGTERM; if it is still there after the grace period, its
	// connection is aborted from here before SIGKILL, which alone cannot
	// end a process with a request to its own mount out
	// (internal/fuse/abort.go).
	wasRunning, err := stop(dir, "mount", func() {
		if dev != "" {
			fuseconn.Abort(dev)
		}
	})
	report("mount", wasRunning, err)
	// The NFS heads next: they flush the files they hold open, and give
	// their leases back, while the services still run.
	var names []string
	if l.NFS != nil {
		names = append(names, l.NFS.Heads...)
	}
	for _, s := range l.Servers {
		names = append(names, s.Name)
	}
	for _, m := range l.Metas {
		names = append(names, m.procName(len(l.Metas)))
	}
	for _, name := range names {
		wasRunning, err := stop(dir, name, nil)
		report(name, wasRunning, err)
	}
	dropNFSAlias(l)
	switch {
	case len(notRunning) == len(names)+1 && !mounted:
		say("the cluster in %s is stopped: nothing was running", dir)
	case len(notRunning) > 0:
		say("not running: %s", strings.Join(notRunning, ", "))
	}
	return errors.Join(errs...)
}

// mountPointPath is dir absolute, with the symbolic links of its parent
// resolved (as mountinfo names mount points) but without touching dir
// itself, which may be a mount whose process does not answer.
func mountPointPath(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return dir
	}
	parent, err := filepath.EvalSymlinks(filepath.Dir(abs))
	if err != nil {
		return abs
	}
	return filepath.Join(parent, filepath.Base(abs))
}

// stopGrace is how long a process has to end after SIGTERM.
const stopGrace = 15 * time.Second

// stop ends the recorded process of name, if it runs: SIGTERM, and after
// stopGrace, beforeKill (if set) and SIGKILL. wasRunning says whether
// there was a process to stop.
func stop(dir, name string, beforeKill func()) (wasRunning bool, err error) {
	defer os.Remove(pidFile(dir, name))
	if !running(dir, name) {
		return false, nil
	}
	pid := readPid(dir, name)
	syscall.Kill(pid, syscall.SIGTERM)
	if waitGone(dir, name, stopGrace) {
		return true, nil
	}
	if beforeKill != nil {
		beforeKill()
		if waitGone(dir, name, 2*time.Second) {
			return true, nil
		}
	}
	syscall.Kill(pid, syscall.SIGKILL)
	if !waitGone(dir, name, 2*time.Second) {
		return true, fmt.Errorf("%s (pid %d) does not stop", name, pid)
	}
	return true, nil
}

// waitGone waits up to d for the recorded process of name to end.
func waitGone(dir, name string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for running(dir, name) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}

// KillProcess sends SIGKILL to one recorded process (e.g. "meta2",
// "storage1") and waits until it is gone, as a crash of that part would.
func KillProcess(dir, name string) error {
	if !running(dir, name) {
		return fmt.Errorf("%s is not running", name)
	}
	syscall.Kill(readPid(dir, name), syscall.SIGKILL)
	for i := 0; i < 250 && running(dir, name); i++ {
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// SignalProcess sends sig to one process of the cluster, e.g. SIGSTOP and
// SIGCONT to make a server hang and wake up.
func SignalProcess(dir, name string, sig syscall.Signal) error {
	if !running(dir, name) {
		return fmt.Errorf("%s is not running", name)
	}
	return syscall.Kill(readPid(dir, name), sig)
}

// PidFile is the file holding the PID of one process of the cluster.
func PidFile(dir, name string) string { return pidFile(dir, name) }

// Pid is the recorded PID of one process of the cluster, or 0.
func Pid(dir, name string) int { return readPid(dir, name) }

// Kill sends SIGKILL to every recorded process at once, as a crash would
// (for tests of durability).
func Kill(dir string) error {
	l, err := LoadLayout(dir)
	if err != nil {
		return err
	}
	names := []string{"mount"}
	for _, m := range l.Metas {
		names = append(names, m.procName(len(l.Metas)))
	}
	for _, s := range l.Servers {
		names = append(names, s.Name)
	}
	for _, name := range names {
		if running(dir, name) {
			syscall.Kill(readPid(dir, name), syscall.SIGKILL)
		}
	}
	for _, name := range names {
		for i := 0; i < 100 && running(dir, name); i++ {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if l.Mount != "" {
		syscall.Unmount(l.Mount, syscall.MNT_DETACH)
	}
	return nil
}

// Stopped reports whether none of the metadata replicas of the cluster in
// dir runs: tools then say the cluster is stopped instead of showing a
// refused connection.
func Stopped(dir string) bool {
	l, err := LoadLayout(dir)
	if err != nil {
		return false
	}
	for _, m := range l.Metas {
		if running(dir, m.procName(len(l.Metas))) {
			return false
		}
	}
	return true
}
