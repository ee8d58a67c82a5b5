package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Truncate cuts or extends chunk idx of file ino to size bytes. Extending
// adds a hole. Truncating a missing chunk to 0 does nothing.
func (t *Target) Truncate(ino, idx uint64, size int64) error {
	if size < 0 || size > MaxChunkSize {
		return fmt.Errorf("truncate to %d bytes: %w", size, syscall.EINVAL)
	}
	k := chunkKey{ino, idx}
	err := t.withChunk(k, size > 0, true, func(ch *chunk) error {
		if ch == nil {
			return nil
		}
		return t.truncateLocked(ch, size)
	})
	return t.chunkErr("truncate", k, err)
}

func (t *Target) truncateLocked(ch *chunk, size int64) error {
	old := ch.size
	if size == old {
		return nil
	}
	oldBlocks := blocksIn(old)
	if size > old {
		// The old last block stays valid (its checksum counts the
		// zeros it grows by); the new blocks are holes, whose entries
		// must read {0, 0}.
		if ch.sumSize > oldBlocks*entrySize {
			if err := ch.cutSums(oldBlocks * entrySize); err != nil {
				return t.resync(ch, err)
			}
		}
		if err := ch.data.Truncate(size); err != nil {
			return t.resync(ch, err)
		}
		ch.size = size
		return nil
	}
	if size&blockMask != 0 {
		// The new last block loses its tail: record {old, new} before
		// cutting, as a write does.
		b := size / BlockSize
		var eb [entrySize]byte
		if err := ch.readEntries(eb[:], b); err != nil {
			return err
		}
		bp := getBuf(BlockSize)
		defer putBuf(bp)
		blk := (*bp)[:min(BlockSize, old-b*BlockSize)]
		oldCRC, err := t.readVerified(ch, blk, b*BlockSize, getEntry(eb[:], 0))
		if err != nil {
			return err
		}
		putEntry(eb[:], 0, entry{oldCRC, blockCRC(blk[:size-b*BlockSize])})
		if err := ch.writeEntries(eb[:], b); err != nil {
			return t.resync(ch, err)
		}
	}
	if err := ch.data.Truncate(size); err != nil {
		return t.resync(ch, err)
	}
	ch.size = size
	if n := blocksIn(size) * entrySize; ch.sumSize > n {
		if err := ch.cutSums(n); err != nil {
			return t.resync(ch, err)
		}
	}
	return nil
}

// syncParallelism bounds the fsyncs one Sync runs at once.
const syncParallelism = 16

// syncChunk fsyncs one chunk's data and checksums, if it exists.
func (t *Target) syncChunk(k chunkKey) error {
	ch, err := t.acquire(k, false)
	if err != nil {
		return t.chunkErr("sync", k, err)
	}
	if ch == nil {
		return nil // nothing written: a hole is durable as it is
	}
	// No chunk lock: fsync may run alongside writes, and the reference
	// keeps the files open. The data and its checksums are synced at
	// once, so that the file system folds their flushes together.
	sumErr := make(chan error, 1)
	go func() { sumErr <- ch.sum.Sync() }()
	err = ch.data.Sync()
	if e := <-sumErr; err == nil {
		err = e
	}
	t.cache.release(ch)
	if err != nil {
		t.logf("storage: target %s: fsync of chunk %d/%d failed: %v", t.dir, k.ino, k.idx, err)
		return t.chunkErr("sync", k, err)
	}
	return nil
}

