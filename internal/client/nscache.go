package client

import (
	"sync"
	"time"

	"tandemfs/internal/proto"
)

// The namespace cache: inodes and directory entries this client learnt
// from the metadata service, so that getattr, open and the kernel's
// lookups of names it already knows need no round trip.
//
// Without a watch (see watch.go) an entry answers for shortTTL, the
// kernel's own attribute timeout, which makes nothing staler than the
// kernel already does. While the client watches the leader's change
// stream, an entry answers for up to watchedTTL and is dropped as soon as
// a change to it arrives. Changes are known by their metadata log index:
//
//   - an inode carries the index of its last change (Version), so the
//     notice of this client's own change, which arrives after the reply,
//     does not drop the fresh copy it already holds;
//   - a reply is not cached for long if the stream already told of a
//     newer change (it was in flight while the change happened);
//   - a directory entry learnt by a lookup is as new as the last change
//     the client had seen when it asked (its watermark);
//   - the names of recent changes are kept to make those decisions; when
//     they are forgotten (the floor moves up), replies to requests sent
//     before are cached only briefly.
//
// Negative answers are not cached here: a name another client just
// created is found at once, as MPI jobs that create a file on one rank and
// open it on the others expect. Only a directory lease (leases.go), which
// the leader revokes before it answers such a create, answers "no such
// name" without asking.

// shortTTL is how long an entry answers without a live watch.
const shortTTL = time.Second

// watchedTTL bounds how long an entry answers with a live watch.
const watchedTTL = 30 * time.Second

// cacheMax bounds each map; when full it is simply emptied.
const cacheMax = 1 << 17

// inlineBytesMax bounds the bytes of small files held in cached inodes.
const inlineBytesMax = 64 << 20

type dentKey struct {
	parent uint64
	name   string
}

type cachedInode struct {
	n       proto.Inode
	at      time.Time
	watched bool // learnt while the watch was live, at or above the floor
}

type cachedDent struct {
	ino     uint64
	version uint64 // the change index the entry is known to be current at
	at      time.Time
	watched bool
}

type nsCache struct {
	mu          sync.Mutex
	inodes      map[uint64]cachedInode
	inlineBytes int // of the inodes held
	dents       map[dentKey]cachedDent

	// The watch's state: the stream followed, the index of the last
	// change applied, the floor below which changes are forgotten, and
	// the index of the last change seen to each inode and entry.
	live     bool
	stream   uint64
	upto     uint64
	floor    uint64
	lastIno  map[uint64]uint64
	lastDent map[dentKey]uint64
	liveAt   time.Time // the last watch reply
}

// watchHealthy is how long after the last watch reply the watch counts as
// live; the leader answers at least every watchWait.
const watchHealthy = 2 * watchWait

func (c *nsCache) isLive(now time.Time) bool {
	return c.live && now.Sub(c.liveAt) < watchHealthy
}

// watching reports whether the watch is live now.
func (c *nsCache) watching() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.isLive(time.Now())
}

func (c *nsCache) valid(at time.Time, watched bool, now time.Time) bool {
	age := now.Sub(at)
	if watched && c.isLive(now) {
		return age < watchedTTL
	}
	return age < shortTTL
}

// watermark is the change index to note when sending a request whose
// reply will be cached.
func (c *nsCache) watermark() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.upto
}

// putInode caches n from a reply to a request sent at watermark wm.
func (c *nsCache) putInode(n *proto.Inode, wm uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lastIno[n.Ino] > n.Version {
		c.deleteInodeLocked(n.Ino) // a newer change is known: n is stale
		return
	}
	if e, ok := c.inodes[n.Ino]; ok && e.n.Version > n.Version {
		// A reply that left the leader before the cached one (a lease
		// asked for in the background, overtaken by this client's own
		// commit): it would bring back an old size.
		return
	}
	c.deleteInodeLocked(n.Ino)
	if c.inodes == nil || len(c.inodes) >= cacheMax || c.inlineBytes+len(n.InlineData) > inlineBytesMax {
		c.inodes, c.inlineBytes = make(map[uint64]cachedInode), 0
	}
	c.inodes[n.Ino] = cachedInode{n: *n, at: time.Now(), watched: c.live && wm >= c.floor}
	c.inlineBytes += len(n.InlineData)
}

func (c *nsCache) getInode(ino uint64) (proto.Inode, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.inodes[ino]
	if !ok || !c.valid(e.at, e.watched, time.Now()) {
		return proto.Inode{}, false
	}
	return e.n, true
}

// peekInode returns the cached inode ino however old: for a file lease
// to vouch for (fileleases.go).
func (c *nsCache) peekInode(ino uint64) (proto.Inode, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.inodes[ino]
	return e.n, ok
}

