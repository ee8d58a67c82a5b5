package client

import (
	"sync"
	"sync/atomic"
	"time"

	"tandemfs/internal/proto"
)

// The block cache: 4 KiB blocks of files, kept in the client's memory, so
// that small reads a client repeats (random reads that get past the
// kernel's page cache) are answered without a call to a storage server.
// It is write-through: writes go to the storage servers as before, and a
// small O_DIRECT write also leaves its blocks here (every write does with
// Config.CacheWrites, as an NFS gateway asks). O_DIRECT reads and
// writes bypass it unless the mount asks for them to be cached
// (Config.CacheDirectIO, `tandem mount --cache-direct-io`): O_DIRECT
// means the storage is asked.
//
// Coherence is close-to-open, as NFS's and JuiceFS's are, with one more
// guarantee: a change another client commits (its close, fsync, a lock
// release, a truncate) is seen by this client's next read, even on a
// file it keeps open. So:
//   - a block is answered from here only while this client holds a file
//     lease on its file (fileleases.go): the leader then answers another
//     session's change to the file only after this client's watch has
//     passed it, and the watch drops the file from here first;
//   - every change to a file seen on the watch, from another session,
//     drops the file; a lost or broken watch drops everything;
//   - this client's own writes drop the blocks they cover before they are
//     sent, and its truncates drop the file;
//   - a block read from the storage servers (or written there) is kept
//     only if nothing dropped blocks of its file while the I/O was out:
//     every drop moves the file's generation on, and an insert names the
//     generation it began under (begin). So a reply that crossed a
//     change is never kept.
//
// Large reads and writes (streaming I/O) bypass it: filling fresh memory
// costs more than they would gain, and they would push out the blocks
// small readers come back to. (Writes of any size go in with
// Config.CacheWrites: an NFS gateway has no page cache in front of it.)

// cacheBlock is the cache's unit, the page size O_DIRECT I/O is aligned to.
const cacheBlock = 4096

// cacheMaxIO is the largest read or write whose blocks are kept.
const cacheMaxIO = 64 << 10

// DefaultBlockCacheBytes is the block cache's size unless configured.
const DefaultBlockCacheBytes = 512 << 20

type blockCache struct {
	mu    sync.Mutex
	files map[uint64]*cachedFile
	slots []cacheSlot // in use, or free when !used
	slabs slabs
	free  []int32 // slots freed by drops, reused first
	max   int     // slots
	hand  int     // the clock's hand, for eviction
	gen   uint64  // moves on at every drop

	hits, misses atomic.Uint64
}

// cachedFile is the blocks of one file. gen is the cache's generation at
// the file's last drop, or when it came in if later: an insert that began
// before it may hold older bytes.
type cachedFile struct {
	gen    uint64
	blocks map[uint64]int32 // block index → slot
	asked  time.Time        // when a read last asked for a lease on it
}

type cacheSlot struct {
	ino, block uint64
	used, ref  bool
}

func newBlockCache(bytes int64) *blockCache {
	return &blockCache{files: map[uint64]*cachedFile{}, max: int(bytes / cacheBlock)}
}

// enabled reports whether the cache may hold anything.
func (bc *blockCache) enabled() bool { return bc != nil && bc.max > 0 }

// mem is slot i's memory.
func (bc *blockCache) mem(i int32) []byte { return bc.slabs.block(i) }

// begin returns the generation an insert of what an I/O that starts now
// brings must name.
func (bc *blockCache) begin() uint64 {
	bc.mu.Lock()
	defer bc.mu.Unlock()
	return bc.gen
}

// unchangedLocked reports whether no drop of ino's blocks came after
// generation gen. A file not here now may have been dropped since, so
// then any drop at all counts.
func (bc *blockCache) unchangedLocked(f *cachedFile, gen uint64) bool {
	if f == nil {
		return bc.gen == gen
	}
	return f.gen <= gen
}

// read copies the blocks of ino from off on into buf (off and len(buf)
// multiples of cacheBlock) if all of them are here.
func (bc *blockCache) read(ino, off uint64, buf []byte) bool {
	bc.mu.Lock()
	defer bc.mu.Unlock()
	f := bc.files[ino]
	if f == nil {
		return false
	}
	first := off / cacheBlock
	n := uint64(len(buf)) / cacheBlock
	for b := first; b < first+n; b++ {
		if _, ok := f.blocks[b]; !ok {
			return false
		}
	}
	for b := first; b < first+n; b++ {
		i := f.blocks[b]
		bc.slots[i].ref = true
		copy(buf[(b-first)*cacheBlock:], bc.mem(i))
	}
	return true
}

