package storage

import (
	"sync"
	"sync/atomic"
)

type chunkKey struct{ ino, idx uint64 }

// chunk is an open chunk: its data and sidecar files and what the engine
// knows of their sizes. Holding a reference (from chunkCache.get or insert)
// keeps the files open; holding mu gives the right to use them.
type chunk struct {
	key chunkKey

	// mu is held shared by reads and exclusively by writes and truncates,
	// so that a read never sees a block's entry and data from different
	// writes.
	mu      sync.RWMutex
	data    File
	sum     File
	size    int64 // data file size; guarded by mu
	sumSize int64 // sidecar size; guarded by mu
	// sums mirrors the sidecar when it is small (see maxCachedSums), so
	// that reads and writes need not pread it; nil otherwise. Guarded by
	// mu; len(sums) == sumSize when set.
	sums []byte
	// dirtyBytes counts data written through the page cache since the
	// last start of its writeback (writeback.go); guarded by mu.
	dirtyBytes int64
	// dead means the handle must not be used any more (the chunk was
	// deleted, or a failure left its sizes unknown): holders release it
	// and acquire a fresh one.
	dead atomic.Bool

	// Guarded by chunkCache.mu.
	refs       int
	removed    bool // no longer in the map; close at the last release
	prev, next *chunk
}

func (c *chunk) closeFiles() {
	c.data.Close()
	c.sum.Close()
}

// chunkCache is a bounded LRU cache of open chunks. Entries in use are
// never closed; the cache may exceed its bound while more than max chunks
// are in use at once.
type chunkCache struct {
	mu   sync.Mutex
	max  int
	m    map[chunkKey]*chunk
	lru  chunk // sentinel: lru.next is the most recently used
	shut bool
}

func newChunkCache(max int) *chunkCache {
	c := &chunkCache{max: max, m: make(map[chunkKey]*chunk)}
	c.lru.next, c.lru.prev = &c.lru, &c.lru
	return c
}

func (c *chunkCache) unlink(ch *chunk) {
	ch.prev.next, ch.next.prev = ch.next, ch.prev
	ch.prev, ch.next = nil, nil
}

func (c *chunkCache) pushFront(ch *chunk) {
	ch.prev, ch.next = &c.lru, c.lru.next
	c.lru.next.prev = ch
	c.lru.next = ch
}

// get returns the cached chunk for k with a reference taken, or nil.
func (c *chunkCache) get(k chunkKey) *chunk {
	c.mu.Lock()
	ch := c.m[k]
	if ch != nil {
		ch.refs++
		if c.lru.next != ch {
			c.unlink(ch)
			c.pushFront(ch)
		}
	}
	c.mu.Unlock()
	return ch
}

// insert adds ch (just opened) with a reference taken. If another caller
// inserted the same chunk first, insert closes ch and returns that one.
func (c *chunkCache) insert(ch *chunk) *chunk {
	c.mu.Lock()
	if c.shut {
		c.mu.Unlock()
		ch.closeFiles()
		return nil
	}
	if old := c.m[ch.key]; old != nil {
		old.refs++
		c.mu.Unlock()
		ch.closeFiles()
		return old
	}
	ch.refs = 1
	c.m[ch.key] = ch
	c.pushFront(ch)
	victims := c.evictLocked()
	c.mu.Unlock()
	closeAll(victims)
	return ch
}

// release drops a reference. A dead chunk leaves the cache.
func (c *chunkCache) release(ch *chunk) {
	c.mu.Lock()
	ch.refs--
	if ch.dead.Load() && !ch.removed {
		c.removeLocked(ch)
	}
	var victims []*chunk
	if ch.refs == 0 && ch.removed {
		victims = append(victims, ch)
	} else if len(c.m) > c.max {
		victims = c.evictLocked()
	}
	c.mu.Unlock()
	closeAll(victims)
}

// take removes the chunk for k from the cache and returns it with a
// reference taken, or nil if it is not cached.
func (c *chunkCache) take(k chunkKey) *chunk {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := c.m[k]
	if ch != nil {
		ch.refs++
		c.removeLocked(ch)
	}
	return ch
}

func (c *chunkCache) removeLocked(ch *chunk) {
	delete(c.m, ch.key)
	c.unlink(ch)
	ch.removed = true
}

// evictLocked removes unused chunks from the cold end until the cache is
// within its bound, and returns them for closing outside the lock.
func (c *chunkCache) evictLocked() []*chunk {
	var victims []*chunk
	for ch := c.lru.prev; len(c.m) > c.max && ch != &c.lru; {
		prev := ch.prev
		if ch.refs == 0 {
			c.removeLocked(ch)
			victims = append(victims, ch)
		}
		ch = prev
	}
	return victims
}

// keys lists the chunks open now.
func (c *chunkCache) keys() []chunkKey {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]chunkKey, 0, len(c.m))
	for k := range c.m {
		out = append(out, k)
	}
	return out
}

// closeAll empties the cache for good; chunks in use close at release.
func (c *chunkCache) closeAll() {
	c.mu.Lock()
	c.shut = true
	var victims []*chunk
	for _, ch := range c.m {
		c.removeLocked(ch)
		if ch.refs == 0 {
			victims = append(victims, ch)
		}
	}
	c.mu.Unlock()
	closeAll(victims)
}

func closeAll(chs []*chunk) {
	for _, ch := range chs {
		ch.closeFiles()
	}
}
