package meta

import (
	"testing"
	"time"
)

// The leader forgets ended leases as it grants new ones, oldest first,
// without walking every lease it holds.

// dirStyle is a lease set whose stored time is the lease's end, as for
// directory leases.
func dirStyle(now time.Time) *leaseSet {
	s := &leaseSet{end: func(_ uint64, end time.Time) time.Time { return end }}
	s.reset(now, 0)
	return s
}

func TestEndedLeasesAreForgottenOldestFirst(t *testing.T) {
	now := time.Now()
	s := dirStyle(now)
	for i := uint64(1); i <= 3; i++ {
		s.put(i, 7, now.Add(time.Duration(i)*time.Second))
	}
	s.sweep(now.Add(2500*time.Millisecond), time.Hour)
	if len(s.held) != 1 || s.held[3] == nil {
		t.Fatalf("after 2.5 s the leases held are %v, want only the one ending at 3 s", s.held)
	}
	s.sweep(now.Add(3*time.Second), time.Hour)
	if len(s.held) != 0 || len(s.stored) != 0 {
		t.Fatalf("every lease ended, yet %d are held and %d remembered", len(s.held), len(s.stored))
	}
}

func TestARenewedLeaseOutlivesItsFirstEnd(t *testing.T) {
	now := time.Now()
	s := dirStyle(now)
	s.put(1, 7, now.Add(time.Second))
	s.put(2, 7, now.Add(2*time.Second))
	s.put(1, 7, now.Add(5*time.Second)) // renewed
	s.sweep(now.Add(3*time.Second), time.Hour)
	if _, ok := s.held[1][7]; !ok || s.held[2] != nil {
		t.Fatalf("at 3 s the leases held are %v, want only the renewed one", s.held)
	}
	if len(s.stored) != 1 {
		t.Fatalf("%d puts remembered, want only the renewal's", len(s.stored))
	}
}

func TestARemovedLeaseIsNotForgottenTwice(t *testing.T) {
	now := time.Now()
	removed := 0
	s := dirStyle(now)
	s.removed = func(uint64) { removed++ }
	s.put(1, 7, now.Add(time.Second))
	s.remove(1, 7)
	s.put(1, 8, now.Add(time.Second))
	s.sweep(now.Add(time.Minute), time.Hour)
	if removed != 2 || len(s.held) != 0 {
		t.Fatalf("%d removals, %d keys held; want 2 and none", removed, len(s.held))
	}
}

func TestASilentHoldersFileLeaseIsForgottenOnceEarlierOnesEnd(t *testing.T) {
	l := newFileLeases()
	now := time.Now()
	l.grant(1, 7, now) // session 7 keeps renewing: its lease lives its whole life
	for at := now; at.Before(now.Add(fileLife)); at = at.Add(fileTerm / 2) {
		l.renew(7, at)
		if at.Equal(now.Add(fileTerm)) {
			l.grant(2, 8, at) // session 8 never renews
		}
	}
	l.set.sweep(now.Add(fileLife-time.Millisecond), fileTerm)
	if leases, _ := l.counts(now.Add(fileLife - time.Millisecond)); leases != 1 {
		t.Fatalf("%d live leases just before the first's life ends, want 1 (session 8 fell silent)", leases)
	}
	if len(l.set.held) != 2 {
		t.Fatalf("held %v: the silent session's lease may stay until the one before it ends", l.set.held)
	}
	l.set.sweep(now.Add(fileLife+2*time.Second), fileTerm)
	if len(l.set.held) != 0 || len(l.count) != 0 || len(l.renewed) != 0 {
		t.Fatalf("after both ended: held %v, counts %v, renewals %v", l.set.held, l.count, l.renewed)
	}
}