// changedSince reports whether a change to inode ino newer than version
// has been seen on the watch, or may have been (it would be below the
// floor, where changes are forgotten).
func (c *nsCache) changedSince(ino, version uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return version < c.floor || c.lastIno[ino] > version
}

func (c *nsCache) dropInode(ino uint64) {
	c.mu.Lock()
	c.deleteInodeLocked(ino)
	c.mu.Unlock()
}

func (c *nsCache) deleteInodeLocked(ino uint64) {
	if e, ok := c.inodes[ino]; ok {
		c.inlineBytes -= len(e.n.InlineData)
		delete(c.inodes, ino)
	}
}

// putDent caches that parent/name is ino, current as of change version,
// from a reply to a request sent at watermark wm.
func (c *nsCache) putDent(parent uint64, name string, ino, version, wm uint64) {
	k := dentKey{parent, name}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lastDent[k] > version {
		delete(c.dents, k)
		return
	}
	if c.dents == nil || len(c.dents) >= cacheMax {
		c.dents = make(map[dentKey]cachedDent)
	}
	c.dents[k] = cachedDent{ino: ino, version: version, at: time.Now(), watched: c.live && wm >= c.floor}
}

func (c *nsCache) getDent(parent uint64, name string) (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.dents[dentKey{parent, name}]
	if !ok || !c.valid(e.at, e.watched, time.Now()) {
		return 0, false
	}
	return e.ino, true
}

func (c *nsCache) dropDent(parent uint64, name string) {
	c.mu.Lock()
	delete(c.dents, dentKey{parent, name})
	c.mu.Unlock()
}

// removed records that this client's own change at index removed or
// moved parent/name and changed inode ino (0: none): the notice of it
// then tells nothing new, and nothing older than it may be cached.
func (c *nsCache) removed(parent uint64, name string, ino, index uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := dentKey{parent, name}
	delete(c.dents, k)
	c.deleteInodeLocked(ino)
	if c.lastDent == nil {
		return // not watching yet
	}
	c.lastDent[k] = max(c.lastDent[k], index)
	if ino != 0 {
		c.lastIno[ino] = max(c.lastIno[ino], index)
	}
}

// apply takes in a watch reply: the changes it lists drop what they make
// stale; a lost stream drops everything. It returns the changes this
// client did not already know of (not its own), for caches in front of it,
// and whether everything must be forgotten.
func (c *nsCache) apply(r *proto.WatchReply) (news []proto.ChangeEvent, forgetAll bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.Lost || r.Stream != c.stream {
		c.forgetLocked(r.Stream, r.Upto)
		forgetAll = true
	}
	for i := range r.Events {
		ev := &r.Events[i]
		if ev.MapChanged() {
			news = append(news, *ev)
			continue
		}
		if ev.Parent == 0 {
			known := c.lastIno[ev.Ino] >= ev.Index // this client's own removal
			c.lastIno[ev.Ino] = max(c.lastIno[ev.Ino], ev.Index)
			e, ok := c.inodes[ev.Ino]
			if ok && e.n.Version >= ev.Index {
				continue
			}
			c.deleteInodeLocked(ev.Ino)
			if !known {
				news = append(news, *ev)
			}
			continue
		}
		k := dentKey{ev.Parent, ev.Name}
		known := c.lastDent[k] >= ev.Index
		c.lastDent[k] = max(c.lastDent[k], ev.Index)
		e, ok := c.dents[k]
		if ok && e.version >= ev.Index {
			continue
		}
		delete(c.dents, k)
		if !known {
			news = append(news, *ev)
		}
	}
	if r.Upto > c.upto {
		c.upto = r.Upto
	}
	if len(c.lastIno)+len(c.lastDent) > cacheMax {
		// Forget the names of old changes; replies to requests sent
		// before now can no longer be checked against them.
		c.lastIno, c.lastDent = map[uint64]uint64{}, map[dentKey]uint64{}
		c.floor = c.upto
	}
	c.live, c.liveAt = true, time.Now()
	return news, forgetAll
}

// forgetLocked drops everything learnt and follows stream from index upto.
func (c *nsCache) forgetLocked(stream, upto uint64) {
	c.inodes, c.dents, c.inlineBytes = nil, nil, 0
	c.lastIno, c.lastDent = map[uint64]uint64{}, map[dentKey]uint64{}
	c.stream, c.upto, c.floor = stream, upto, upto
}

// lost marks the watch broken: entries fall back to shortTTL, and the
// next reply starts afresh. It reports whether the watch was live.
func (c *nsCache) lost() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	was := c.live
	c.live = false
	c.stream = 0
	return was
}

// watchReq is the next watch request.
func (c *nsCache) watchReq() proto.WatchReq {
	c.mu.Lock()
	defer c.mu.Unlock()
	return proto.WatchReq{Stream: c.stream, After: c.upto, WaitMs: uint32(watchWait / time.Millisecond)}
}
