package cluster

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"
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
	if l.Mount != "" && (isTandemMount(l.Mount) || isStaleMount(l.Mount)) {
		if err := syscall.Unmount(l.Mount, 0); err != nil {
			if !force {
				return fmt.Errorf("unmounting %s: %v (is a process using it? `tandem down --force` detaches it lazily)", l.Mount, err)
			}
			if err := syscall.Unmount(l.Mount, syscall.MNT_DETACH); err != nil {
				return fmt.Errorf("unmounting %s: %v", l.Mount, err)
			}
		}
		say("unmounted %s", l.Mount)
	}
	names := []string{"mount"}
	for _, s := range l.Servers {
		names = append(names, s.Name)
	}
	for _, m := range l.Metas {
		names = append(names, m.procName(len(l.Metas)))
	}
	var errs []error
	for _, name := range names {
		if err := stop(dir, name); err != nil {
			errs = append(errs, err)
		} else {
			say("stopped %s", name)
		}
	}
	return errors.Join(errs...)
}

// stop ends the recorded process of name, if it runs.
func stop(dir, name string) error {
	defer os.Remove(pidFile(dir, name))
	if !running(dir, name) {
		return nil
	}
	pid := readPid(dir, name)
	syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(15 * time.Second)
	for running(dir, name) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			time.Sleep(200 * time.Millisecond)
			if running(dir, name) {
				return fmt.Errorf("%s (pid %d) does not stop", name, pid)
			}
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
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
