package client

import (
	"sync"
	"syscall"

	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
	"tandemfs/internal/wire"
)

// File locks are the metadata service's (proto/locks.go): every client
// of the cluster sees the same ones. This client only remembers which
// owners may hold locks on which files, so that closing a file releases
// them with one call and closing any other file costs nothing.

// lockWaitSlice is how long one blocking request waits on the leader. A
// waiting application that gets a signal learns of it within this time
// (the request in flight is let finish, so a lock granted meanwhile is
// reported as taken, never left held behind the application's back).
const lockWaitSlice = 250

// lockHolder names an owner's locks of one family on one file.
type lockHolder struct {
	ino   uint64
	owner uint64
	flock bool
}

// lockBook remembers the owners that took locks through this client.
type lockBook struct {
	mu   sync.Mutex
	held map[lockHolder]struct{}
}

func (b *lockBook) add(h lockHolder) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held == nil {
		b.held = map[lockHolder]struct{}{}
	}
	b.held[h] = struct{}{}
}

// take forgets h and reports whether it was there.
func (b *lockBook) take(h lockHolder) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.held[h]
	delete(b.held, h)
	return ok
}

func (c *Client) lockOwner(owner uint64, flock bool) proto.LockOwner {
	return proto.LockOwner{Session: c.session, Owner: owner, Flock: flock}
}

// SetLock takes (read or write) or releases (unlock) l on file ino for
// owner. Without wait it answers at once: granted, or the lock in the
// way. With wait it blocks until granted, or until cancel is closed
// (EINTR).
func (c *Client) SetLock(cancel <-chan struct{}, ino, owner uint64, flock bool, l proto.Lock, wait bool) (granted bool, conflict proto.Lock, err error) {
	if err := l.Validate(); err != nil {
		return false, proto.Lock{}, rpc.Errorf(syscall.EINVAL, "%v", err)
	}
	req := proto.SetLockReq{Ino: ino, Owner: c.lockOwner(owner, flock), Lock: l}
	if wait {
		req.WaitMs = lockWaitSlice
	}
	if l.Type != proto.LockUnlock {
		// Before the request: a grant whose reply is lost is still
		// released when the owner closes the file.
		c.locks.add(lockHolder{ino, owner, flock})
	}
	for {
		var reply proto.LockReply
		err := c.metaCall(proto.OpSetLock, req.Encode, func(d *wire.Dec) error { reply.Decode(d); return nil })
		if err != nil || reply.Granted || !wait {
			return reply.Granted, reply.Conflict, err
		}
		select {
		case <-cancel:
			return false, reply.Conflict, rpc.Errorf(syscall.EINTR, "interrupted while waiting for a lock on inode %d", ino)
		default:
		}
	}
}

// GetLock reports a lock that would keep owner from taking l on file ino
// (F_GETLK), or free=true when there is none.
func (c *Client) GetLock(ino, owner uint64, flock bool, l proto.Lock) (free bool, conflict proto.Lock, err error) {
	if err := l.Validate(); err != nil {
		return false, proto.Lock{}, rpc.Errorf(syscall.EINVAL, "%v", err)
	}
	req := proto.GetLockReq{Ino: ino, Owner: c.lockOwner(owner, flock), Lock: l}
	var reply proto.LockReply
	err = c.metaCall(proto.OpGetLock, req.Encode, func(d *wire.Dec) error { reply.Decode(d); return nil })
	return reply.Granted, reply.Conflict, err
}

// ReleaseLocks releases every lock owner holds on file ino in one family,
// as closing a file must. It calls the metadata service only if owner
// took a lock on ino through this client since its last release.
func (c *Client) ReleaseLocks(ino, owner uint64, flock bool) error {
	if !c.locks.take(lockHolder{ino, owner, flock}) {
		return nil
	}
	_, _, err := c.SetLock(nil, ino, owner, flock, proto.Lock{End: proto.LockEnd, Type: proto.LockUnlock}, false)
	return err
}
