package proto

import (
	"fmt"

	"tandemfs/internal/wire"
)

// File locks held for every client of the cluster: POSIX record locks
// (fcntl F_SETLK, including open file description locks) and BSD flock
// locks. They live in the metadata state machine, so every client sees
// the same locks and a metadata failover keeps them; a client session
// that goes silent loses its locks when the session expires.

// Lock types, as Linux numbers F_RDLCK, F_WRLCK and F_UNLCK.
const (
	LockRead   uint32 = 0
	LockWrite  uint32 = 1
	LockUnlock uint32 = 2
)

// LockEnd is the end of a lock "to the end of the file" (OFFSET_MAX).
const LockEnd uint64 = 1<<63 - 1

// MaxLockWait bounds how long the leader holds a blocking lock request
// before answering "not granted" (the client then asks again).
const MaxLockWait = 10_000

// MaxLocksPerFile bounds the lock records of one file: beyond it a new
// lock is refused with ENOLCK, as a kernel out of lock records does.
const MaxLocksPerFile = 4096

// LockOwner says whose a lock is: a client session, the owner the kernel
// names (a process's file table for POSIX locks, an open file for flock
// and open file description locks), and which family the lock belongs
// to. POSIX and flock locks never conflict with each other, as on Linux.
type LockOwner struct {
	Session uint64
	Owner   uint64
	Flock   bool
}

// Lock is a byte range [Start, End] (End inclusive) locked for reading or
// writing. Pid is the locking process as its client saw it.
type Lock struct {
	Start, End uint64
	Type       uint32
	Pid        uint32
}

// Overlaps reports whether the two ranges share a byte.
func (l *Lock) Overlaps(o *Lock) bool { return l.Start <= o.End && o.Start <= l.End }

// Validate refuses ranges and types the kernel never sends.
func (l *Lock) Validate() error {
	if l.Type > LockUnlock {
		return fmt.Errorf("lock type %d is none of read (0), write (1), unlock (2)", l.Type)
	}
	if l.Start > l.End || l.End > LockEnd {
		return fmt.Errorf("lock range %d-%d is empty or beyond the largest offset", l.Start, l.End)
	}
	return nil
}

func (o *LockOwner) Encode(e *wire.Enc) { e.U64(o.Session); e.U64(o.Owner); e.Bool(o.Flock) }
func (o *LockOwner) Decode(d *wire.Dec) { o.Session = d.U64(); o.Owner = d.U64(); o.Flock = d.Bool() }

func (l *Lock) Encode(e *wire.Enc) { e.U64(l.Start); e.U64(l.End); e.U32(l.Type); e.U32(l.Pid) }
func (l *Lock) Decode(d *wire.Dec) {
	l.Start, l.End, l.Type, l.Pid = d.U64(), d.U64(), d.U32(), d.U32()
	if d.Err() == nil {
		if err := l.Validate(); err != nil {
			d.Fail(err)
		}
	}
}

// SetLockReq takes (read or write) or releases (unlock) Lock on file Ino
// for Owner. With WaitMs > 0 a request that conflicts waits up to WaitMs
// on the leader for the conflicting locks to go.
type SetLockReq struct {
	Ino    uint64
	Owner  LockOwner
	Lock   Lock
	WaitMs uint32
}

func (r *SetLockReq) Encode(e *wire.Enc) {
	e.U64(r.Ino)
	r.Owner.Encode(e)
	r.Lock.Encode(e)
	e.U32(r.WaitMs)
}

func (r *SetLockReq) Decode(d *wire.Dec) {
	r.Ino = d.U64()
	r.Owner.Decode(d)
	r.Lock.Decode(d)
	r.WaitMs = d.U32()
}

// LockReply answers SetLockReq (Granted, or else a conflicting lock) and
// GetLockReq (Granted: nothing conflicts; otherwise Conflict is one lock
// that does, with Pid 0 when another client holds it).
type LockReply struct {
	Granted  bool
	Conflict Lock
}

func (r *LockReply) Encode(e *wire.Enc) { e.Bool(r.Granted); r.Conflict.Encode(e) }
func (r *LockReply) Decode(d *wire.Dec) { r.Granted = d.Bool(); r.Conflict.Decode(d) }

// GetLockReq asks whether Owner could take Lock on file Ino (F_GETLK).
type GetLockReq struct {
	Ino   uint64
	Owner LockOwner
	Lock  Lock
}

func (r *GetLockReq) Encode(e *wire.Enc) { e.U64(r.Ino); r.Owner.Encode(e); r.Lock.Encode(e) }
func (r *GetLockReq) Decode(d *wire.Dec) { r.Ino = d.U64(); r.Owner.Decode(d); r.Lock.Decode(d) }
