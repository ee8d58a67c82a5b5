package meta

import (
	"sync"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"tandemfs/internal/proto"
	"tandemfs/internal/wire"
)

// Directory leases, the leader's side (the contract is in proto/lease.go).
//
// The table lives in the leader's memory only. A new leader does not know
// the leases its predecessor granted, so until those have surely run out
// (fenceEnd) every change to a directory entry waits before it is answered.

// leaseTerm is how long a lease lasts on the leader.
const leaseTerm = proto.DirLeaseMs * time.Millisecond

// leaseQuiet is how long after a revocation a directory gets no new
// lease: clients that take turns changing one directory would otherwise
// wait for each other's watch at every change.
const leaseQuiet = 2 * time.Second

// ackKeep is how long a session's last acknowledgement is remembered
// after it was last heard of.
const ackKeep = time.Minute

type dirLeases struct {
	mu       sync.Mutex
	held     map[uint64]map[uint64]time.Time // directory → session → end
	quiet    map[uint64]time.Time            // directory → no grant before
	acked    map[uint64]ackState             // session → what its watch took in
	ackWake  chan struct{}                   // closed and replaced when acked moves
	fenceEnd time.Time                       // leases of an earlier leader end by then
	sweptAt  time.Time
}

type ackState struct {
	index uint64
	at    time.Time
}

// revoked is a lease a change ended: the change is answered once the
// session has taken it in, or at end.
type revoked struct {
	session uint64
	end     time.Time
}

func newDirLeases() *dirLeases {
	l := &dirLeases{ackWake: make(chan struct{})}
	l.reset(time.Time{})
	return l
}

// reset forgets every lease; one granted before now by another leader
// may last until now+leaseTerm.
func (l *dirLeases) reset(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held = map[uint64]map[uint64]time.Time{}
	l.quiet = map[uint64]time.Time{}
	l.acked = map[uint64]ackState{}
	l.fenceEnd = now.Add(leaseTerm)
}

// grant gives session a lease on dir, unless dir was revoked lately.
func (l *dirLeases) grant(dir, session uint64, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweepLocked(now)
	if session == 0 || now.Before(l.quiet[dir]) {
		return false
	}
	if l.held[dir] == nil {
		l.held[dir] = map[uint64]time.Time{}
	}
	l.held[dir][session] = now.Add(leaseTerm)
	return true
}

// drop ends session's lease on dir (a grant that could not be completed).
func (l *dirLeases) drop(dir, session uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.held[dir], session)
	if len(l.held[dir]) == 0 {
		delete(l.held, dir)
	}
}

// extend renews the leases session holds on every one of dirs, and
// reports whether it held a live lease on each.
func (l *dirLeases) extend(dirs []uint64, session uint64, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	all := session != 0
	for _, d := range dirs {
		end, ok := l.held[d][session]
		if !ok || !now.Before(end) {
			all = false
			continue
		}
		l.held[d][session] = now.Add(leaseTerm)
	}
	return all
}

// revoke ends the leases sessions other than by hold on dirs, and returns
// them.
func (l *dirLeases) revoke(dirs []uint64, by uint64, now time.Time) []revoked {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []revoked
	for _, d := range dirs {
		for session, end := range l.held[d] {
			if session == by {
				continue
			}
			delete(l.held[d], session)
			if now.Before(end) {
				out = append(out, revoked{session, end})
				l.quiet[d] = now.Add(leaseQuiet)
			}
		}
		if len(l.held[d]) == 0 {
			delete(l.held, d)
		}
	}
	return out
}

// ack records that session's watch has taken in every change up to index.
func (l *dirLeases) ack(session, index uint64, now time.Time) {
	if session == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.acked[session]
	l.acked[session] = ackState{max(index, a.index), now}
	if index > a.index {
		close(l.ackWake)
		l.ackWake = make(chan struct{})
	}
}

// settled reports whether a change at index may be answered: every lease
// in rs is over for it (its holder took it in, or it ended) and no lease
// of an earlier leader can be left. If not, it returns when the next
// lease ends and a channel closed at the next acknowledgement.
func (l *dirLeases) settled(rs []revoked, index uint64, now time.Time) (bool, time.Time, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var next time.Time
	if now.Before(l.fenceEnd) {
		next = l.fenceEnd
	}
	for _, r := range rs {
		if l.acked[r.session].index >= index || !now.Before(r.end) {
			continue
		}
		if next.IsZero() || r.end.Before(next) {
			next = r.end
		}
	}
	return next.IsZero(), next, l.ackWake
}

