package meta

import (
	"testing"
	"time"

	"tandemfs/internal/proto"
)

// The leader's file lease table: how long a lease lasts, and what a
// change to a leased file waits for.

func TestAFileLeaseLastsWhileItsSessionWatches(t *testing.T) {
	l, acks := newFileLeases(), newLeaseAcks()
	now := time.Now()
	if !l.grant(7, 1, now) {
		t.Fatal("lease refused")
	}
	// Renewed by each watch request: a lease granted long ago still
	// holds a change back, for a term past the last request.
	at := now.Add(10 * fileTerm)
	l.renew(1, at)
	changed := at.Add(fileTerm / 2)
	rs := l.revoke([]uint64{7}, 2, changed)
	if len(rs) != 1 || !rs[0].end.Equal(at.Add(fileTerm)) {
		t.Fatalf("a change by another session revoked %v, want session 1's lease ending a term after its last watch", rs)
	}
	if done, _, _ := acks.settled(rs, 5, changed); done {
		t.Fatal("settled before the holder took the change in")
	}
	acks.ack(1, 5, at)
	if done, _, _ := acks.settled(rs, 5, changed); !done {
		t.Fatal("not settled once the holder took the change in")
	}
	// Revoked: not leased again at once.
	if l.grant(7, 1, changed) || !l.grant(7, 1, changed.Add(leaseQuiet)) {
		t.Fatal("a file changed by another session is leased again at once, or never")
	}
}

func TestAFileLeaseEndsWithoutWatchOrPastItsLife(t *testing.T) {
	l := newFileLeases()
	now := time.Now()
	l.grant(7, 1, now)
	if rs := l.revoke([]uint64{7}, 2, now.Add(fileTerm)); len(rs) != 0 {
		t.Fatalf("a lease whose session never watched held a change back a term after its grant: %v", rs)
	}
	l.grant(8, 1, now)
	late := now.Add(fileLife)
	l.renew(1, late)
	if rs := l.revoke([]uint64{8}, 2, late); len(rs) != 0 {
		t.Fatalf("a lease past its life held a change back: %v", rs)
	}
	// Asking again starts a new life.
	l.grant(8, 1, late)
	if rs := l.revoke([]uint64{8}, 2, late); len(rs) != 1 {
		t.Fatalf("a renewed grant did not hold a change back: %v", rs)
	}
}

func TestOwnChangesKeepAFileLease(t *testing.T) {
	l := newFileLeases()
	now := time.Now()
	l.grant(7, 1, now)
	l.grant(7, 2, now)
	rs := l.revoke([]uint64{7}, 1, now)
	if len(rs) != 1 || rs[0].session != 2 {
		t.Fatalf("a change by session 1 revoked %v, want session 2's lease only", rs)
	}
	if leases, files := l.counts(now); leases != 1 || files != 1 {
		t.Fatalf("%d leases on %d files after the change, want session 1's", leases, files)
	}
}

func TestASessionHoldsABoundedNumberOfFileLeases(t *testing.T) {
	l := newFileLeases()
	now := time.Now()
	for f := range uint64(proto.MaxFileLeases) {
		if !l.grant(f+100, 1, now) {
			t.Fatalf("lease %d refused", f)
		}
	}
	if l.grant(1, 1, now) {
		t.Fatal("a lease past the bound was granted")
	}
	if !l.grant(100, 1, now) || !l.grant(1, 2, now) {
		t.Fatal("renewing a held lease, or another session's first, was refused")
	}
	// Leases the session gives back make room for as many new ones.
	l.release(1, []uint64{100, 101, 7}) // 7: never held
	if !l.grant(1, 1, now) || !l.grant(2, 1, now) || l.grant(3, 1, now) {
		t.Fatal("after two leases given back: not exactly two new ones granted")
	}
	if leases, _ := l.counts(now); leases != proto.MaxFileLeases+1 {
		t.Fatalf("%d leases live, want the session's %d and the other's one", leases, proto.MaxFileLeases)
	}
}

func TestANewLeaderWaitsOutItsPredecessorsFileLeases(t *testing.T) {
	l := newFileLeases()
	now := time.Now()
	l.reset(now)
	rs := l.revoke([]uint64{7}, 1, now)
	if len(rs) != 1 || !rs[0].end.Equal(now.Add(fileTerm)) {
		t.Fatalf("right after taking over a change to a file waits for %v, want a term", rs)
	}
	if rs := l.revoke([]uint64{7}, 1, now.Add(fileTerm)); len(rs) != 0 {
		t.Fatalf("a term after taking over a change still waits for %v", rs)
	}
}
