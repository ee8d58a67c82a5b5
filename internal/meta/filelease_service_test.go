package meta_test

import (
	"syscall"
	"testing"
	"time"

	"tandemfs/internal/client"
	"tandemfs/internal/proto"
)

// File leases through the metadata service: a client that holds one opens
// the file without a call, yet sees every change another client made
// before it opened, because such a change is answered only after the
// holder has let go of its lease.

// openAttr is what an open does: the file's current attributes.
func openAttr(t *testing.T, c *client.Client, ino uint64) *proto.Inode {
	t.Helper()
	n, _, err := c.OpenAttr(ino)
	if err != nil {
		t.Fatalf("attributes for an open of %d: %v", ino, err)
	}
	return n
}

// writeAndClose writes data at 0 through a handle of c and closes it.
func writeAndClose(t *testing.T, c *client.Client, ino uint64, data []byte) {
	t.Helper()
	h, err := c.Open(openAttr(t, c, ino), syscall.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Write(data, 0); err != nil {
		t.Fatal(err)
	}
	if err := h.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
}

func TestAFileLeaseOpensWithoutACallWhileTheWatchRenewsIt(t *testing.T) {
	_, c := setup(t)
	waitWatching(t, c)
	f := mk(t, c, proto.RootIno, "f", 0o644)
	if c.FileLeases() != 1 {
		t.Fatalf("%d file leases after a create, want 1 on the new file", c.FileLeases())
	}
	// The client's own changes keep it, and the cache stays exact.
	writeAndClose(t, c, f.Ino, []byte("hello"))
	if _, err := c.SetAttr(&proto.SetAttrReq{Ino: f.Ino, Valid: proto.SetMode, Mode: 0o600}); err != nil {
		t.Fatal(err)
	}
	// Held past several terms: the watch renews it.
	time.Sleep(3 * proto.FileLeaseMs * time.Millisecond)
	before := c.MetaCalls()
	for range 100 {
		n := openAttr(t, c, f.Ino)
		if n.Size != 5 || n.Mode&0o777 != 0o600 {
			t.Fatalf("opened with size %d, mode %o; want 5, 600", n.Size, n.Mode&0o777)
		}
	}
	if calls := c.MetaCalls() - before; calls != 0 {
		t.Fatalf("%d metadata calls for 100 opens under a lease", calls)
	}
	st, err := c.Status()
	if err != nil || st.FileLeases != 1 || st.LeasedFiles != 1 {
		t.Fatalf("status: %d file leases on %d files (%v), want 1 on 1", st.FileLeases, st.LeasedFiles, err)
	}
}

func TestAnOpenSeesAChangeAnotherClientMadeAtOnce(t *testing.T) {
	svc, a := setup(t)
	b := newClient(t, svc)
	waitWatching(t, a)
	waitWatching(t, b)
	// A new leader answers changes to files only once any lease its
	// predecessor may have granted has run out.
	t0 := time.Now()
	first := mk(t, b, proto.RootIno, "first", 0o644)
	if _, err := b.SetAttr(&proto.SetAttrReq{Ino: first.Ino, Valid: proto.SetMode, Mode: 0o600}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(t0); took > proto.FileLeaseMs*time.Millisecond+500*time.Millisecond {
		t.Fatalf("the first change to a file took %v", took)
	}
	// As MPI ranks do: b changes a file a holds a lease on, then tells a
	// (here: returns); a's next open must see the change.
	changes := []struct {
		what   string
		change func(ino uint64) error
		check  func(n *proto.Inode) bool
	}{
		{"write and close", func(ino uint64) error {
			writeAndClose(t, b, ino, []byte("0123456789"))
			return nil
		}, func(n *proto.Inode) bool { return n.Size == 10 }},
		{"truncate", func(ino uint64) error {
			_, err := b.SetAttr(&proto.SetAttrReq{Ino: ino, Valid: proto.SetSize, Size: 3})
			return err
		}, func(n *proto.Inode) bool { return n.Size == 3 }},
		{"chmod", func(ino uint64) error {
			_, err := b.SetAttr(&proto.SetAttrReq{Ino: ino, Valid: proto.SetMode, Mode: 0o400})
			return err
		}, func(n *proto.Inode) bool { return n.Mode&0o777 == 0o400 }},
		{"link", func(ino uint64) error {
			_, err := b.Link(ino, proto.RootIno, "another-name")
			return err
		}, func(n *proto.Inode) bool { return n.Nlink == 2 }},
	}
	for _, ch := range changes {
		f := mk(t, a, proto.RootIno, ch.what, 0o644)
		openAttr(t, a, f.Ino)
		if a.FileLeases() == 0 {
			t.Fatal("no lease on a file the client made")
		}
		t0 = time.Now()
		if err := ch.change(f.Ino); err != nil {
			t.Fatalf("%s: %v", ch.what, err)
		}
		took := time.Since(t0)
		if n := openAttr(t, a, f.Ino); !ch.check(n) {
			t.Fatalf("%s by another client, just answered: the lease holder opens the old file (size %d, mode %o, nlink %d)",
				ch.what, n.Size, n.Mode&0o777, n.Nlink)
		}
		// The holder's watch let go of the lease long before it ran out.
		if took > 500*time.Millisecond {
			t.Fatalf("%s waited %v for the lease holder", ch.what, took)
		}
		t.Logf("%s of a leased file answered in %v", ch.what, took)
	}
}

func TestAFileHolderThatFallsSilentDelaysOthersAtMostOneTerm(t *testing.T) {
	svc, a := setup(t)
	b := newClient(t, svc)
	waitWatching(t, a)
	f := mk(t, a, proto.RootIno, "f", 0o644)
	time.Sleep(proto.FileLeaseMs * time.Millisecond / 2) // renewed meanwhile
	a.Close()                                            // its watch stops: it never lets go of the lease
	t0 := time.Now()
	if _, err := b.SetAttr(&proto.SetAttrReq{Ino: f.Ino, Valid: proto.SetMode, Mode: 0o600}); err != nil {
		t.Fatal(err)
	}
	took := time.Since(t0)
	if took > proto.FileLeaseMs*time.Millisecond+300*time.Millisecond {
		t.Fatalf("a chmod waited %v for a silent lease holder, more than the lease", took)
	}
	if took < 200*time.Millisecond {
		t.Fatalf("a chmod waited only %v: it did not wait for the silent holder's lease to end", took)
	}
	t.Logf("a chmod waited %v for a silent lease holder", took)
	// The file is not leased out again at once while others change it.
	c := newClient(t, svc)
	waitWatching(t, c)
	openAttr(t, c, f.Ino)
	if c.FileLeases() != 0 {
		t.Fatal("a file changed by one client while another held a lease was leased again at once")
	}
}
