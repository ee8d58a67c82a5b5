package fuse

import (
	"syscall"

	gofuse "github.com/hanwen/go-fuse/v2/fuse"

	"tandemfs/internal/proto"
)

// File locks: the mount takes over POSIX record locks (fcntl, including
// open file description locks) and flock locks from the kernel, and the
// client keeps them in the metadata service, so processes on different
// client hosts exclude each other as processes on one host do.
//
// The kernel names each lock's owner: for POSIX locks a process's file
// table, for flock and open file description locks the open file. POSIX
// locks go when their process closes any descriptor of the file (FLUSH
// names the owner); flock locks when the open file is released. A
// read-only open has no FLUSH (FOPEN_NOFLUSH), so POSIX locks taken
// through it go when it is released.

func lockOf(in *gofuse.LkIn) proto.Lock {
	return proto.Lock{Start: in.Lk.Start, End: in.Lk.End, Type: in.Lk.Typ, Pid: in.Lk.Pid}
}

func isFlock(in *gofuse.LkIn) bool { return in.LkFlags&gofuse.FUSE_LK_FLOCK != 0 }

func (fs *FS) GetLk(cancel <-chan struct{}, in *gofuse.LkIn, out *gofuse.LkOut) gofuse.Status {
	free, c, err := fs.c.GetLock(in.NodeId, in.Owner, isFlock(in), lockOf(in))
	if err != nil {
		return status(err)
	}
	if free {
		out.Lk = gofuse.FileLock{Typ: syscall.F_UNLCK}
	} else {
		out.Lk = gofuse.FileLock{Start: c.Start, End: c.End, Typ: c.Type, Pid: c.Pid}
	}
	return gofuse.OK
}

func (fs *FS) SetLk(cancel <-chan struct{}, in *gofuse.LkIn) gofuse.Status {
	return fs.setLock(cancel, in, false)
}

func (fs *FS) SetLkw(cancel <-chan struct{}, in *gofuse.LkIn) gofuse.Status {
	return fs.setLock(cancel, in, true)
}

func (fs *FS) setLock(cancel <-chan struct{}, in *gofuse.LkIn, wait bool) gofuse.Status {
	flock := isFlock(in)
	if !flock {
		fs.noteLocker(in.Fh, in.Owner)
	}
	if in.Lk.Typ == syscall.F_UNLCK {
		fs.c.FlushForUnlock(in.NodeId)
	}
	granted, _, err := fs.c.SetLock(cancel, in.NodeId, in.Owner, flock, lockOf(in), wait)
	if err != nil {
		return status(err)
	}
	if !granted {
		return gofuse.EAGAIN
	}
	if in.Lk.Typ != syscall.F_UNLCK {
		// What the last holder wrote, on any host, is read from now
		// on, not what this host cached before (NFS revalidates on
		// lock too).
		reloaded, err := fs.c.RefreshForLock(in.NodeId)
		if err != nil {
			return status(err)
		}
		if reloaded {
			fs.kernel.InvalidateInode(in.NodeId)
		}
	}
	return gofuse.OK
}

// noteLocker remembers that owner set POSIX locks through open file fh.
func (fs *FS) noteLocker(fh, owner uint64) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	owners := fs.lockers[fh]
	if owners == nil {
		owners = map[uint64]struct{}{}
		fs.lockers[fh] = owners
	}
	owners[owner] = struct{}{}
}

// releaseLocks drops, when open file fh of inode ino is released, its
// flock lock and the POSIX locks of every owner that locked through it.
func (fs *FS) releaseLocks(in *gofuse.ReleaseIn) {
	fs.mu.Lock()
	owners := fs.lockers[in.Fh]
	delete(fs.lockers, in.Fh)
	fs.mu.Unlock()
	for owner := range owners {
		fs.c.ReleaseLocks(in.NodeId, owner, false)
	}
	if in.ReleaseFlags&gofuse.FUSE_RELEASE_FLOCK_UNLOCK != 0 {
		fs.c.ReleaseLocks(in.NodeId, in.LockOwner, true)
	}
}
