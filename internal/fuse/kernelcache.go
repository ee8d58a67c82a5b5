package fuse

import (
	"sync"
	"time"

	gofuse "github.com/hanwen/go-fuse/v2/fuse"
)

// The kernel's caches of names and attributes. Without the metadata
// leader's change stream the kernel may keep what it is told for
// shortTimeout, as NFS's actimeo bounds how stale another client's view
// gets. While the client follows the stream (client.Watching), the kernel
// may keep names and attributes for longTimeout: every change another
// client makes is passed on to the kernel at once (FUSE notify), and if
// the stream is lost, every long timeout still running is taken back.
const (
	shortTimeout = time.Second
	longTimeout  = 10 * time.Second
)

// maxLeases bounds the long timeouts remembered; past it, new replies get
// short ones.
const maxLeases = 1 << 17

type nameKey struct {
	parent uint64
	name   string
}

// kernelCache decides the kernel's timeouts and passes invalidations on.
type kernelCache struct {
	watching func() bool
	notify   notifier

	mu     sync.Mutex
	inodes map[uint64]time.Time  // long attribute timeouts: when they end
	names  map[nameKey]time.Time // long entry timeouts: when they end
	// absent holds the negative entries given to the kernel, by
	// directory: name → when their timeout ends.
	absent  map[uint64]map[string]time.Time
	nabsent int
	pruned  time.Time // when the maps were last swept

	// closedWritable are the files a process of this mount closed after
	// opening them for writing, since their last open here: their next
	// open drops the kernel's attributes (FS.Open). Past
	// maxClosedWritable of them, every open does (closedOverflow).
	closedWritable map[uint64]struct{}
	closedOverflow bool
}

// maxClosedWritable bounds closedWritable.
const maxClosedWritable = 1 << 16

// closedForWriting notes a close of ino opened for writing here.
func (k *kernelCache) closedForWriting(ino uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.closedWritable) >= maxClosedWritable {
		k.closedOverflow = true
		return
	}
	k.closedWritable[ino] = struct{}{}
}

// takeClosedWritable reports whether ino was closed for writing here
// since its last open (or whether that is no longer known), and forgets it.
func (k *kernelCache) takeClosedWritable(ino uint64) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, ok := k.closedWritable[ino]
	delete(k.closedWritable, ino)
	return ok || k.closedOverflow
}

// notifier is the part of the FUSE server that reaches the kernel.
type notifier interface {
	InodeNotify(node uint64, off int64, length int64) gofuse.Status
	EntryNotify(parent uint64, name string) gofuse.Status
}

func newKernelCache(watching func() bool) *kernelCache {
	return &kernelCache{watching: watching, inodes: map[uint64]time.Time{}, names: map[nameKey]time.Time{},
		absent: map[uint64]map[string]time.Time{}, closedWritable: map[uint64]struct{}{}}
}

// absentMargin is taken off the time a lease vouches for an absence: the
// kernel counts a timeout in jiffies from when it reads the reply.
const absentMargin = 10 * time.Millisecond

// absentTimeout is the timeout to give the kernel for a negative entry
// parent/name (FUSE: a lookup answered with node ID 0), so that it stops
// asking for a name that is not there (compilers and Python's imports
// probe many such names, again and again). vouched says how long a
// directory lease vouches for the absence (client.AbsentFor); without
// one, or without the change stream, the kernel gets 0 and asks again
// next time.
//
// The entry is recorded before vouched is asked: a lease that ends in
// between is ended before its absences are taken back (ForgetAbsent),
// so either the record is among those taken back, or vouched sees the
// lease gone. A negative entry taken back while its lookup is still in
// flight is dropped once the lookup is done (the kernel holds the
// directory's lock for both).
func (k *kernelCache) absentTimeout(parent uint64, name string, vouched func() time.Duration) time.Duration {
	if k.notify == nil || !k.watching() {
		return 0
	}
	k.mu.Lock()
	if !k.roomLocked() {
		k.mu.Unlock()
		return 0
	}
	names := k.absent[parent]
	if names == nil {
		names = map[string]time.Time{}
		k.absent[parent] = names
	}
	if _, ok := names[name]; !ok {
		k.nabsent++
	}
	names[name] = time.Now().Add(longTimeout) // until vouched answers
	k.mu.Unlock()

	d := min(vouched()-absentMargin, longTimeout)
	if d <= 0 {
		return 0 // the record stays until swept: one needless notice at most
	}
	k.mu.Lock()
	if names := k.absent[parent]; names != nil {
		if _, ok := names[name]; ok {
			names[name] = time.Now().Add(d + absentMargin)
		}
	}
	k.mu.Unlock()
	return d
}

