package flashcache

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"time"

	"tandemfs/internal/storage"
)

// Promotion: a chunk file read from the disk twice within PromoteWithin is
// copied to the flash in the background. Once is not enough: a stream read
// once (a backup, a checkstream) would flush the cache of what is hot.

// maxGhosts bounds the misses remembered; past it the oldest half goes.
const maxGhosts = 1 << 16

// promoteBuf is how much a promotion copies at a time.
const promoteBuf = 1 << 20

// hit counts a read the copy answered.
func (t *Tier) hit(e *entry, n int) {
	t.hits.Add(1)
	t.readBytes.Add(int64(n))
	t.touch(e)
}

// missed notes a read of rel from the disk and queues rel's promotion on
// the second within PromoteWithin.
func (t *Tier) missed(rel string) {
	now := time.Now()
	t.mu.Lock()
	if t.failed != nil || t.entries[rel] != nil {
		t.mu.Unlock()
		return
	}
	first, seen := t.ghosts[rel]
	if !seen || now.Sub(first) > t.cfg.PromoteWithin {
		if len(t.ghosts) >= maxGhosts {
			t.forgetOldGhosts(now)
		}
		t.ghosts[rel] = now
		t.mu.Unlock()
		return
	}
	delete(t.ghosts, rel)
	e := &entry{rel: rel, promoting: true}
	t.entries[rel] = e
	t.mu.Unlock()
	select {
	case t.promotions <- e:
	default: // the promoter is behind: a later read asks again
		t.forget(e)
	}
}

// forgetOldGhosts drops the misses older than half of PromoteWithin, or
// all of them if none is (t.mu held).
func (t *Tier) forgetOldGhosts(now time.Time) {
	for rel, at := range t.ghosts {
		if now.Sub(at) > t.cfg.PromoteWithin/2 {
			delete(t.ghosts, rel)
		}
	}
	if len(t.ghosts) >= maxGhosts {
		clear(t.ghosts)
	}
}

// forget removes e, which has no copy, from the index.
func (t *Tier) forget(e *entry) {
	t.mu.Lock()
	if t.entries[e.rel] == e {
		delete(t.entries, e.rel)
	}
	t.mu.Unlock()
}

// promoter copies queued chunk files to the flash until the tier closes.
func (t *Tier) promoter() {
	defer t.wg.Done()
	for {
		select {
		case <-t.stop:
			return
		case e := <-t.promotions:
			t.promote(e)
		}
	}
}

// promote copies e's file from the disk to the flash and makes the copy
// complete, unless a write came while it copied (e.gen moved) or e was
// dropped meanwhile.
func (t *Tier) promote(e *entry) {
	gen := e.gen.Load()
	src, err := t.slow.OpenFile(filepath.Join(t.target, e.rel), os.O_RDONLY, 0)
	if err != nil {
		t.forget(e) // removed since
		return
	}
	defer src.Close()
	size, err := src.Size()
	if err != nil {
		t.forget(e)
		return
	}
	t.evict(size)
	path := t.fastPath(e.rel)
	if err := t.fast.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.forget(e)
		t.fastError(e, err)
		return
	}
	dst, err := t.fast.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.forget(e)
		t.fastError(e, err)
		return
	}
	if err := copyFile(dst, src, size); err != nil {
		dst.Close()
		t.forget(e)
		t.fast.Remove(path)
		if !isDiskError(err) {
			t.fastError(e, err)
		}
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	t.mu.Lock()
	failed := t.failed != nil
	if t.entries[e.rel] != e || failed || e.gen.Load() != gen {
		if t.entries[e.rel] == e {
			delete(t.entries, e.rel)
		}
		t.mu.Unlock()
		dst.Close()
		if !failed {
			t.fast.Remove(path) // overtaken by a write, or dropped
		}
		return
	}
	e.f, e.complete, e.promoting, e.size = t.keep(dst), true, false, size
	e.elem = t.lru.PushFront(e)
	t.used += size
	t.mu.Unlock()
	t.promoted.Add(1)
}

// diskError marks an error of the disk's file during a copy (the copy is
// given up; the cache device is not to blame).
type diskError struct{ err error }

func (d diskError) Error() string { return "reading the disk: " + d.err.Error() }

func isDiskError(err error) bool { _, ok := err.(diskError); return ok }

// copyFile copies size bytes of src to dst at the same offsets, leaving
// pieces of zeros out (the copy stays as sparse as the chunk).
func copyFile(dst, src storage.File, size int64) error {
	buf := make([]byte, promoteBuf)
	for off := int64(0); off < size; {
		n, err := src.ReadAt(buf[:min(int64(len(buf)), size-off)], off)
		if err != nil && err != io.EOF {
			return diskError{err}
		}
		if n == 0 {
			break
		}
		if !allZero(buf[:n]) {
			if _, err := dst.WriteAt(buf[:n], off); err != nil {
				return err
			}
		}
		off += int64(n)
	}
	return dst.Truncate(size)
}

var zeros = make([]byte, promoteBuf)

func allZero(b []byte) bool { return bytes.Equal(b, zeros[:len(b)]) }

// grew accounts e's copy grown to end, evicting others if the cache is
// over its size.
func (t *Tier) grew(e *entry, end int64) {
	t.mu.Lock()
	over := false
	if e.elem != nil && end > e.size {
		t.used += end - e.size
		e.size = end
		over = t.used > t.cfg.Size
	}
	t.mu.Unlock()
	t.touch(e)
	if over {
		t.evict(0)
	}
}

// resized accounts e's copy cut (or grown) to size.
func (t *Tier) resized(e *entry, size int64) {
	t.mu.Lock()
	if e.elem != nil {
		t.used += size - e.size
		e.size = size
	}
	t.mu.Unlock()
}
