package meta

import (
	"sync"
	"time"
)

// What a change that ended leases waits for, whatever the lease
// (directory leases, dirlease.go; file leases, filelease.go): until each
// holder's watch request has passed the change's index, which tells the
// leader the holder has dropped the lease, or until the lease has run out.

// ackKeep is how long a session's last acknowledgement is remembered
// after it was last heard of.
const ackKeep = time.Minute

type leaseAcks struct {
	mu      sync.Mutex
	acked   map[uint64]ackState // session → what its watch took in
	wake    chan struct{}       // closed and replaced when acked moves
	sweptAt time.Time
}

type ackState struct {
	index uint64
	at    time.Time
}

// revoked is a lease a change ended: the change is answered once the
// session has taken it in, or at end. Session 0 never acknowledges: it
// stands for the leases an earlier leader may have granted (fenceWait).
type revoked struct {
	session uint64
	end     time.Time
}

// fenceWait is the wait for the leases of an earlier leader, which this one
// does not know, when they may last until end.
func fenceWait(end, now time.Time) []revoked {
	if now.Before(end) {
		return []revoked{{0, end}}
	}
	return nil
}

func newLeaseAcks() *leaseAcks {
	return &leaseAcks{acked: map[uint64]ackState{}, wake: make(chan struct{})}
}

// reset forgets every acknowledgement: a new leader starts a new stream.
func (a *leaseAcks) reset() {
	a.mu.Lock()
	defer a.mu.Unlock()
	clear(a.acked)
}

// ack records that session's watch has taken in every change up to index.
func (a *leaseAcks) ack(session, index uint64, now time.Time) {
	if session == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sweepLocked(now)
	last := a.acked[session]
	a.acked[session] = ackState{max(index, last.index), now}
	if index > last.index {
		close(a.wake)
		a.wake = make(chan struct{})
	}
}

// settled reports whether a change at index may be answered: every lease
// in rs is over for it (its holder took it in, or it ended). If not, it
// returns when the next lease ends and a channel closed at the next
// acknowledgement.
func (a *leaseAcks) settled(rs []revoked, index uint64, now time.Time) (bool, time.Time, <-chan struct{}) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var next time.Time
	for _, r := range rs {
		if r.session != 0 && a.acked[r.session].index >= index || !now.Before(r.end) {
			continue
		}
		if next.IsZero() || r.end.Before(next) {
			next = r.end
		}
	}
	return next.IsZero(), next, a.wake
}

// wait returns once a change at index may be answered: every revoked
// lease's holder has taken it in or the lease has ended.
func (a *leaseAcks) wait(rs []revoked, index uint64, stop <-chan struct{}) {
	for len(rs) > 0 {
		done, next, wake := a.settled(rs, index, time.Now())
		if done {
			return
		}
		t := time.NewTimer(time.Until(next))
		select {
		case <-wake:
		case <-t.C:
		case <-stop:
			t.Stop()
			return
		}
		t.Stop()
	}
}

// sweepLocked forgets the acknowledgements of sessions not heard of for
// ackKeep, at most once a second.
func (a *leaseAcks) sweepLocked(now time.Time) {
	if now.Sub(a.sweptAt) < time.Second {
		return
	}
	a.sweptAt = now
	for s, st := range a.acked {
		if now.Sub(st.at) > ackKeep {
			delete(a.acked, s)
		}
	}
}
