package meta

import (
	"sync"
	"time"

	"tandemfs/internal/proto"
	"tandemfs/internal/wire"
)

// File leases, the leader's side (the contract is in proto/lease.go): a
// client holding one opens the file without a call, so every change to
// a regular file is answered only once the other holders have let go.
//
// The table lives in the leader's memory only, like the directory
// leases'. A lease ends FileLeaseMs after the later of its grant and its
// session's last watch request, and FileLeaseLifeMs after its grant at
// the latest; a new leader waits one term before answering changes to
// files, for the leases of its predecessor.

const (
	fileTerm = proto.FileLeaseMs * time.Millisecond
	fileLife = proto.FileLeaseLifeMs * time.Millisecond
)

type fileLeases struct {
	mu      sync.Mutex
	set     leaseSet             // stored with each lease: when it was granted
	count   map[uint64]int       // session → leases held
	renewed map[uint64]time.Time // session → its last watch request
}

func newFileLeases() *fileLeases {
	l := &fileLeases{}
	l.set.end = l.end
	l.set.removed = l.removed
	l.reset(time.Time{})
	return l
}

// reset forgets every lease; one granted before now by another leader
// may last until now+fileTerm.
func (l *fileLeases) reset(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.set.reset(now, fileTerm)
	l.count = map[uint64]int{}
	l.renewed = map[uint64]time.Time{}
}

// end is when session's lease granted at granted runs out.
func (l *fileLeases) end(session uint64, granted time.Time) time.Time {
	return minTime(granted.Add(fileLife), later(granted, l.renewed[session]).Add(fileTerm))
}

// removed forgets a session's count and renewal with its last lease.
func (l *fileLeases) removed(session uint64) {
	if l.count[session]--; l.count[session] == 0 {
		delete(l.count, session)
		delete(l.renewed, session)
	}
}

// grant gives session a lease on file, unless the file was revoked
// lately or the session holds the most it may.
func (l *fileLeases) grant(file, session uint64, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.set.sweep(now, fileTerm)
	if !l.set.grantable(file, session, now) {
		return false
	}
	if _, renewing := l.set.held[file][session]; !renewing {
		if l.count[session] >= proto.MaxFileLeases {
			return false
		}
		l.count[session]++
	}
	l.set.put(file, session, now)
	return true
}

// renew records a watch request of session: all its leases run
// fileTerm from now.
func (l *fileLeases) renew(session uint64, now time.Time) {
	if session == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.count[session] > 0 {
		l.renewed[session] = now
	}
}

// revoke ends the leases sessions other than by hold on files, and
// returns them, with the wait for an earlier leader's leases.
func (l *fileLeases) revoke(files []uint64, by uint64, now time.Time) []revoked {
	if len(files) == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.set.revoke(files, by, now)
}

// counts reports the live leases and the files they are on.
func (l *fileLeases) counts(now time.Time) (leases, files int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.set.live(now)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// fileLease serves proto.OpFileLease: the inode, with a lease on it when
// it is a regular file and the session may have one.
func (s *Service) fileLease(r *proto.InoReq, out *wire.Enc) error {
	db := s.fsm.db
	n, err := loadInode(db, r.Ino)
	if err != nil {
		return err
	}
	var reply proto.FileLeaseReply
	// As for directories, the lease is registered before the inode is
	// read again: a change applied later is revoked, one applied
	// earlier is in what is read.
	if n.isReg() && s.files.grant(r.Ino, r.Session, time.Now()) {
		reply.Granted = true
		reply.Index = s.fsm.events.appliedIndex()
		if n, err = loadInode(db, r.Ino); err != nil {
			s.files.drop(r.Ino, r.Session)
			return err
		}
	}
	reply.Inode = n.Inode
	reply.Encode(out)
	return nil
}

// release ends session's leases on files, which it gave back
// (proto.FileLeaseRelease).
func (l *fileLeases) release(session uint64, files []uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range files {
		l.set.remove(f, session)
	}
}

// drop ends session's lease on file (a grant that could not be completed).
func (l *fileLeases) drop(file, session uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.set.remove(file, session)
}

// afterFileChange runs once a command that changed regular files is
// applied at index, before it is answered: it waits until every other
// session holding a lease on them has taken the change in (or its lease
// has ended).
func (s *Service) afterFileChange(files []uint64, by, index uint64) {
	s.acks.wait(s.files.revoke(files, by, time.Now()), index, s.stop)
}
