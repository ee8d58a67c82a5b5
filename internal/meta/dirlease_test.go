package meta

import (
	"testing"
	"time"
)

// The leader's lease table: what a change to a leased directory waits for.

func TestANewLeaderWaitsOutItsPredecessorsLeases(t *testing.T) {
	l, acks := newDirLeases(), newLeaseAcks()
	now := time.Now()
	l.reset(now)
	rs := l.revoke([]uint64{9}, 1, now)
	if done, next, _ := acks.settled(rs, 1, now); done || !next.Equal(now.Add(leaseTerm)) {
		t.Fatalf("right after taking over: settled %v, next %v; want to wait %v", done, next.Sub(now), leaseTerm)
	}
	if done, _, _ := acks.settled(rs, 1, now.Add(leaseTerm)); !done {
		t.Fatal("a change still waits once every earlier lease has surely ended")
	}
}

func TestAChangeWaitsForOtherHoldersOnly(t *testing.T) {
	l, acks := newDirLeases(), newLeaseAcks()
	now := time.Now()
	for _, s := range []uint64{1, 2, 3} {
		if !l.grant(9, s, now) {
			t.Fatalf("lease for session %d refused", s)
		}
	}
	rs := l.revoke([]uint64{9}, 1, now)
	if len(rs) != 2 {
		t.Fatalf("a change by session 1 revoked %d leases, want the 2 of others", len(rs))
	}
	if !l.extend([]uint64{9}, 1, now) {
		t.Fatal("the changer's own lease was revoked")
	}
	if done, _, _ := acks.settled(rs, 5, now); done {
		t.Fatal("settled before the holders took the change in")
	}
	acks.ack(2, 5, now)
	acks.ack(3, 4, now) // not yet at the change
	if done, next, _ := acks.settled(rs, 5, now); done || !next.Equal(now.Add(leaseTerm)) {
		t.Fatalf("with one holder behind: settled %v, next %v", done, next.Sub(now))
	}
	if done, _, _ := acks.settled(rs, 5, now.Add(leaseTerm)); !done {
		t.Fatal("a lease that ran out still holds a change back")
	}
	acks.ack(3, 6, now)
	if done, _, _ := acks.settled(rs, 5, now); !done {
		t.Fatal("not settled after every holder took the change in")
	}
	// Revoked lately: no new lease on the directory for a while.
	if l.grant(9, 2, now) || !l.grant(9, 2, now.Add(leaseQuiet)) {
		t.Fatal("a revoked directory is leased again at once, or never")
	}
}

func TestAnEndedLeaseIsNotRenewed(t *testing.T) {
	l := newDirLeases()
	now := time.Now()
	l.grant(9, 1, now)
	if l.extend([]uint64{9}, 1, now.Add(leaseTerm)) {
		t.Fatal("a lease was renewed after it ended")
	}
	if l.extend([]uint64{9, 10}, 1, now) {
		t.Fatal("renewal reported for a directory without a lease")
	}
}