// wait returns once a change at index may be answered: every revoked
// lease's holder has taken it in or the lease has ended, and no lease of
// an earlier leader can be left.
func (l *dirLeases) wait(rs []revoked, index uint64, stop <-chan struct{}) {
	for {
		done, next, wake := l.settled(rs, index, time.Now())
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

// count reports the leases held and the directories they are on.
func (l *dirLeases) count(now time.Time) (leases, dirs int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, holders := range l.held {
		live := 0
		for _, end := range holders {
			if now.Before(end) {
				live++
			}
		}
		leases += live
		if live > 0 {
			dirs++
		}
	}
	return leases, dirs
}

// sweepLocked forgets ended leases, quiet periods and old
// acknowledgements, at most once per leaseTerm.
func (l *dirLeases) sweepLocked(now time.Time) {
	if now.Sub(l.sweptAt) < leaseTerm {
		return
	}
	l.sweptAt = now
	for d, holders := range l.held {
		for s, end := range holders {
			if !now.Before(end) {
				delete(holders, s)
			}
		}
		if len(holders) == 0 {
			delete(l.held, d)
		}
	}
	for d, until := range l.quiet {
		if !now.Before(until) {
			delete(l.quiet, d)
		}
	}
	for s, a := range l.acked {
		if now.Sub(a.at) > ackKeep {
			delete(l.acked, s)
		}
	}
}

// dirLease serves proto.OpDirLease: a lease and the directory's names, or
// a refusal.
func (s *Service) dirLease(r *proto.DirLeaseReq, out *wire.Enc) error {
	db := s.fsm.db
	if _, err := loadDir(db, r.Dir); err != nil {
		return err
	}
	var reply proto.DirLeaseReply
	// The lease is registered before the names are read: a change
	// applied later is revoked, one applied earlier is in the listing.
	if s.leases.grant(r.Dir, r.Session, time.Now()) {
		index := s.fsm.events.appliedIndex()
		names, ok, err := listNames(db, r.Dir, proto.MaxLeaseNames)
		if err != nil || !ok {
			s.leases.drop(r.Dir, r.Session)
			if err != nil {
				return err
			}
		} else {
			reply = proto.DirLeaseReply{Granted: true, Index: index, Names: names}
		}
	}
	reply.Encode(out)
	return nil
}

// listNames returns the names in directory dir, or false if there are
// more than limit.
func listNames(db reader, dir uint64, limit int) ([]string, bool, error) {
	prefix := dentKey(dir, "")
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, false, err
	}
	defer it.Close()
	var names []string
	for ok := it.First(); ok; ok = it.Next() {
		if len(names) == limit {
			return nil, false, it.Error()
		}
		names = append(names, string(it.Key()[len(prefix):]))
	}
	return names, true, it.Error()
}

// entryChange names the directories whose entries a successful change
// (create, link, unlink or rename: its decoded request and its reply)
// changed, the session that made it, and the directory it made (0 if
// none).
func entryChange(req decoder, reply []byte) (dirs []uint64, session, newDir uint64, ok bool) {
	switch r := req.(type) {
	case *proto.CreateReq:
		if r.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			var e proto.EntryReply
			e.Decode(wire.NewDec(reply))
			newDir = e.Inode.Ino
		}
		return []uint64{r.Parent}, r.Session, newDir, true
	case *proto.LinkReq:
		return []uint64{r.NewParent}, r.Session, 0, true
	case *proto.UnlinkReq:
		return []uint64{r.Parent}, r.Session, 0, true
	case *proto.RenameReq:
		if r.OldParent == r.NewParent {
			return []uint64{r.OldParent}, r.Session, 0, true
		}
		return []uint64{r.OldParent, r.NewParent}, r.Session, 0, true
	}
	return nil, 0, 0, false
}

// afterEntryChange runs once a change to directory entries is applied at
// index, before it is answered: it renews the caller's leases on the
// directories, grants it one on a directory it made, and waits until
// every other holder of a lease on them has taken the change in (or its
// lease has ended). It returns the proto.Lease* flags for the reply.
func (s *Service) afterEntryChange(dirs []uint64, session, newDir, index uint64) uint8 {
	s.leases.wait(s.leases.revoke(dirs, session, time.Now()), index, s.stop)
	// Renewed after the wait, so that the caller, which counts from
	// before its request, still has a lease when the answer comes.
	now := time.Now()
	var flags uint8
	if s.leases.extend(dirs, session, now) {
		flags |= proto.LeaseExtended
	}
	if newDir != 0 && s.grantNewDir(newDir, session, now) {
		flags |= proto.LeaseNewDir
	}
	return flags
}

// grantNewDir gives session a lease on the directory it just made, if
// nobody has put a name in it since.
func (s *Service) grantNewDir(dir, session uint64, now time.Time) bool {
	if !s.leases.grant(dir, session, now) {
		return false
	}
	if empty, err := dirEmpty(s.fsm.db, dir); err != nil || !empty {
		s.leases.drop(dir, session)
		return false
	}
	return true
}
