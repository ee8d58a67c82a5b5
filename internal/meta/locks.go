package meta

import (
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
	"tandemfs/internal/wire"
)

// Cluster-wide file locks (proto/locks.go). Each file's locks are one
// record, l<ino>, holding every lock on it; the state machine grants or
// refuses a lock when it applies the request, so every replica agrees and
// a new leader has them all. Waiting for a lock is the leader's job: it
// holds a blocking request until the locks change, then proposes it again.

// heldLock is one lock record: whose, and which bytes.
type heldLock struct {
	proto.LockOwner
	proto.Lock
}

func lockKey(ino uint64) []byte { return u64Key(pLock, ino) }

func encodeLocks(held []heldLock) []byte {
	e := wire.NewEnc(nil)
	e.U32(uint32(len(held)))
	for i := range held {
		held[i].LockOwner.Encode(e)
		held[i].Lock.Encode(e)
	}
	return e.B
}

func decodeLocks(b []byte) ([]heldLock, error) {
	d := wire.NewDec(b)
	held := make([]heldLock, d.Count(proto.MaxLocksPerFile, 41))
	for i := range held {
		held[i].LockOwner.Decode(d)
		held[i].Lock.Decode(d)
	}
	return held, d.Finish()
}

func loadLocks(r reader, ino uint64) ([]heldLock, error) {
	v, ok, err := get(r, lockKey(ino))
	if err != nil || !ok {
		return nil, err
	}
	return decodeLocks(v)
}

// conflict returns a lock held by someone else that keeps owner from
// taking want: one of the same family (POSIX or flock) over a shared
// byte, where either is a write lock. The pid of another client's lock
// means nothing to the asker, so it reads 0.
func conflict(held []heldLock, owner proto.LockOwner, want proto.Lock) (proto.Lock, bool) {
	if want.Type == proto.LockUnlock {
		return proto.Lock{}, false
	}
	for _, h := range held {
		if h.Flock != owner.Flock || h.LockOwner == owner || !h.Overlaps(&want) {
			continue
		}
		if h.Type == proto.LockWrite || want.Type == proto.LockWrite {
			c := h.Lock
			if h.Session != owner.Session {
				c.Pid = 0
			}
			return c, true
		}
	}
	return proto.Lock{}, false
}

// applyLock returns held after owner sets want: owner's locks over want's
// range are cut away (split where want lies inside one), want is added
// unless it unlocks, and owner's locks of one type that touch are merged,
// as POSIX record locks behave. held itself is not modified.
func applyLock(held []heldLock, owner proto.LockOwner, want proto.Lock) []heldLock {
	out := make([]heldLock, 0, len(held)+2)
	for _, h := range held {
		if h.LockOwner != owner || !h.Overlaps(&want) {
			out = append(out, h)
			continue
		}
		if h.Start < want.Start {
			left := h
			left.End = want.Start - 1
			out = append(out, left)
		}
		if h.End > want.End {
			right := h
			right.Start = want.End + 1
			out = append(out, right)
		}
	}
	if want.Type != proto.LockUnlock {
		out = append(out, heldLock{owner, want})
	}
	return mergeOwner(out, owner)
}

// mergeOwner joins owner's adjacent locks of the same type into one, and
// keeps the list in a fixed order (by start, then owner) so every replica
// stores the same bytes.
func mergeOwner(held []heldLock, owner proto.LockOwner) []heldLock {
	sort.SliceStable(held, func(i, j int) bool {
		a, b := held[i], held[j]
		if a.Start != b.Start {
			return a.Start < b.Start
		}
		if a.Session != b.Session {
			return a.Session < b.Session
		}
		return a.Owner < b.Owner
	})
	out := held[:0]
	last := -1 // index in out of owner's last lock
	for _, h := range held {
		if h.LockOwner == owner && last >= 0 {
			prev := &out[last]
			if prev.Type == h.Type && h.Start <= prev.End+1 {
				prev.End = max(prev.End, h.End)
				continue
			}
		}
		out = append(out, h)
		if h.LockOwner == owner {
			last = len(out) - 1
		}
	}
	return out
}

// dropSession returns held without the locks of session.
func dropSession(held []heldLock, session uint64) []heldLock {
	out := held[:0:0]
	for _, h := range held {
		if h.Session != session {
			out = append(out, h)
		}
	}
	return out
}

func (t *tx) putLocks(ino uint64, held []heldLock) {
	if len(held) == 0 {
		t.b.Delete(lockKey(ino), nil)
	} else {
		t.b.Set(lockKey(ino), encodeLocks(held), nil)
	}
	t.onCommit(t.f.lockWake.wake)
}

// setLock applies a lock request: granted, or refused with the lock in the
// way (a refusal changes nothing). Unlocking a file that is gone succeeds:
// there is nothing left to hold.
func (t *tx) setLock(r *proto.SetLockReq, out *wire.Enc) error {
	if r.Lock.Type != proto.LockUnlock {
		if _, err := t.inode(r.Ino); err != nil {
			return err
		}
	}
	held, err := loadLocks(t.b, r.Ino)
	if err != nil {
		return err
	}
	reply := proto.LockReply{Granted: true}
	if c, ok := conflict(held, r.Owner, r.Lock); ok {
		reply = proto.LockReply{Conflict: c}
	} else {
		next := applyLock(held, r.Owner, r.Lock)
		if len(next) > proto.MaxLocksPerFile {
			return rpc.Errorf(syscall.ENOLCK, "file %d already has %d locks", r.Ino, len(held))
		}
		t.putLocks(r.Ino, next)
	}
	reply.Encode(out)
	return nil
}

