package storage

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// acquire returns the open chunk (ino, idx) with a reference taken. A chunk
// that does not exist yields nil unless create is set.
func (t *Target) acquire(k chunkKey, create bool) (*chunk, error) {
	if t.closed.Load() {
		return nil, errClosed
	}
	if ch := t.cache.get(k); ch != nil {
		return ch, nil
	}
	l := t.inoLock(k.ino)
	l.RLock()
	defer l.RUnlock()
	if ch := t.cache.get(k); ch != nil {
		return ch, nil
	}
	ch, err := t.openChunk(k, create)
	if ch == nil || err != nil {
		return nil, err
	}
	if ch = t.cache.insert(ch); ch == nil {
		return nil, errClosed
	}
	return ch, nil
}

// withChunk runs fn on chunk k holding its lock (exclusively if excl), or
// fn(nil) if the chunk does not exist and create is false.
func (t *Target) withChunk(k chunkKey, create, excl bool, fn func(*chunk) error) error {
	for {
		ch, err := t.acquire(k, create)
		if err != nil {
			return err
		}
		if ch == nil {
			return fn(nil)
		}
		if excl {
			ch.mu.Lock()
		} else {
			ch.mu.RLock()
		}
		if ch.dead.Load() {
			// Deleted, or its state became unknown, between acquire
			// and lock: start again with a fresh handle.
			t.unlockRelease(ch, excl)
			continue
		}
		err = fn(ch)
		t.unlockRelease(ch, excl)
		return err
	}
}

func (t *Target) unlockRelease(ch *chunk, excl bool) {
	if excl {
		ch.mu.Unlock()
	} else {
		ch.mu.RUnlock()
	}
	t.cache.release(ch)
}

// openChunk opens the data and sidecar files of k, creating them (and the
// ino directory) if create is set.
//
// Both are opened with O_CREAT when they may be created: one openat(2)
// whether the file exists or not. Opening first and creating on ENOENT
// (with a mkdir of the ino directory before, in case) took five calls and
// a sixth for the O_DIRECT descriptor per new chunk, each creating one
// holding the ino directory's lock, and a sequential writer or a resync
// makes a new chunk per MiB: a member receiving a resync spent more time
// in openat(2) than in writing (perf trace, 2026-11-27). Whether the
// create made the files is not reported by open; an empty one may be new,
// so its directory entry is marked for the next sync either way.
func (t *Target) openChunk(k chunkKey, create bool) (*chunk, error) {
	dp := t.dataPath(k.ino, k.idx)
	data, err := t.openData(k.ino, dp, create)
	if data == nil || err != nil {
		return nil, err
	}
	// A data file without a sidecar is one a crash interrupted right
	// after creating it: no entries yet, which the format reads as {0, 0}.
	sum, err := t.fs.OpenFile(dp+".sum", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		data.Close()
		return nil, err
	}
	ch := &chunk{key: k, data: data, sum: sum}
	if err := ch.refreshSizes(); err != nil {
		ch.closeFiles()
		return nil, err
	}
	if ch.size == 0 || ch.sumSize == 0 {
		t.markDirty(k.ino, dirtyInoDir)
	}
	return ch, nil
}

// openData opens the data file dp of a chunk of ino: nil if it does not
// exist and create is not set; with create, made (with the ino directory
// if that is missing) if it does not exist.
func (t *Target) openData(ino uint64, dp string, create bool) (File, error) {
	if !create {
		data, err := t.fs.OpenFile(dp, os.O_RDWR, 0)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return data, err
	}
	data, err := t.fs.OpenFile(dp, os.O_RDWR|os.O_CREATE, 0o644)
	if errors.Is(err, fs.ErrNotExist) { // the first chunk of ino here
		if err := t.makeInoDir(ino); err != nil {
			return nil, err
		}
		data, err = t.fs.OpenFile(dp, os.O_RDWR|os.O_CREATE, 0o644)
	}
	return data, err
}

// refreshSizes reloads the file sizes, and the sidecar mirror, from the
// file system.
func (ch *chunk) refreshSizes() error {
	var err error
	if ch.size, err = ch.data.Size(); err != nil {
		return err
	}
	if ch.sumSize, err = ch.sum.Size(); err != nil {
		return err
	}
	return ch.loadSums()
}

func (t *Target) makeInoDir(ino uint64) error {
	dir := t.inoDir(ino)
	err := t.fs.Mkdir(dir, 0o755)
	switch {
	case err == nil:
		t.markDirty(ino, dirtyParentDir)
		return nil
	case errors.Is(err, fs.ErrExist):
		return nil
	case errors.Is(err, fs.ErrNotExist):
		// chunks/hh vanished (an administrator cleaning up?); recreate.
		t.markDirty(ino, dirtyParentDir)
		if err := t.fs.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		return t.fs.SyncDir(filepath.Dir(filepath.Dir(dir)))
	}
	return err
}

// readData fills b from the data file at off; bytes past its end read as
// zeros (they then fail verification unless their entries are empty).
func (ch *chunk) readData(b []byte, off int64) error {
	n, err := ch.data.ReadAt(b, off)
	if err == io.EOF {
		clear(b[n:])
		return nil
	}
	return err
}

func blocksIn(size int64) int64 { return (size + blockMask) / BlockSize }
