package meta_test

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"tandemfs/internal/client"
	"tandemfs/internal/meta"
	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
	"tandemfs/internal/wire"
)

// File locks through the metadata service: every client of the cluster
// sees the same locks.

func writeLock() proto.Lock { return proto.Lock{End: proto.LockEnd, Type: proto.LockWrite} }

func mustLock(t *testing.T, c *client.Client, ino, owner uint64, l proto.Lock) {
	t.Helper()
	granted, conflict, err := c.SetLock(nil, ino, owner, false, l, false)
	if err != nil || !granted {
		t.Fatalf("lock %+v: granted %v, conflict %+v, error %v", l, granted, conflict, err)
	}
}

func wantRefused(t *testing.T, c *client.Client, ino, owner uint64, l proto.Lock) {
	t.Helper()
	granted, _, err := c.SetLock(nil, ino, owner, false, l, false)
	if err != nil || granted {
		t.Fatalf("lock %+v: granted %v, error %v; want refused", l, granted, err)
	}
}

// blockingLock takes l for owner in the background, waiting as long as it
// takes; the channel reports the result.
func blockingLock(c *client.Client, ino, owner uint64, l proto.Lock, cancel <-chan struct{}) <-chan error {
	done := make(chan error, 1)
	go func() {
		granted, _, err := c.SetLock(cancel, ino, owner, false, l, true)
		if err == nil && !granted {
			err = errors.New("a blocking request returned without the lock")
		}
		done <- err
	}()
	return done
}

func TestALockExcludesOtherClientsUntilReleased(t *testing.T) {
	svc, c1 := setup(t)
	c2 := newClient(t, svc)
	f := mk(t, c1, proto.RootIno, "f", syscall.S_IFREG|0o644)
	mustLock(t, c1, f.Ino, 1, writeLock())
	wantRefused(t, c2, f.Ino, 1, proto.Lock{Start: 100, End: 100, Type: proto.LockRead})
	free, c, err := c2.GetLock(f.Ino, 1, false, proto.Lock{End: 10, Type: proto.LockRead})
	if err != nil || free || c.Type != proto.LockWrite || c.End != proto.LockEnd || c.Pid != 0 {
		t.Fatalf("F_GETLK from another client: free %v, conflict %+v, error %v", free, c, err)
	}

	waiter := blockingLock(c2, f.Ino, 1, writeLock(), nil)
	select {
	case err := <-waiter:
		t.Fatalf("a blocking request returned while the lock was held: %v", err)
	case <-time.After(600 * time.Millisecond): // longer than one wait slice
	}
	t0 := time.Now()
	if err := c1.ReleaseLocks(f.Ino, 1, false); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waiter:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("the waiter had the lock %v after the release", time.Since(t0))
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter never got the released lock")
	}
	wantRefused(t, c1, f.Ino, 1, proto.Lock{End: 0, Type: proto.LockRead})
}

func TestAnInterruptedWaitLeavesNoLockBehind(t *testing.T) {
	svc, c1 := setup(t)
	c2 := newClient(t, svc)
	f := mk(t, c1, proto.RootIno, "f", syscall.S_IFREG|0o644)
	mustLock(t, c1, f.Ino, 1, writeLock())
	cancel := make(chan struct{})
	waiter := blockingLock(c2, f.Ino, 2, writeLock(), cancel)
	time.Sleep(100 * time.Millisecond)
	close(cancel)
	select {
	case err := <-waiter:
		if !errors.Is(err, syscall.EINTR) {
			t.Fatalf("interrupted wait ended with %v, want EINTR", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("an interrupted wait went on")
	}
	if err := c1.ReleaseLocks(f.Ino, 1, false); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	mustLock(t, c1, f.Ino, 3, writeLock())
}

func TestLocksOfASilentClientAreReleased(t *testing.T) {
	svc, err := meta.Start(meta.Config{Dir: t.TempDir(), Listen: freeAddr(t), RaftListen: freeAddr(t),
		Secret: testSecret, Logf: t.Logf, SessionTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	crashed, err := client.New(client.Config{MetaAddr: svc.Addr(), Secret: testSecret, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	f := mk(t, crashed, proto.RootIno, "f", syscall.S_IFREG|0o644)
	mustLock(t, crashed, f.Ino, 1, writeLock())
	crashed.Close() // no more keepalives, and no release
	other := newClient(t, svc)
	t0 := time.Now()
	select {
	case err := <-blockingLock(other, f.Ino, 1, writeLock(), nil):
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("the lock of the silent client was released after %v", time.Since(t0))
	case <-time.After(10 * time.Second):
		t.Fatal("the lock of a client silent past the session timeout was kept")
	}
}

func TestLocksSurviveTheLossOfTheMetadataLeader(t *testing.T) {
	svcs := startReplicas(t)
	c1, err := client.New(client.Config{MetaAddr: addrsOf(svcs), Secret: testSecret, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	c2, err := client.New(client.Config{MetaAddr: addrsOf(svcs), Secret: testSecret, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	f := mk(t, c1, proto.RootIno, "f", syscall.S_IFREG|0o644)
	mustLock(t, c1, f.Ino, 1, proto.Lock{Start: 0, End: 4095, Type: proto.LockWrite})
	for _, s := range svcs {
		if s.Leading() {
			s.Close()
		}
	}
	wantRefused(t, c2, f.Ino, 1, proto.Lock{Start: 4095, End: 4095, Type: proto.LockWrite})
	mustLock(t, c2, f.Ino, 1, proto.Lock{Start: 4096, End: proto.LockEnd, Type: proto.LockWrite})
}

func TestMalformedLocksAreRefused(t *testing.T) {
	_, c := setup(t)
	f := mk(t, c, proto.RootIno, "f", syscall.S_IFREG|0o644)
	for _, l := range []proto.Lock{
		{Start: 10, End: 9, Type: proto.LockRead},
		{Start: 0, End: proto.LockEnd + 1, Type: proto.LockRead},
		{Start: 0, End: 9, Type: 7},
	} {
		_, _, err := c.SetLock(nil, f.Ino, 1, false, l, false)
		wantErrno(t, err, syscall.EINVAL)
	}
	_, _, err := c.SetLock(nil, 999999, 1, false, writeLock(), false)
	wantErrno(t, err, syscall.ENOENT)
}

func TestStatusCountsTheLocksHeld(t *testing.T) {
	svc, c := setup(t)
	f := mk(t, c, proto.RootIno, "f", syscall.S_IFREG|0o644)
	g := mk(t, c, proto.RootIno, "g", syscall.S_IFREG|0o644)
	mustLock(t, c, f.Ino, 1, proto.Lock{Start: 0, End: 9, Type: proto.LockRead})
	mustLock(t, c, f.Ino, 2, proto.Lock{Start: 0, End: 9, Type: proto.LockRead})
	mustLock(t, c, g.Ino, 1, writeLock())
	raw := rpc.NewClient(svc.Addr(), testSecret)
	defer raw.Close()
	var st proto.StatusReply
	if err := raw.Call(proto.OpStatus, nil, func(d *wire.Dec) error { st.Decode(d); return nil }); err != nil {
		t.Fatal(err)
	}
	if st.Locks != 3 || st.LockedFiles != 2 {
		t.Fatalf("status counts %d locks on %d files, want 3 on 2", st.Locks, st.LockedFiles)
	}
}
