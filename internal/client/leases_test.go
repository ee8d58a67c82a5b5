package client

import (
	"testing"
	"time"

	"tandemfs/internal/proto"
)

// The rules that keep a lease's listing from ever lacking a name the
// directory has, each with the change index it turns on.

const dir = 7

// leased returns a table holding a lease on dir, granted as of index 10
// with names a and b.
func leased(t *testing.T) (*leaseTable, time.Time) {
	t.Helper()
	tab := newLeaseTable()
	now := time.Now()
	tab.misses[dir] = now
	if !tab.missed(dir, now) {
		t.Fatal("a second miss did not ask for a lease")
	}
	tab.granted(dir, &proto.DirLeaseReply{Granted: true, Index: 10, Names: []string{"a", "b"}}, true, now)
	return tab, now
}

func wantAbsent(t *testing.T, tab *leaseTable, name string, now time.Time, want bool) {
	t.Helper()
	if got := tab.absent(dir, name, now); got != want {
		t.Fatalf("absent(%q) = %v, want %v", name, got, want)
	}
}

func TestALeaseKnowsItsListing(t *testing.T) {
	tab, now := leased(t)
	wantAbsent(t, tab, "a", now, false)
	wantAbsent(t, tab, "c", now, true)
	// Trusted for nine tenths of its term from the request, no longer.
	wantAbsent(t, tab, "c", now.Add(leaseTrust-time.Millisecond), true)
	wantAbsent(t, tab, "c", now.Add(leaseTrust), false)
}

func TestALeaseSaysHowMuchLongerItVouchesForAnAbsence(t *testing.T) {
	tab, now := leased(t)
	if got := tab.absentFor(dir, "c", now.Add(100*time.Millisecond)); got != leaseTrust-100*time.Millisecond {
		t.Fatalf("absentFor(c) 100 ms into the lease = %v, want %v", got, leaseTrust-100*time.Millisecond)
	}
	if got := tab.absentFor(dir, "a", now); got != 0 {
		t.Fatalf("absentFor(a), a listed name, = %v, want 0", got)
	}
	if got := tab.absentFor(dir+1, "c", now); got != 0 {
		t.Fatalf("absentFor in a directory without a lease = %v, want 0", got)
	}
	if got := tab.absentFor(dir, "c", now.Add(leaseTrust)); got != 0 {
		t.Fatalf("absentFor(c) once the lease ran out = %v, want 0", got)
	}
}

func TestOwnChangesAfterTheListingUpdateIt(t *testing.T) {
	tab, now := leased(t)
	tab.own(dir, ownChange{11, "c", true}, false, now)
	tab.own(dir, ownChange{12, "a", false}, false, now)
	wantAbsent(t, tab, "c", now, false)
	wantAbsent(t, tab, "a", now, true)
	// A change the listing already holds is not applied again: "b" may
	// have been made again by someone else between index 9 and 10.
	tab.own(dir, ownChange{9, "b", false}, false, now)
	wantAbsent(t, tab, "b", now, false)
}

func TestOwnChangesRenewOnlyWhenTheLeaderSaysSo(t *testing.T) {
	tab, now := leased(t)
	later := now.Add(500 * time.Millisecond)
	tab.own(dir, ownChange{11, "c", true}, false, later)
	wantAbsent(t, tab, "z", now.Add(leaseTrust), false)
	tab.own(dir, ownChange{12, "d", true}, true, later)
	wantAbsent(t, tab, "z", now.Add(leaseTrust), true)
}

func TestAnotherClientsChangeAfterTheListingEndsTheLease(t *testing.T) {
	tab, now := leased(t)
	if tab.foreign(dir, 10) {
		t.Fatal("a change the listing already holds ended the lease")
	}
	wantAbsent(t, tab, "c", now, true)
	if !tab.foreign(dir, 11) {
		t.Fatal("a newer change by another client did not end the lease")
	}
	wantAbsent(t, tab, "c", now, false)
}

func TestWhatHappensWhileALeaseIsAskedFor(t *testing.T) {
	now := time.Now()
	ask := func() *leaseTable {
		tab := newLeaseTable()
		tab.misses[dir] = now
		if !tab.missed(dir, now) {
			t.Fatal("no lease asked for")
		}
		return tab
	}
	reply := &proto.DirLeaseReply{Granted: true, Index: 10, Names: []string{"a"}}

	// Another client's change newer than the listing: refused.
	tab := ask()
	tab.foreign(dir, 11)
	tab.granted(dir, reply, true, now)
	wantAbsent(t, tab, "x", now, false)

	// One the listing holds: granted.
	tab = ask()
	tab.foreign(dir, 10)
	tab.granted(dir, reply, true, now)
	wantAbsent(t, tab, "x", now, true)

	// The client's own changes meanwhile are applied if newer.
	tab = ask()
	tab.own(dir, ownChange{9, "a", false}, false, now)
	tab.own(dir, ownChange{11, "x", true}, false, now)
	tab.granted(dir, reply, true, now)
	wantAbsent(t, tab, "a", now, false)
	wantAbsent(t, tab, "x", now, false)
	wantAbsent(t, tab, "y", now, true)

	// A lost watch spoils the answer.
	tab = ask()
	tab.clear()
	tab.granted(dir, reply, true, now)
	wantAbsent(t, tab, "y", now, false)
}

func TestANewDirectoryChangedByOthersBeforeTheReplyGetsNoLease(t *testing.T) {
	tab := newLeaseTable()
	now := time.Now()
	// The notice of another client's create in the new directory (at
	// 12) came before the reply to the mkdir (at 10) that granted it.
	tab.foreign(dir, 12)
	tab.newDir(dir, 10, now)
	if tab.held(now) != 0 {
		t.Fatal("a lease was taken on a directory another client had already changed")
	}
	tab.newDir(dir+1, 10, now)
	if tab.held(now) != 1 {
		t.Fatal("no lease on a new directory nobody else changed")
	}
}