// Sync makes the listed chunks of file ino durable: their data, their
// checksums and, for chunks created since the last Sync, their directory
// entries. No indexes means every chunk of the file on this target.
func (t *Target) Sync(ino uint64, indexes []uint64) error {
	if len(indexes) == 0 {
		var err error
		if indexes, err = t.listChunks(ino); err != nil {
			return fmt.Errorf("sync file %d on target %s: %w", ino, t.dir, err)
		}
	}
	// fsync the chunks concurrently: the file system then writes their
	// data together and folds their journal commits into a few, where one
	// fsync after another would wait a full commit each.
	errs := make(chan error, len(indexes))
	sem := make(chan struct{}, syncParallelism)
	for _, idx := range indexes {
		sem <- struct{}{}
		go func(idx uint64) {
			defer func() { <-sem }()
			errs <- t.syncChunk(chunkKey{ino, idx})
		}(idx)
	}
	var first error
	for range indexes {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return first
	}
	if err := t.syncDirs(ino); err != nil {
		return fmt.Errorf("sync directory of file %d on target %s: %w", ino, t.dir, err)
	}
	return nil
}

func (t *Target) syncDirs(ino uint64) error {
	l := &t.dirSyncs[ino%uint64(len(t.dirSyncs))]
	l.Lock()
	defer l.Unlock()
	t.dirtyMu.Lock()
	s := t.dirty[ino]
	delete(t.dirty, ino)
	t.dirtyMu.Unlock()
	if s == 0 {
		return nil
	}
	dir := t.inoDir(ino)
	var err error
	if s&dirtyInoDir != 0 {
		err = t.fs.SyncDir(dir)
	}
	if err == nil && s&dirtyParentDir != 0 {
		err = t.fs.SyncDir(filepath.Dir(dir))
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil // deleted meanwhile
	}
	if err != nil {
		t.markDirty(ino, s)
	}
	return err
}

// listChunks returns the indexes of the chunks of ino stored here.
func (t *Target) listChunks(ino uint64) ([]uint64, error) {
	names, err := t.fs.ReadDirNames(t.inoDir(ino))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var idxs []uint64
	for _, n := range names {
		if idx, err := strconv.ParseUint(n, 10, 64); err == nil {
			idxs = append(idxs, idx)
		}
	}
	return idxs, nil
}

// Delete removes the chunks of file ino whose index is at least from, and
// the file's directory once it is empty. The removal is durable on return,
// so that a crash cannot bring back chunks a later extension would expose.
func (t *Target) Delete(ino, from uint64) error { return t.DeleteRange(ino, from, 0) }

// DeleteRange removes the chunks of file ino whose index is in [from, to)
// (to 0: no upper bound), like Delete.
func (t *Target) DeleteRange(ino, from, to uint64) error {
	if t.closed.Load() {
		return errClosed
	}
	l := t.inoLock(ino)
	l.Lock()
	defer l.Unlock()
	if err := t.deleteLocked(ino, from, to); err != nil {
		return fmt.Errorf("delete chunks %d/%d.. on target %s: %w", ino, from, t.dir, err)
	}
	return nil
}

func (t *Target) deleteLocked(ino, from, to uint64) error {
	dir := t.inoDir(ino)
	names, err := t.fs.ReadDirNames(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var doomed []string
	kept := 0
	for _, n := range names {
		idx, err := strconv.ParseUint(strings.TrimSuffix(n, ".sum"), 10, 64)
		if err != nil || idx < from || (to != 0 && idx >= to) {
			kept++
			continue
		}
		doomed = append(doomed, n)
		if !strings.HasSuffix(n, ".sum") {
			t.retire(chunkKey{ino, idx})
		}
	}
	for _, n := range doomed {
		if err := t.fs.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if kept > 0 {
		if len(doomed) > 0 {
			return t.fs.SyncDir(dir)
		}
		return nil
	}
	if err := t.fs.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	t.dirtyMu.Lock()
	delete(t.dirty, ino)
	t.dirtyMu.Unlock()
	return t.fs.SyncDir(filepath.Dir(dir))
}

// retire takes chunk k out of the cache and waits for operations using it
// to finish; operations that come later open the chunk afresh.
func (t *Target) retire(k chunkKey) {
	ch := t.cache.take(k)
	if ch == nil {
		return
	}
	ch.mu.Lock()
	ch.dead.Store(true)
	ch.mu.Unlock()
	t.cache.release(ch)
}