// eachFileLocks calls fn with every file's locks (err: the record does not
// decode) until fn returns an error, which it returns.
func eachFileLocks(r reader, fn func(ino uint64, held []heldLock, err error) error) error {
	prefix := []byte{pLock}
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return err
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		held, err := decodeLocks(it.Value())
		if err := fn(decodeU64(it.Key()[1:]), held, err); err != nil {
			return err
		}
	}
	return it.Error()
}

// expireLocks drops every lock of a client session that went silent.
func (t *tx) expireLocks(session uint64) error {
	return eachFileLocks(t.b, func(ino uint64, held []heldLock, err error) error {
		if err != nil {
			return err
		}
		if kept := dropSession(held, session); len(kept) != len(held) {
			t.putLocks(ino, kept)
		}
		return nil
	})
}

// lockWake tells the leader's waiting lock requests that some file's
// locks changed, so they look again.
type lockWake struct {
	mu sync.Mutex
	ch chan struct{}
}

func newLockWake() *lockWake { return &lockWake{ch: make(chan struct{})} }

// changed returns a channel closed at the next change of any locks.
func (w *lockWake) changed() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ch
}

func (w *lockWake) wake() {
	w.mu.Lock()
	defer w.mu.Unlock()
	close(w.ch)
	w.ch = make(chan struct{})
}

// setLock serves a lock request on the leader. A request that conflicts
// is not proposed (a refusal would only lengthen the log); with WaitMs it
// waits for the locks to change and tries again until its time is up.
func (s *Service) setLock(r *proto.SetLockReq, out *wire.Enc) error {
	s.sessions.touch(r.Owner.Session)
	deadline := time.Now().Add(time.Duration(min(r.WaitMs, proto.MaxLockWait)) * time.Millisecond)
	for {
		changed := s.fsm.lockWake.changed() // before looking: no change is missed
		reply := proto.LockReply{Granted: true}
		held, err := loadLocks(s.fsm.db, r.Ino)
		if err != nil {
			return err
		}
		if c, ok := conflict(held, r.Owner, r.Lock); ok {
			reply = proto.LockReply{Conflict: c}
		} else {
			b, err := s.propose(proto.OpSetLock, r.Encode)
			if err != nil {
				return err
			}
			reply.Decode(wire.NewDec(b))
		}
		wait := time.Until(deadline)
		if reply.Granted || wait <= 0 {
			reply.Encode(out)
			return nil
		}
		timer := time.NewTimer(wait)
		select {
		case <-changed:
		case <-timer.C:
		case <-s.stop:
		}
		timer.Stop()
		if !s.serving.Load() {
			return rpc.Errorf(syscall.EAGAIN, "metadata replica %s is no longer the leader", s.cfg.ID)
		}
	}
}

// getLock answers F_GETLK: a lock that would keep owner from taking want.
func (s *Service) getLock(r *proto.GetLockReq, out *wire.Enc) error {
	if _, err := loadInode(s.fsm.db, r.Ino); err != nil {
		return err
	}
	held, err := loadLocks(s.fsm.db, r.Ino)
	if err != nil {
		return err
	}
	reply := proto.LockReply{Granted: true}
	if c, ok := conflict(held, r.Owner, r.Lock); ok {
		reply = proto.LockReply{Conflict: c}
	}
	reply.Encode(out)
	return nil
}

// lockLoop releases the locks of client sessions that went silent (a
// client that crashed, or one cut off for longer than the session
// timeout), so that other clients are not blocked forever.
func (s *Service) lockLoop() { s.every(s.cfg.SessionTimeout/4, s.sweepLocks) }

func (s *Service) sweepLocks() {
	if !s.judgingSessions() {
		return
	}
	for _, session := range s.silentLockHolders() {
		s.logf("client session %x went silent: releasing its file locks", session)
		if _, err := s.propose(opExpireLocks, func(e *wire.Enc) { e.U64(session) }); err != nil {
			return
		}
	}
}

// silentLockHolders lists the sessions holding locks that were not heard
// from within the session timeout.
func (s *Service) silentLockHolders() []uint64 {
	silent := map[uint64]bool{}
	var list []uint64
	eachFileLocks(s.fsm.db, func(_ uint64, held []heldLock, err error) error {
		if err != nil {
			return nil // a record that does not decode: skip it
		}
		for _, h := range held {
			if !silent[h.Session] && s.sessionSilent(h.Session) {
				silent[h.Session] = true
				list = append(list, h.Session)
			}
		}
		return nil
	})
	return list
}

// countLocks counts the locks held and the files they are on (for
// `tandem status`).
func countLocks(r reader) (locks, files uint32) {
	eachFileLocks(r, func(_ uint64, held []heldLock, err error) error {
		if err == nil {
			locks += uint32(len(held))
			files++
		}
		return nil
	})
	return locks, files
}
