package meta

import "time"

// leaseSet is what the leader keeps for one kind of lease (directory
// leases, dirlease.go; file leases, filelease.go): the sessions holding
// a lease on each directory or file, the quiet period after a revocation,
// and the wait for the leases of an earlier leader. Its owner holds the
// lock and says how a lease's end follows from the time stored with it.
type leaseSet struct {
	held     map[uint64]map[uint64]time.Time // directory or file → session → stored time
	quiet    map[uint64]time.Time            // directory or file → no grant before
	fenceEnd time.Time                       // leases of an earlier leader end by then
	sweptAt  time.Time                       // of quiet
	// stored lists every put, oldest first, so that sweep finds the
	// ended leases without walking all of held (on the leader's apply
	// path a walk of 65,536 file leases took tens of milliseconds).
	stored []storedLease

	// end is when session's lease, stored with t, ends.
	end func(session uint64, t time.Time) time.Time
	// removed, if set, is told of every lease taken out of held.
	removed func(session uint64)
}

// reset forgets every lease; one granted before now by another leader
// may last until now+term.
func (s *leaseSet) reset(now time.Time, term time.Duration) {
	s.held = map[uint64]map[uint64]time.Time{}
	s.quiet = map[uint64]time.Time{}
	s.stored = nil
	s.fenceEnd = now.Add(term)
}

// grantable reports whether key may be leased to session now: not
// revoked lately.
func (s *leaseSet) grantable(key, session uint64, now time.Time) bool {
	return session != 0 && !now.Before(s.quiet[key])
}

// put stores session's lease on key with t.
func (s *leaseSet) put(key, session uint64, t time.Time) {
	if s.held[key] == nil {
		s.held[key] = map[uint64]time.Time{}
	}
	s.held[key][session] = t
	s.stored = append(s.stored, storedLease{key, session, t})
}

// storedLease is one put: key leased to session with t.
type storedLease struct {
	key, session uint64
	t            time.Time
}

// remove takes session's lease on key out, if it holds one.
func (s *leaseSet) remove(key, session uint64) {
	if _, ok := s.held[key][session]; !ok {
		return
	}
	delete(s.held[key], session)
	if len(s.held[key]) == 0 {
		delete(s.held, key)
	}
	if s.removed != nil {
		s.removed(session)
	}
}

// revoke ends the leases sessions other than by hold on keys, and returns
// those still running, with the wait for an earlier leader's leases.
func (s *leaseSet) revoke(keys []uint64, by uint64, now time.Time) []revoked {
	out := fenceWait(s.fenceEnd, now)
	for _, k := range keys {
		for session, t := range s.held[k] {
			if session == by {
				continue
			}
			end := s.end(session, t) // before remove, which may forget what it follows from
			s.remove(k, session)
			if now.Before(end) {
				out = append(out, revoked{session, end})
				s.quiet[k] = now.Add(leaseQuiet)
			}
		}
	}
	return out
}

// live counts the leases running at now, and the directories or files
// they are on.
func (s *leaseSet) live(now time.Time) (leases, keys int) {
	for _, sessions := range s.held {
		n := 0
		for session, t := range sessions {
			if now.Before(s.end(session, t)) {
				n++
			}
		}
		leases += n
		if n > 0 {
			keys++
		}
	}
	return leases, keys
}

// sweep forgets ended leases, and ended quiet periods at most once per
// every.
func (s *leaseSet) sweep(now time.Time, every time.Duration) {
	s.forgetEnded(now)
	if now.Sub(s.sweptAt) < every {
		return
	}
	s.sweptAt = now
	for k, until := range s.quiet {
		if !now.Before(until) {
			delete(s.quiet, k)
		}
	}
}

// forgetEnded removes ended leases in the order they were stored and
// stops at the first one still running. Leases end in that order, but
// for a file lease whose holder stopped renewing: that one ends before
// the leases others were given earlier and is forgotten after them, at
// most a lease's life later. Nothing depends on forgetting it sooner:
// whatever reads held works out each lease's end.
func (s *leaseSet) forgetEnded(now time.Time) {
	for len(s.stored) > 0 {
		l := s.stored[0]
		t, ok := s.held[l.key][l.session]
		if ok && t.Equal(l.t) { // not renewed or removed since
			if now.Before(s.end(l.session, t)) {
				return
			}
			s.remove(l.key, l.session)
		}
		s.stored = s.stored[1:]
	}
}
