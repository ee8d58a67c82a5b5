package client

import (
	"syscall"
	"time"

	"tandemfs/internal/diskcache"
	"tandemfs/internal/proto"
)

// The disk cache (tandem mount --cache-dir; internal/diskcache) keeps
// blocks of files on the client's local disk across mounts, under the
// version of the file they were read at. It answers a read, and keeps
// what a read brought, only while this client knows that version to be
// the file's current one:
//   - it holds a file lease granted at that version (fileleases.go): the
//     leader answers another session's change to the file (a write's
//     commit, a truncate) only after this client's watch has seen it,
//     which ends the lease and drops the file here; so a block answered
//     is never older than a close or fsync another client completed, the
//     guarantee of the memory block cache and NFS's close-to-open;
//   - this client has no write of the file in flight or uncommitted: its
//     own reads must see its writes, and its commit moves the version.
// A read that crossed a change stores nothing: the key is taken again
// after it and must not have moved.

// diskKey is the cache key of inode in's blocks, and whether the disk
// cache may answer for it now.
func (c *Client) diskKey(in *proto.Inode) (diskcache.Key, bool) {
	if c.disk == nil || in.Mode&syscall.S_IFMT != syscall.S_IFREG || in.Inline {
		return diskcache.Key{}, false
	}
	if v, ok := c.fileLeases.valid(in.Ino, time.Now()); !ok || v != in.Version {
		return diskcache.Key{}, false
	}
	if st := c.lookupState(in.Ino); st != nil {
		st.mu.Lock()
		busy := st.writers > 0 || st.dirty
		st.mu.Unlock()
		if busy {
			return diskcache.Key{}, false
		}
	}
	return diskcache.Key{Ino: in.Ino, Version: in.Version, Size: in.Size, Mtime: in.Mtime}, true
}

// dropDisk forgets the disk cache's blocks of file ino (it changed).
func (c *Client) dropDisk(ino uint64) {
	if c.disk != nil {
		c.disk.Drop(ino)
	}
}

// DiskCacheStats reports the disk cache's state (zero without one).
func (c *Client) DiskCacheStats() diskcache.Stats {
	if c.disk == nil {
		return diskcache.Stats{}
	}
	return c.disk.Stats()
}
