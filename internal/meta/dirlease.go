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
// What a change waits for is in leaseacks.go.

// leaseTerm is how long a lease lasts on the leader.
const leaseTerm = proto.DirLeaseMs * time.Millisecond

// leaseQuiet is how long after a revocation a directory (or file) gets
// no new lease: clients that take turns changing one directory would
// otherwise wait for each other's watch at every change.
const leaseQuiet = 2 * time.Second

type dirLeases struct {
	mu  sync.Mutex
	set leaseSet // stored with each lease: when it ends
}

func newDirLeases() *dirLeases {
	l := &dirLeases{}
	l.set.end = func(_ uint64, end time.Time) time.Time { return end }
	l.reset(time.Time{})
	return l
}

// reset forgets every lease; one granted before now by another leader
// may last until now+leaseTerm.
func (l *dirLeases) reset(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.set.reset(now, leaseTerm)
}

// grant gives session a lease on dir, unless dir was revoked lately.
func (l *dirLeases) grant(dir, session uint64, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.set.sweep(now, leaseTerm)
	if !l.set.grantable(dir, session, now) {
		return false
	}
	l.set.put(dir, session, now.Add(leaseTerm))
	return true
}

// drop ends session's lease on dir (a grant that could not be completed).
func (l *dirLeases) drop(dir, session uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.set.remove(dir, session)
}

// extend renews the leases session holds on every one of dirs, and
// reports whether it held a live lease on each.
func (l *dirLeases) extend(dirs []uint64, session uint64, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	all := session != 0
	for _, d := range dirs {
		end, ok := l.set.held[d][session]
		if !ok || !now.Before(end) {
			all = false
			continue
		}
		l.set.put(d, session, now.Add(leaseTerm))
	}
	return all
}

// revoke ends the leases sessions other than by hold on dirs, and returns
// them, with the wait for an earlier leader's leases.
func (l *dirLeases) revoke(dirs []uint64, by uint64, now time.Time) []revoked {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.set.revoke(dirs, by, now)
}

// count reports the leases held and the directories they are on.
func (l *dirLeases) count(now time.Time) (leases, dirs int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.set.live(now)
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

// entryChange describes a successful change to directory entries
// (create, link, unlink or rename: its decoded request and its reply).
type entryChange struct {
	dirs    []uint64 // the directories whose entries it changed
	session uint64   // the session that made it
	newDir  uint64   // the directory it made, if any
	newFile uint64   // the regular file it made, if any
}

// entryChangeOf describes the change req made, if it is one to
// directory entries.
func entryChangeOf(req decoder, reply []byte) (entryChange, bool) {
	switch r := req.(type) {
	case *proto.CreateReq:
		c := entryChange{dirs: []uint64{r.Parent}, session: r.Session}
		var e proto.EntryReply
		e.Decode(wire.NewDec(reply))
		switch e.Inode.Mode & syscall.S_IFMT {
		case syscall.S_IFDIR:
			c.newDir = e.Inode.Ino
		case syscall.S_IFREG:
			c.newFile = e.Inode.Ino
		}
		return c, true
	case *proto.LinkReq:
		return entryChange{dirs: []uint64{r.NewParent}, session: r.Session}, true
	case *proto.UnlinkReq:
		return entryChange{dirs: []uint64{r.Parent}, session: r.Session}, true
	case *proto.RenameReq:
		c := entryChange{dirs: []uint64{r.OldParent}, session: r.Session}
		if r.OldParent != r.NewParent {
			c.dirs = append(c.dirs, r.NewParent)
		}
		return c, true
	}
	return entryChange{}, false
}

// afterEntryChange runs once a change to directory entries is applied at
// index, before it is answered: it waits until every other holder of a
// lease on the directories has taken the change in (or its lease has
// ended), renews the caller's leases on them, and grants it one on a
// directory or file it made. It returns the proto.Lease* flags for the
// reply.
func (s *Service) afterEntryChange(c entryChange, index uint64) uint8 {
	s.acks.wait(s.leases.revoke(c.dirs, c.session, time.Now()), index, s.stop)
	// Renewed after the wait, so that the caller, which counts from
	// before its request, still has a lease when the answer comes.
	now := time.Now()
	var flags uint8
	if s.leases.extend(c.dirs, c.session, now) {
		flags |= proto.LeaseExtended
	}
	if c.newDir != 0 && s.grantNewDir(c.newDir, c.session, now) {
		flags |= proto.LeaseNewDir
	}
	if c.newFile != 0 && s.files.grant(c.newFile, c.session, now) {
		flags |= proto.LeaseNewFile
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
