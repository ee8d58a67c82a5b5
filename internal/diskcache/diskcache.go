// Package diskcache keeps blocks of files on a compute node's local disk
// (flash) across mounts: the client's read cache (tandem mount --cache-dir,
// issue 42; docs/architecture.md, "Client disk cache").
//
// A file's blocks are kept under the identity of the version they were
// read at: the inode number, the metadata service's version of the inode
// (a log index, moved by every change: a write's commit, a truncate, a
// chmod), its size and its modification time. A read asks for the blocks
// of the version the client knows to be current (the client decides that:
// internal/client/diskcache.go); blocks of any other version are never
// answered, and a newer version's blocks replace the file's. Size and
// mtime make the key a file system's own: two clusters that happen to
// give a file the same number and version do not share its blocks.
//
// Layout of the directory: data/<ino> holds the blocks of one file at
// their offsets (a sparse file); index.json, written at a clean Close,
// lists every file's version and blocks. A cache not closed cleanly is
// emptied when opened (its blocks may be torn).
package diskcache

import (
	"container/list"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"tandemfs/internal/storage"
)

// BlockSize is the cache's unit: a read is answered only if every block
// it touches is held, and a read that fills whole blocks (or ends at the
// file's end) stores them.
const BlockSize = 128 << 10

// MinSize is the smallest cache: a few blocks.
const MinSize = 16 * BlockSize

// Key is the version of a file whose blocks a cache holds.
type Key struct {
	Ino, Version, Size uint64
	Mtime              int64
}

// Cache is one cache directory.
type Cache struct {
	dir  string
	size int64

	mu    sync.Mutex
	files map[uint64]*file
	lru   list.List // of *file, most recently used first
	used  int64     // bytes of blocks held
	// closed: no more I/O (Close ran).
	closed bool

	hits, misses, stored atomic.Int64
}

type file struct {
	key    Key
	blocks map[uint64]bool // block numbers held
	f      *os.File        // nil until the first block
	elem   *list.Element
	// counted is what blocks count in Cache.used.
	counted int64
	// io is held shared by reads and stores of the file's blocks and
	// exclusively while it is dropped.
	io sync.RWMutex
}

type indexJSON struct {
	Clean bool        `json:"clean"`
	Files []indexFile `json:"files,omitempty"`
}

type indexFile struct {
	Key    Key      `json:"key"`
	Blocks []uint64 `json:"blocks"`
}