// hasRoom reports whether n more blocks fit without evicting any.
func (bc *blockCache) hasRoom(n int) bool {
	bc.mu.Lock()
	defer bc.mu.Unlock()
	return len(bc.free)+bc.max-len(bc.slots) >= n
}

// wantsLease reports whether a read of ino that found no lease should
// ask for one: the file has blocks here, and no read asked in the last
// leaseRetry.
func (bc *blockCache) wantsLease(ino uint64, now time.Time) bool {
	bc.mu.Lock()
	defer bc.mu.Unlock()
	f := bc.files[ino]
	if f == nil || now.Sub(f.asked) < leaseRetry {
		return false
	}
	f.asked = now
	return true
}

// insert keeps the blocks of ino in data (read or written at off, both
// multiples of cacheBlock) unless a drop of ino's blocks came after gen.
func (bc *blockCache) insert(ino, off uint64, data []byte, gen uint64) {
	bc.mu.Lock()
	defer bc.mu.Unlock()
	f := bc.files[ino]
	if !bc.unchangedLocked(f, gen) {
		return
	}
	if f == nil {
		f = &cachedFile{gen: bc.gen, blocks: map[uint64]int32{}}
		bc.files[ino] = f
	}
	first := off / cacheBlock
	for k := uint64(0); k < uint64(len(data))/cacheBlock; k++ {
		i, ok := f.blocks[first+k]
		if ok {
			bc.slots[i].ref = true
		} else {
			// A new block is not marked used: the clock takes it
			// back first unless it is read again, so that blocks
			// read once do not push out those read often.
			if i, ok = bc.slotLocked(); !ok {
				return
			}
			bc.files[ino] = f // the eviction may have taken f's last block
			bc.slots[i] = cacheSlot{ino: ino, block: first + k, used: true}
			f.blocks[first+k] = i
		}
		copy(bc.mem(i), data[k*cacheBlock:])
	}
}

// insertWhole keeps the blocks of ino that data, written at off, covers
// whole (insert, for data of any alignment).
func (bc *blockCache) insertWhole(ino, off uint64, data []byte, gen uint64) {
	lo := (off + cacheBlock - 1) / cacheBlock * cacheBlock
	hi := (off + uint64(len(data))) / cacheBlock * cacheBlock
	if lo < hi {
		bc.insert(ino, lo, data[lo-off:hi-off], gen)
	}
}

// slotLocked finds a slot for a new block: a free one, a new one while
// the cache is below its size, or else the first the clock's hand finds
// not referenced since it last passed.
func (bc *blockCache) slotLocked() (int32, bool) {
	if n := len(bc.free); n > 0 {
		i := bc.free[n-1]
		bc.free = bc.free[:n-1]
		return i, true
	}
	if len(bc.slots) < bc.max {
		if len(bc.slots) >= len(bc.slabs.mem)*slabBlocks {
			bc.slabs.grow(bc) // unless prefault mapped it already
		}
		bc.slots = append(bc.slots, cacheSlot{})
		return int32(len(bc.slots) - 1), true
	}
	if len(bc.slots) == 0 {
		return 0, false
	}
	for {
		bc.hand = (bc.hand + 1) % len(bc.slots)
		s := &bc.slots[bc.hand]
		if s.ref {
			s.ref = false
			continue
		}
		if s.used {
			bc.evictLocked(int32(bc.hand))
		}
		return int32(bc.hand), true
	}
}

// evictLocked takes slot i's block out of its file.
func (bc *blockCache) evictLocked(i int32) {
	s := &bc.slots[i]
	if f := bc.files[s.ino]; f != nil && f.blocks[s.block] == i {
		delete(f.blocks, s.block)
		if len(f.blocks) == 0 {
			delete(bc.files, s.ino)
		}
	}
	*s = cacheSlot{}
}