// ForgetAbsent takes back the kernel's negative entries in dir whose
// timeouts still run: the lease that vouched for them ended.
func (k *kernelCache) ForgetAbsent(dir uint64) {
	k.mu.Lock()
	names := k.absent[dir]
	if names != nil {
		delete(k.absent, dir)
		k.nabsent -= len(names)
	}
	k.mu.Unlock()
	k.takeBack(dir, names)
}

// ForgetAllAbsent takes back every negative entry whose timeout still
// runs.
func (k *kernelCache) ForgetAllAbsent() {
	k.mu.Lock()
	all := k.absent
	k.absent, k.nabsent = map[uint64]map[string]time.Time{}, 0
	k.mu.Unlock()
	for dir, names := range all {
		k.takeBack(dir, names)
	}
}

func (k *kernelCache) takeBack(dir uint64, names map[string]time.Time) {
	if k.notify == nil {
		return
	}
	now := time.Now()
	for name, end := range names {
		if now.Before(end) {
			k.notify.EntryNotify(dir, name)
		}
	}
}

// attrTimeout is the timeout to give the kernel for ino's attributes.
func (k *kernelCache) attrTimeout(ino uint64) time.Duration {
	return k.grant(func(end time.Time) { k.inodes[ino] = end })
}

// entryTimeout is the timeout to give the kernel for the entry parent/name
// and for the attributes of ino, the inode it names.
func (k *kernelCache) entryTimeout(parent uint64, name string, ino uint64) time.Duration {
	return k.grant(func(end time.Time) {
		k.names[nameKey{parent, name}] = end
		k.inodes[ino] = end
	})
}

// grant returns the long timeout, noted by record under the lock, if the
// kernel may have it, and the short one otherwise.
func (k *kernelCache) grant(record func(end time.Time)) time.Duration {
	if k.notify == nil || !k.watching() {
		return shortTimeout
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.roomLocked() {
		return shortTimeout
	}
	record(time.Now().Add(longTimeout))
	return longTimeout
}

// roomLocked makes room for one more long timeout, if it can.
func (k *kernelCache) roomLocked() bool {
	if len(k.inodes) < maxLeases && len(k.names) < maxLeases && k.nabsent < maxLeases {
		return true
	}
	now := time.Now()
	if now.Sub(k.pruned) < time.Second {
		return false // swept a moment ago: do not sweep on every reply
	}
	k.pruned = now
	for i, end := range k.inodes {
		if now.After(end) {
			delete(k.inodes, i)
		}
	}
	for n, end := range k.names {
		if now.After(end) {
			delete(k.names, n)
		}
	}
	for dir, names := range k.absent {
		for n, end := range names {
			if now.After(end) {
				delete(names, n)
				k.nabsent--
			}
		}
		if len(names) == 0 {
			delete(k.absent, dir)
		}
	}
	return len(k.inodes) < maxLeases && len(k.names) < maxLeases && k.nabsent < maxLeases
}

// InvalidateInode drops the kernel's attributes and cached data of ino
// (another client changed it).
func (k *kernelCache) InvalidateInode(ino uint64) {
	if k.notify != nil {
		k.notify.InodeNotify(ino, 0, 0)
	}
}

// InvalidateAttr drops the kernel's attributes of ino, not its pages.
func (k *kernelCache) InvalidateAttr(ino uint64) {
	if k.notify != nil {
		k.notify.InodeNotify(ino, -1, 0)
	}
}

// InvalidateEntry drops the kernel's entry parent/name.
func (k *kernelCache) InvalidateEntry(parent uint64, name string) {
	if k.notify != nil {
		k.notify.EntryNotify(parent, name)
	}
}

// InvalidateAll takes back every long timeout and every negative entry
// still running.
func (k *kernelCache) InvalidateAll() {
	k.ForgetAllAbsent()
	k.mu.Lock()
	inodes, names := k.inodes, k.names
	k.inodes, k.names = map[uint64]time.Time{}, map[nameKey]time.Time{}
	k.mu.Unlock()
	if k.notify == nil {
		return
	}
	now := time.Now()
	for ino, end := range inodes {
		if now.Before(end) {
			k.notify.InodeNotify(ino, -1, 0)
		}
	}
	for n, end := range names {
		if now.Before(end) {
			k.notify.EntryNotify(n.parent, n.name)
		}
	}
}
