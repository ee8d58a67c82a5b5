package tests

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"tandemfs/internal/testcluster"
	"tandemfs/internal/testenv"
)

// File locks are the cluster's: a lock taken through one mount (one
// client host) keeps out the processes of every other mount, and goes
// when its holder closes the file or dies, as on a local file system.

// lockRange sets (F_SETLK, F_SETLKW, or the OFD variants) a lock of type
// typ on [start, start+length) (length 0: to the end of the file).
func lockRange(f *os.File, cmd int, typ int16, start, length int64) error {
	lk := unix.Flock_t{Type: typ, Whence: 0, Start: start, Len: length}
	return unix.FcntlFlock(f.Fd(), cmd, &lk)
}

func isRefused(err error) bool {
	return errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES)
}

func wantLockRefused(t *testing.T, what string, err error) {
	t.Helper()
	if !isRefused(err) {
		t.Fatalf("%s: got %v, want EAGAIN", what, err)
	}
}

func openRW(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// eventuallyGranted retries a non-blocking lock until it is granted:
// the kernel releases a closed file's locks just after close returns.
func eventuallyGranted(t *testing.T, what string, try func() error) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		err := try()
		if err == nil {
			return
		}
		if !isRefused(err) || time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestFileLocksHoldAcrossClientHosts(t *testing.T) {
	c := testcluster.Start(t)
	a, b := c.Mount(), secondMount(t, c)
	newFile := func(name string) (string, string) {
		if err := os.WriteFile(filepath.Join(a, name), []byte("data"), 0o644); err != nil {
			t.Fatal(err)
		}
		return filepath.Join(a, name), filepath.Join(b, name)
	}

	t.Run("a record lock keeps out the other host until its file is closed", func(t *testing.T) {
		pa, pb := newFile("record")
		fa, fb := openRW(t, pa), openRW(t, pb)
		if err := lockRange(fa, unix.F_SETLK, unix.F_WRLCK, 0, 100); err != nil {
			t.Fatal(err)
		}
		wantLockRefused(t, "read lock inside another host's write lock", lockRange(fb, unix.F_SETLK, unix.F_RDLCK, 50, 1))
		lk := unix.Flock_t{Type: unix.F_WRLCK, Start: 0, Len: 1}
		if err := unix.FcntlFlock(fb.Fd(), unix.F_GETLK, &lk); err != nil || lk.Type != unix.F_WRLCK || lk.Start != 0 || lk.Len != 100 {
			t.Fatalf("F_GETLK through the other host: %+v, %v", lk, err)
		}
		if err := lockRange(fb, unix.F_SETLK, unix.F_WRLCK, 100, 0); err != nil {
			t.Fatalf("write lock past the held range: %v", err)
		}

		waited := make(chan error, 1)
		go func() { waited <- lockRange(fb, unix.F_SETLKW, unix.F_WRLCK, 0, 100) }()
		select {
		case err := <-waited:
			t.Fatalf("F_SETLKW returned while the range was locked: %v", err)
		case <-time.After(500 * time.Millisecond):
		}
		t0 := time.Now()
		fa.Close() // releases the closing process's locks (FLUSH)
		select {
		case err := <-waited:
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("F_SETLKW granted %v after the holder closed the file", time.Since(t0))
		case <-time.After(5 * time.Second):
			t.Fatal("F_SETLKW still waits after the holder closed the file")
		}
	})

	t.Run("a read lock through a read-only open goes with it", func(t *testing.T) {
		pa, pb := newFile("readonly")
		fa, err := os.Open(pa)
		if err != nil {
			t.Fatal(err)
		}
		defer fa.Close()
		fb := openRW(t, pb)
		if err := lockRange(fa, unix.F_SETLK, unix.F_RDLCK, 0, 0); err != nil {
			t.Fatal(err)
		}
		if err := lockRange(fb, unix.F_SETLK, unix.F_RDLCK, 0, 0); err != nil {
			t.Fatalf("read locks of two hosts: %v", err)
		}
		wantLockRefused(t, "write lock over another host's read lock", lockRange(fb, unix.F_SETLK, unix.F_WRLCK, 0, 0))
		fa.Close()
		eventuallyGranted(t, "write lock once the reader closed", func() error {
			return lockRange(fb, unix.F_SETLK, unix.F_WRLCK, 0, 0)
		})
	})

	t.Run("flock locks exclude across hosts and apart from record locks", func(t *testing.T) {
		pa, pb := newFile("flock")
		fa, fb := openRW(t, pa), openRW(t, pb)
		if err := unix.Flock(int(fa.Fd()), unix.LOCK_EX); err != nil {
			t.Fatal(err)
		}
		wantLockRefused(t, "flock LOCK_SH against another host's LOCK_EX", unix.Flock(int(fb.Fd()), unix.LOCK_SH|unix.LOCK_NB))
		if err := lockRange(fb, unix.F_SETLK, unix.F_WRLCK, 0, 0); err != nil {
			t.Fatalf("a record lock beside another host's flock: %v", err)
		}
		fa.Close() // the last close of the open file releases its flock
		eventuallyGranted(t, "flock once the holder closed", func() error {
			return unix.Flock(int(fb.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		})
	})

	t.Run("a signal ends a wait for a lock", func(t *testing.T) {
		testenv.RequireCommand(t, "flock")
		pa, pb := newFile("timeout")
		fa := openRW(t, pa)
		if err := unix.Flock(int(fa.Fd()), unix.LOCK_EX); err != nil {
			t.Fatal(err)
		}
		// flock -w waits in flock(2) until SIGALRM interrupts it.
		t0 := time.Now()
		err := exec.Command("flock", "-w", "0.5", pb, "true").Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Fatalf("flock -w on a file locked by another host: %v, want exit status 1", err)
		}
		if d := time.Since(t0); d > 3*time.Second {
			t.Fatalf("the interrupted wait took %v", d)
		}
		fa.Close()
		eventuallyGranted(t, "flock once the holder closed", func() error {
			return unix.Flock(int(openRW(t, pb).Fd()), unix.LOCK_EX|unix.LOCK_NB)
		})
	})

	t.Run("open file description locks exclude each other on one host", func(t *testing.T) {
		pa, _ := newFile("ofd")
		f1, f2 := openRW(t, pa), openRW(t, pa)
		if err := lockRange(f1, unix.F_OFD_SETLK, unix.F_WRLCK, 0, 10); err != nil {
			t.Fatal(err)
		}
		wantLockRefused(t, "OFD lock of another open file", lockRange(f2, unix.F_OFD_SETLK, unix.F_WRLCK, 5, 1))
		// Classic record locks belong to the process: its two opens
		// share them and never conflict with each other.
		if err := lockRange(f1, unix.F_SETLK, unix.F_WRLCK, 100, 10); err != nil {
			t.Fatal(err)
		}
		if err := lockRange(f2, unix.F_SETLK, unix.F_WRLCK, 100, 10); err != nil {
			t.Fatalf("a process's record lock through its second open: %v", err)
		}
	})

	t.Run("the lock of a killed process goes", func(t *testing.T) {
		pa, pb := newFile("killed")
		holder := exec.Command(os.Args[0])
		holder.Env = append(os.Environ(), lockHolderEnv+"="+pa)
		out, err := holder.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := holder.Start(); err != nil {
			t.Fatal(err)
		}
		defer holder.Wait()
		defer holder.Process.Kill()
		if line, _ := bufio.NewReader(out).ReadString('\n'); line != "locked\n" {
			t.Fatalf("lock holder: %q", line)
		}
		fb := openRW(t, pb)
		wantLockRefused(t, "lock held by a live process on another host", lockRange(fb, unix.F_SETLK, unix.F_RDLCK, 0, 1))
		holder.Process.Signal(syscall.SIGKILL)
		eventuallyGranted(t, "lock once its holder was killed", func() error {
			return lockRange(fb, unix.F_SETLK, unix.F_WRLCK, 0, 0)
		})
	})
}