// dropRange drops the blocks of ino that [off, off+n) touches and returns
// the generation under which the writer of that range may insert what it
// wrote.
func (bc *blockCache) dropRange(ino, off, n uint64) uint64 {
	bc.mu.Lock()
	defer bc.mu.Unlock()
	bc.gen++
	f := bc.files[ino]
	if f == nil {
		return bc.gen
	}
	f.gen = bc.gen
	if n > 0 {
		for b := off / cacheBlock; b <= (off+n-1)/cacheBlock; b++ {
			if i, ok := f.blocks[b]; ok {
				delete(f.blocks, b)
				bc.freeLocked(i)
			}
		}
	}
	if len(f.blocks) == 0 {
		delete(bc.files, ino) // its drop is in bc.gen
	}
	return bc.gen
}

func (bc *blockCache) freeLocked(i int32) {
	bc.slots[i] = cacheSlot{}
	bc.free = append(bc.free, i)
}

// dropFile drops every block of ino.
func (bc *blockCache) dropFile(ino uint64) {
	bc.mu.Lock()
	defer bc.mu.Unlock()
	bc.gen++
	bc.freeFileLocked(ino)
}

// forget frees the blocks of ino, a file this client removed or let go
// of: their memory is room for files that are read. Unlike a drop it
// leaves the generation alone: it says nothing about the file's bytes, so
// what an insert in flight brings (of any file) is as good as before.
func (bc *blockCache) forget(ino uint64) {
	bc.mu.Lock()
	defer bc.mu.Unlock()
	bc.freeFileLocked(ino)
}

// freeFileLocked frees every block of ino.
func (bc *blockCache) freeFileLocked(ino uint64) {
	f := bc.files[ino]
	if f == nil {
		return
	}
	for _, i := range f.blocks {
		bc.freeLocked(i)
	}
	delete(bc.files, ino)
}

// dropAll drops every block; the memory stays for reuse.
func (bc *blockCache) dropAll() {
	bc.mu.Lock()
	defer bc.mu.Unlock()
	bc.gen++
	clear(bc.files)
	bc.free = bc.free[:0]
	for i := range bc.slots {
		bc.freeLocked(int32(i))
	}
}

// BlockCacheStats is what the block cache holds and how it served reads.
type BlockCacheStats struct {
	Bytes        int64 // held now
	Hits, Misses uint64
}

func (bc *blockCache) stats() BlockCacheStats {
	bc.mu.Lock()
	held := len(bc.slots) - len(bc.free)
	bc.mu.Unlock()
	return BlockCacheStats{Bytes: int64(held) * cacheBlock, Hits: bc.hits.Load(), Misses: bc.misses.Load()}
}

// cacheableIO reports whether an I/O of n bytes at off may go through the
// block cache: whole blocks, and not streaming I/O.
func cacheableIO(off uint64, n int) bool {
	return n > 0 && n <= cacheMaxIO && off%cacheBlock == 0 && n%cacheBlock == 0
}

// blockCacheable decides, with st.mu held, whether a read of n bytes at
// off goes through the block cache, and with what generation: not while
// a write of this client to the file is out, since the read may then
// bring bytes the write is replacing.
func (c *Client) blockCacheable(st *fileState, off uint64, n int) (uint64, bool) {
	if !c.blocks.enabled() || !cacheableIO(off, n) || st.writers > 0 {
		return 0, false
	}
	return c.blocks.begin(), true
}

// readCached fills buf from the block cache if this client holds a lease
// on the file and the cache has every block (a hit), for a read
// blockCacheable allowed.
func (c *Client) readCached(ino, off uint64, buf []byte) bool {
	if _, leased := c.fileLeases.valid(ino, time.Now()); !leased || !c.blocks.read(ino, off, buf) {
		return false
	}
	c.blocks.hits.Add(1)
	return true
}

// readMissed reads what the block cache did not answer from the storage
// servers, keeping it (and the line around it, while the cache has room).
func (c *Client) readMissed(in *proto.Inode, size, off uint64, buf []byte, gen uint64) error {
	bc := c.blocks
	bc.misses.Add(1)
	now := time.Now()
	if _, leased := c.fileLeases.valid(in.Ino, now); !leased && bc.wantsLease(in.Ino, now) {
		c.leaseInBackground(in.Ino)
	}
	lo, hi := cacheLine(off, uint64(len(buf)), size, uint64(in.Stripe.ChunkSize))
	if hi-lo == uint64(len(buf)) || !bc.hasRoom(int((hi-lo)/cacheBlock)) {
		if err := c.readPieces(in, off, buf); err != nil {
			return err
		}
		bc.insert(in.Ino, off, buf, gen)
		return nil
	}
	line := getBuf(int(hi - lo))[:hi-lo]
	defer putBuf(line)
	if err := c.readPieces(in, lo, line); err != nil {
		return err
	}
	copy(buf, line[off-lo:])
	bc.insert(in.Ino, lo, line, gen)
	return nil
}

