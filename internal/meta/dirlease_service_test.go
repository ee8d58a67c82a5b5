package meta_test

import (
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"tandemfs/internal/client"
	"tandemfs/internal/proto"
)

// Directory leases through the metadata service: a client that holds one
// answers "no such name" itself, yet a name another client creates is
// found at once, because the change is answered only after the holder
// has let go of its lease.

// waitLease waits until c holds n directory leases (they are asked for in
// the background).
func waitLease(t *testing.T, c *client.Client, n int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for c.DirLeases() < n {
		if time.Now().After(deadline) {
			t.Fatalf("the client holds %d directory leases, want %d", c.DirLeases(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// missing looks up names that are not in dir and fails unless each is
// ENOENT.
func missing(t *testing.T, c *client.Client, dir uint64, names ...string) {
	t.Helper()
	for _, name := range names {
		if _, err := c.Lookup(dir, name); !errors.Is(err, syscall.ENOENT) {
			t.Fatalf("lookup of %q, which does not exist: %v", name, err)
		}
	}
}

// leaseOn makes c ask for (by missing two names) and get a lease on dir.
func leaseOn(t *testing.T, c *client.Client, dir uint64) {
	t.Helper()
	held := c.DirLeases()
	missing(t, c, dir, "no-such-1", "no-such-2")
	waitLease(t, c, held+1)
}

func TestALeaseAnswersMissingNamesWithoutAsking(t *testing.T) {
	svc, a := setup(t)
	b := newClient(t, svc)
	waitWatching(t, a)
	// A new leader answers changes to directories only once any lease
	// its predecessor may have granted has run out.
	t0 := time.Now()
	mk(t, a, proto.RootIno, "first", 0o644)
	if took := time.Since(t0); took > proto.DirLeaseMs*time.Millisecond+500*time.Millisecond {
		t.Fatalf("the first change took %v", took)
	}

	// A directory the client made comes with a lease: it is empty.
	d := mk(t, a, proto.RootIno, "d", syscall.S_IFDIR|0o755)
	if a.DirLeases() != 1 {
		t.Fatalf("%d leases after mkdir, want 1", a.DirLeases())
	}
	before := a.MetaCalls()
	for i := 0; i < 100; i++ {
		missing(t, a, d.Ino, fmt.Sprintf("f%d", i))
	}
	if calls := a.MetaCalls() - before; calls != 0 {
		t.Fatalf("%d metadata calls for 100 missing names under a lease", calls)
	}

	// A directory made elsewhere: two misses ask for a lease.
	waitWatching(t, b)
	e := mk(t, b, proto.RootIno, "e", syscall.S_IFDIR|0o755)
	mk(t, b, e.Ino, "there", 0o644)
	leaseOn(t, a, e.Ino)
	before = a.MetaCalls()
	missing(t, a, e.Ino, "x", "y", "z")
	if calls := a.MetaCalls() - before; calls != 0 {
		t.Fatalf("%d metadata calls for missing names under a granted lease", calls)
	}
	if n, err := a.Lookup(e.Ino, "there"); err != nil || n == nil {
		t.Fatalf("a name in the lease's listing: %v", err)
	}
	st, err := a.Status()
	if err != nil || st.DirLeases < 2 || st.LeasedDirs < 1 {
		t.Fatalf("status: %d directory leases on %d directories (%v); a and b hold leases on e", st.DirLeases, st.LeasedDirs, err)
	}
}

func TestOwnChangesKeepTheLeaseAndItsListingExact(t *testing.T) {
	_, c := setup(t)
	waitWatching(t, c)
	d := mk(t, c, proto.RootIno, "d", syscall.S_IFDIR|0o755)
	for i := 0; i < 30; i++ {
		mk(t, c, d.Ino, fmt.Sprintf("f%d", i), 0o644)
		if i%10 == 0 {
			// Past the lease's term in all: creates renew it.
			time.Sleep(proto.DirLeaseMs * time.Millisecond * 2 / 5)
		}
	}
	for i := 0; i < 10; i++ {
		if err := c.Unlink(d.Ino, fmt.Sprintf("f%d", i), false); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Rename(d.Ino, "f10", d.Ino, "renamed", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Link(mk(t, c, proto.RootIno, "outside", 0o644).Ino, d.Ino, "linked"); err != nil {
		t.Fatal(err)
	}
	if c.DirLeases() == 0 {
		t.Fatal("the client's own changes ended its lease")
	}
	before := c.MetaCalls()
	missing(t, c, d.Ino, "f0", "f9", "f10", "nothing")
	if calls := c.MetaCalls() - before; calls != 0 {
		t.Fatalf("%d metadata calls for names the lease knows are gone", calls)
	}
	for _, name := range []string{"f11", "f29", "renamed", "linked"} {
		if _, err := c.Lookup(d.Ino, name); err != nil {
			t.Fatalf("%q, made by the client under its lease: %v", name, err)
		}
	}
}

func TestANameCreatedByAnotherClientIsFoundAtOnce(t *testing.T) {
	svc, a := setup(t)
	b := newClient(t, svc)
	waitWatching(t, a)
	waitWatching(t, b)
	outside := mk(t, b, proto.RootIno, "outside", 0o644)
	// As MPI ranks do: b changes a directory a holds a lease on, then
	// tells a (here: returns); a must see the change at once, without
	// waiting for any cache to expire.
	changes := []struct {
		what   string
		change func(dir uint64) error
	}{
		{"create", func(dir uint64) error {
			_, err := b.Create(&proto.CreateReq{Parent: dir, Name: "x", Mode: syscall.S_IFREG | 0o644})
			return err
		}},
		{"mkdir", func(dir uint64) error {
			_, err := b.Create(&proto.CreateReq{Parent: dir, Name: "x", Mode: syscall.S_IFDIR | 0o755})
			return err
		}},
		{"link", func(dir uint64) error { _, err := b.Link(outside.Ino, dir, "x"); return err }},
		{"rename into", func(dir uint64) error {
			mk(t, b, proto.RootIno, "moving", 0o644)
			return b.Rename(proto.RootIno, "moving", dir, "x", 0)
		}},
	}
	for i, ch := range changes {
		d := mk(t, a, proto.RootIno, fmt.Sprintf("d%d", i), syscall.S_IFDIR|0o755)
		missing(t, a, d.Ino, "x")
		t0 := time.Now()
		if err := ch.change(d.Ino); err != nil {
			t.Fatalf("%s: %v", ch.what, err)
		}
		took := time.Since(t0)
		if _, err := a.Lookup(d.Ino, "x"); err != nil {
			t.Fatalf("%s by another client, just answered: the lease holder does not see it: %v", ch.what, err)
		}
		// The holder's watch let go of the lease long before it ran out.
		if took > 500*time.Millisecond {
			t.Fatalf("%s waited %v for the lease holder", ch.what, took)
		}
		t.Logf("%s in a leased directory answered in %v", ch.what, took)
	}
}

func TestAHolderThatFallsSilentDelaysOthersAtMostOneLease(t *testing.T) {
	svc, a := setup(t)
	b := newClient(t, svc)
	waitWatching(t, a)
	d := mk(t, a, proto.RootIno, "d", syscall.S_IFDIR|0o755)
	a.Close() // its watch stops: it never lets go of the lease
	t0 := time.Now()
	mk(t, b, d.Ino, "x", 0o644)
	took := time.Since(t0)
	if took > proto.DirLeaseMs*time.Millisecond+500*time.Millisecond {
		t.Fatalf("a create waited %v for a silent lease holder, more than the lease", took)
	}
	t.Logf("a create waited %v for a silent lease holder", took)
	// The directory is not leased out again while others change it.
	c := newClient(t, svc)
	waitWatching(t, c)
	missing(t, c, d.Ino, "y", "z")
	time.Sleep(100 * time.Millisecond)
	if c.DirLeases() != 0 {
		t.Fatal("a directory changed by one client while another held a lease was leased again at once")
	}
}