// Open opens (creating) the cache directory dir, holding at most size
// bytes of blocks, and takes back what a clean Close left.
func Open(dir string, size int64) (*Cache, error) {
	if size < MinSize {
		return nil, fmt.Errorf("disk cache %s: %d bytes is smaller than %d blocks of %d KiB", dir, size, MinSize/BlockSize, BlockSize>>10)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	c := &Cache{dir: abs, size: size, files: map[uint64]*file{}}
	if err := os.MkdirAll(c.dataDir(), 0o700); err != nil {
		return nil, fmt.Errorf("disk cache %s: %w", dir, err)
	}
	if err := c.load(); err != nil {
		return nil, fmt.Errorf("disk cache %s: %w", dir, err)
	}
	if err := c.writeIndex(indexJSON{Clean: false}); err != nil {
		return nil, fmt.Errorf("disk cache %s: %w", dir, err)
	}
	return c, nil
}

func (c *Cache) dataDir() string { return filepath.Join(c.dir, "data") }
func (c *Cache) dataPath(ino uint64) string {
	return filepath.Join(c.dataDir(), strconv.FormatUint(ino, 10))
}

// load takes back the files of a clean index whose data files are there;
// anything else in data/ is removed.
func (c *Cache) load() error {
	var idx indexJSON
	b, err := os.ReadFile(filepath.Join(c.dir, "index.json"))
	if err == nil && json.Unmarshal(b, &idx) != nil {
		idx = indexJSON{}
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	keep := map[string]bool{}
	if idx.Clean {
		for _, fi := range idx.Files {
			f, err := os.OpenFile(c.dataPath(fi.Key.Ino), os.O_RDWR, 0)
			if err != nil {
				continue
			}
			e := &file{key: fi.Key, blocks: map[uint64]bool{}, f: f}
			for _, blk := range fi.Blocks {
				e.blocks[blk] = true
			}
			e.elem = c.lru.PushBack(e)
			c.files[fi.Key.Ino] = e
			e.counted = int64(len(e.blocks)) * BlockSize
			c.used += e.counted
			keep[strconv.FormatUint(fi.Key.Ino, 10)] = true
		}
	}
	names, err := os.ReadDir(c.dataDir())
	if err != nil {
		return err
	}
	for _, n := range names {
		if !keep[n.Name()] {
			os.Remove(filepath.Join(c.dataDir(), n.Name()))
		}
	}
	c.evictLocked(0)
	return nil
}

// writeIndex replaces index.json durably: the "not clean" an Open writes
// must survive a power cut, or torn blocks would be taken back.
func (c *Cache) writeIndex(idx indexJSON) error {
	b, err := json.Marshal(idx)
	if err != nil {
		return err
	}
	return storage.WriteFileAtomic(storage.OSFS{}, filepath.Join(c.dir, "index.json"), b)
}

// blocksOf is the range of blocks [first, last] that n bytes at off touch.
func blocksOf(off uint64, n int) (first, last uint64) {
	return off / BlockSize, (off + uint64(n) - 1) / BlockSize
}

// Get fills buf from the blocks of version k at off, if every block it
// touches is held; it reports whether it did.
func (c *Cache) Get(k Key, off uint64, buf []byte) bool {
	if len(buf) == 0 || off+uint64(len(buf)) > k.Size {
		return false
	}
	c.mu.Lock()
	e := c.files[k.Ino]
	if c.closed || e == nil || e.key != k || e.f == nil {
		c.mu.Unlock()
		c.misses.Add(1)
		return false
	}
	first, last := blocksOf(off, len(buf))
	for blk := first; blk <= last; blk++ {
		if !e.blocks[blk] {
			c.mu.Unlock()
			c.misses.Add(1)
			return false
		}
	}
	c.lru.MoveToFront(e.elem)
	e.io.RLock() // before c.mu is let go: a drop waits for this read
	c.mu.Unlock()
	defer e.io.RUnlock()
	if n, err := e.f.ReadAt(buf, int64(off)); err != nil || n != len(buf) {
		c.misses.Add(1)
		return false
	}
	// The kernel's readahead does not see a sequential reader in the
	// client's concurrent reads: ask for what follows.
	next := int64(off) + int64(len(buf))
	unix.Fadvise(int(e.f.Fd()), next, min(readAhead, int64(k.Size)-next), unix.FADV_WILLNEED)
	c.hits.Add(1)
	return true
}

// readAhead is how far past a read Get has the kernel read the file in.
const readAhead = 8 << 20

// Put stores the whole blocks of data (read at off from version k) that
// it covers, a block that ends at the file's end included. A Put of an
// older version than the one held is ignored; a newer one replaces it.
func (c *Cache) Put(k Key, off uint64, data []byte) {
	first := (off + BlockSize - 1) / BlockSize
	end := off + uint64(len(data))
	var blocks []uint64
	for blk := first; blk*BlockSize < end; blk++ {
		if blkEnd := min((blk+1)*BlockSize, k.Size); blkEnd <= end && blk*BlockSize < k.Size {
			blocks = append(blocks, blk)
		}
	}
	if len(blocks) == 0 {
		return
	}
	e, ok := c.reserve(k, blocks)
	if !ok {
		return
	}
	var wrote []uint64
	for _, blk := range blocks {
		lo := blk * BlockSize
		hi := min(lo+BlockSize, k.Size)
		if _, err := e.f.WriteAt(data[lo-off:hi-off], int64(lo)); err == nil {
			wrote = append(wrote, blk)
		}
	}
	e.io.RUnlock() // before c.mu: a drop holds c.mu while it waits for io
	c.mu.Lock()
	defer c.mu.Unlock()
	c.used -= int64(len(blocks)) * BlockSize // the reservation
	if c.files[k.Ino] != e {
		return // dropped meanwhile (its bytes went with it)
	}
	for _, blk := range wrote {
		if !e.blocks[blk] {
			e.blocks[blk] = true
			c.stored.Add(1)
		}
	}
	now := int64(len(e.blocks)) * BlockSize
	c.used += now - e.counted
	e.counted = now
}

// reserve makes room for blocks of version k and returns its file with
// io held shared (not ok: nothing to store).
func (c *Cache) reserve(k Key, blocks []uint64) (*file, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, false
	}
	e := c.files[k.Ino]
	if e != nil && e.key != k {
		if e.key.Version > k.Version {
			return nil, false // a reader of an older version
		}
		c.dropLocked(e)
		e = nil
	}
	if e == nil {
		f, err := os.OpenFile(c.dataPath(k.Ino), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return nil, false
		}
		e = &file{key: k, blocks: map[uint64]bool{}, f: f}
		e.elem = c.lru.PushFront(e)
		c.files[k.Ino] = e
	}
	c.lru.MoveToFront(e.elem)
	c.used += int64(len(blocks)) * BlockSize // reserved until stored
	c.evictLocked(e.key.Ino)
	e.io.RLock()
	return e, true
}

// evictLocked drops the least recently used files, but not keep, until
// the blocks fit.
func (c *Cache) evictLocked(keep uint64) {
	for c.used > c.size {
		back := c.lru.Back()
		if back == nil {
			return
		}
		e := back.Value.(*file)
		if e.key.Ino == keep {
			if c.lru.Len() == 1 {
				return
			}
			c.lru.MoveToFront(back)
			continue
		}
		c.dropLocked(e)
	}
}

// dropLocked forgets e and removes its data (c.mu held). A read or store
// under way ends first.
func (c *Cache) dropLocked(e *file) {
	delete(c.files, e.key.Ino)
	c.lru.Remove(e.elem)
	c.used -= e.counted
	e.io.Lock()
	if e.f != nil {
		e.f.Close()
	}
	e.io.Unlock()
	os.Remove(c.dataPath(e.key.Ino))
}

// Drop forgets the blocks of file ino (it changed).
func (c *Cache) Drop(ino uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.files[ino]; e != nil {
		c.dropLocked(e)
	}
}

// Close writes the index, so that the next Open takes the blocks back.
func (c *Cache) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	idx := indexJSON{Clean: true}
	for el := c.lru.Front(); el != nil; el = el.Next() {
		e := el.Value.(*file)
		e.io.Lock()
		if e.f != nil {
			e.f.Close()
		}
		e.io.Unlock()
		fi := indexFile{Key: e.key}
		for blk := range e.blocks {
			fi.Blocks = append(fi.Blocks, blk)
		}
		idx.Files = append(idx.Files, fi)
	}
	return c.writeIndex(idx)
}

// Stats is what a cache holds and how it answered.
type Stats struct {
	Dir          string `json:"dir"`
	Size         int64  `json:"size"`
	Used         int64  `json:"used"`
	Files        int    `json:"files"`
	Hits, Misses int64
	Stored       int64 // blocks stored
}

// Stats reports the cache's state.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{Dir: c.dir, Size: c.size, Used: c.used, Files: len(c.files), Hits: c.hits.Load(),
		Misses: c.misses.Load(), Stored: c.stored.Load()}
}