// cacheLineBytes is how much a read that misses brings into the cache while
// the cache has free memory: the aligned 256 KiB around it (or the chunk
// around it, if chunks are smaller), as block caches (dm-cache, lvmcache)
// promote whole cache blocks, so that the cache fills 64 times faster and
// reads near one another find their blocks. Once the cache is full, a miss
// brings only what was asked for: reading ahead must not push out blocks
// that were read. A line never crosses a chunk, so it costs one storage
// call. 256 KiB was measured against 64 KiB and 1 MiB (docs/benchmarks.md):
// random reads of files that fit came in 1.2-1.6 times faster with two
// jobs than with 64 KiB, as fast as with 1 MiB, and a file twice the
// cache's size was read no slower.
const cacheLineBytes = 256 << 10

// cacheLine is the line around a miss of n bytes at off, within the
// file's whole blocks below size, for a file of chunkSize chunks.
func cacheLine(off, n, size, chunkSize uint64) (lo, hi uint64) {
	line := uint64(cacheLineBytes)
	if chunkSize > 0 {
		line = min(line, chunkSize)
	}
	lo = off / line * line
	hi = (off + n + line - 1) / line * line
	hi = max(min(hi, size/cacheBlock*cacheBlock), off+n)
	return lo, hi
}

// leaseInBackground asks for a lease on a file this client keeps open
// past its lease (a lease lasts 60 s at most), so that its reads are
// answered from the block cache again.
func (c *Client) leaseInBackground(ino uint64) {
	c.inBackground(func() { c.OpenAttr(ino) })
}

// startCachedWrite drops the blocks a write of data at off replaces,
// with st.mu held, and counts it among the writes in flight. keep says
// whether the write may leave its blocks in the cache when it ends: a
// small O_DIRECT write, or any write with Config.CacheWrites, that no
// other write of this client overlaps in time (two concurrent writes may
// reach the servers in either order); gen is the generation to insert
// them with.
//
// A buffered write (one that returns before its data is sent) leaves its
// blocks at once with Config.CacheWrites, still under st.mu: every later
// write drops and keeps its own blocks in the same order, so the cache
// holds the file's newest bytes; no read is answered from them while a
// write is out (blockCacheable), and a write that fails drops the file
// (forgetFailedWrite).
func (c *Client) startCachedWrite(st *fileState, off uint64, data []byte, direct, buffered bool) (keep bool, gen uint64) {
	idle := st.writers == 0
	st.writers++ // also for the disk cache (diskcache.go)
	if !c.blocks.enabled() {
		return false, 0
	}
	gen = c.blocks.dropRange(st.ino, off, uint64(len(data)))
	if c.cfg.CacheWrites {
		if buffered {
			c.blocks.insertWhole(st.ino, off, data, gen)
			return false, gen
		}
		return idle, gen
	}
	return direct && idle && cacheableIO(off, len(data)), gen
}

// forgetFailedWrite drops a file whose buffered write failed: the
// caches may hold bytes that never reached the storage targets.
func (c *Client) forgetFailedWrite(st *fileState) {
	c.pages.forget(st.ino)
	if c.blocks.enabled() {
		c.blocks.dropFile(st.ino)
	}
}

// endCachedWrite ends a write started by startCachedWrite, keeping its
// blocks if keep (and no drop of the file came after gen).
func (c *Client) endCachedWrite(st *fileState, off uint64, data []byte, gen uint64, keep bool) {
	if keep && c.blocks.enabled() {
		c.blocks.insertWhole(st.ino, off, data, gen)
	}
	st.mu.Lock()
	st.writers--
	st.mu.Unlock()
}

// BlockCacheStats reports what the block cache holds and how it served
// reads.
func (c *Client) BlockCacheStats() BlockCacheStats {
	if !c.blocks.enabled() {
		return BlockCacheStats{}
	}
	return c.blocks.stats()
}
