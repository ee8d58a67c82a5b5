package flashcache

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"tandemfs/internal/storage"
)

// The storage.FS calls of a tier: chunk files are cached files (isChunkPath),
// everything else is the disk's.

// OpenFile opens name on the disk and, for a chunk file, its cached copy
// with it. A chunk file created empty (a new chunk) gets an empty copy at
// once: writes allocate in the cache.
func (t *Tier) OpenFile(name string, flag int, perm os.FileMode) (storage.File, error) {
	rel, ok := t.rel(name)
	if ok && t.lost.Load() {
		return nil, lostError("open", rel)
	}
	var e *entry
	if ok && flag&os.O_TRUNC != 0 {
		// A destage must not write the old bytes after the cut.
		if e = t.lookup(rel); e != nil {
			e.destaging.Lock()
			defer e.destaging.Unlock()
		}
	}
	f, err := t.slow.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	if !ok || !t.serving() {
		return f, nil
	}
	if e != nil {
		t.drop(e)
	}
	if flag&os.O_CREATE != 0 && flag&(os.O_WRONLY|os.O_RDWR) != 0 && t.lookup(rel) == nil {
		if size, err := f.Size(); err == nil && size == 0 {
			t.allocate(rel)
		}
	}
	return &file{t: t, rel: rel, slow: f}, nil
}

// allocate makes an empty, complete copy of rel (a new chunk).
func (t *Tier) allocate(rel string) {
	path := t.fastPath(rel)
	if err := t.fast.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.fastError(&entry{rel: rel}, err)
		return
	}
	f, err := t.fast.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.fastError(&entry{rel: rel}, err)
		return
	}
	e := &entry{rel: rel, complete: true, f: t.keep(f)}
	t.mu.Lock()
	if t.failed != nil || t.entries[rel] != nil {
		t.mu.Unlock()
		f.Close()
		return
	}
	t.entries[rel] = e
	e.elem = t.lru.PushFront(e)
	t.mu.Unlock()
}

func (t *Tier) Mkdir(name string, perm os.FileMode) error    { return t.slow.Mkdir(name, perm) }
func (t *Tier) MkdirAll(name string, perm os.FileMode) error { return t.slow.MkdirAll(name, perm) }
func (t *Tier) ReadDirNames(name string) ([]string, error)   { return t.slow.ReadDirNames(name) }
func (t *Tier) SyncDir(name string) error                    { return t.slow.SyncDir(name) }
func (t *Tier) Statfs(name string) (uint64, uint64, error)   { return t.slow.Statfs(name) }
func (t *Tier) Lock(name string) (io.Closer, error)          { return t.slow.Lock(name) }

// MarkTopDir passes the engine's placement hint on to the disk.
func (t *Tier) MarkTopDir(name string) error {
	if m, ok := t.slow.(interface{ MarkTopDir(string) error }); ok {
		return m.MarkTopDir(name)
	}
	return nil
}

// Remove removes name from the disk and its copy from the cache.
func (t *Tier) Remove(name string) error {
	rel, ok := t.rel(name)
	if !ok {
		return t.slow.Remove(name)
	}
	if t.lost.Load() {
		return lostError("remove", rel)
	}
	e := t.lookup(rel)
	if e == nil {
		return t.slow.Remove(name)
	}
	e.destaging.Lock() // no destage recreates what is removed
	defer e.destaging.Unlock()
	err := t.slow.Remove(name)
	if err == nil || errors.Is(err, os.ErrNotExist) {
		t.drop(e)
	}
	return err
}

// Rename renames on the disk; the copies of both names are dropped, a
// dirty one destaged first (the engine renames chunk files rarely: a
// resync's or a repair's finished copy).
func (t *Tier) Rename(oldname, newname string) error {
	for _, name := range []string{oldname, newname} {
		rel, ok := t.rel(name)
		if !ok {
			continue
		}
		if t.lost.Load() {
			return lostError("rename", rel)
		}
		if e := t.lookup(rel); e != nil {
			if err := t.flush(e); err != nil {
				return err
			}
			t.drop(e)
		}
	}
	return t.slow.Rename(oldname, newname)
}

// Stat answers a dirty chunk's size and time from its copy: the disk's
// are older (a resync compares both).
func (t *Tier) Stat(name string) (int64, time.Time, error) {
	if rel, ok := t.rel(name); ok {
		if t.lost.Load() {
			return 0, time.Time{}, lostError("stat", rel)
		}
		if e := t.lookup(rel); e != nil && e.isDirty() {
			e.mu.RLock()
			defer e.mu.RUnlock()
			if e.complete {
				return t.fast.Stat(t.fastPath(rel))
			}
		}
	}
	return t.slow.Stat(name)
}

// file is an open chunk file of a cached target: slow is the disk's file,
// and its copy, when there is one, is found by rel at each call (it may be
// promoted, evicted or dropped while the file is open).
type file struct {
	t    *Tier
	rel  string
	slow storage.File
	// Since the last Sync: whether a write reached the disk's file, and
	// whether one was written back (to the copy alone).
	wroteDisk, wroteBack atomic.Bool
}

// copyOf returns rel's entry with e.mu read-locked if its copy is
// complete, else nil.
func (f *file) copyOf() *entry {
	e := f.t.lookup(f.rel)
	if e == nil {
		return nil
	}
	e.mu.RLock()
	if !e.complete {
		e.mu.RUnlock()
		return nil
	}
	return e
}

// ReadAt reads from the copy when there is one, else from the disk, and
// counts a miss toward promotion.
func (f *file) ReadAt(b []byte, off int64) (int, error) {
	if f.t.lost.Load() {
		return 0, lostError("read", f.rel)
	}
	if e := f.copyOf(); e != nil {
		n, err := f.readCopy(e, b, off) // unlocks e.mu
		if err == nil || err == io.EOF {
			f.t.hit(e, n)
			return n, err
		}
		f.t.fastError(e, err)
		if f.t.lost.Load() {
			return 0, lostError("read", f.rel) // the disk's bytes are older
		}
	}
	f.t.misses.Add(1)
	n, err := f.slow.ReadAt(b, off)
	if err == nil || err == io.EOF {
		f.t.missed(f.rel)
	}
	return n, err
}

// readCopy reads b at off from e's copy and read-unlocks e.mu.
func (f *file) readCopy(e *entry, b []byte, off int64) (int, error) {
	defer e.mu.RUnlock()
	cf, done, err := f.t.copyFile(e)
	if err != nil {
		return 0, err
	}
	defer done()
	return cf.ReadAt(b, off)
}

// WriteAt writes to the disk, then to the copy. A copy that the write
// could not reach is dropped: it would be older than the disk.
func (f *file) WriteAt(b []byte, off int64) (int, error) {
	if n, err, done := f.writeBack(b, off); done {
		return n, err
	}
	return f.writeThrough(b, off, func(sf storage.File) (int, error) { return sf.WriteAt(b, off) })
}

// writeBack writes b at off to the copy alone when the tier writes rel
// back and the chunk has a complete copy (done), after recording the range
// dirty. Otherwise the write goes through (not done).
func (f *file) writeBack(b []byte, off int64) (n int, err error, done bool) {
	if f.t.lost.Load() {
		return 0, lostError("write", f.rel), true
	}
	if !f.t.writesBack(f.rel) {
		return 0, nil, false
	}
	e := f.copyOf()
	if e == nil {
		return 0, nil, false
	}
	end := off + int64(len(b))
	if err := f.t.dirtyRange(e, off, end); err != nil {
		e.mu.RUnlock()
		f.t.fastError(e, err) // its marker could not be made: the device
		if f.t.lost.Load() {
			return 0, lostError("write", f.rel), true
		}
		return 0, nil, false
	}
	e.gen.Add(1)
	err = f.t.withCopy(e, func(cf storage.File) error { var werr error; n, werr = cf.WriteAt(b, off); return werr })
	e.mu.RUnlock()
	if err != nil {
		f.t.fastError(e, err) // a dirty copy: the device is dropped, the target fails
		return 0, lostError("write", f.rel), true
	}
	f.wroteBack.Store(true)
	f.t.grew(e, end)
	return n, nil, true
}

// WriteDirect and WriteDropBehind are writes the engine keeps off the page
// cache (a chain member's copy, a resync's, large writes): written back,
// they are ordinary writes to the copy; written through, they go to the
// disk that way, and to the copy as ordinary writes.
func (f *file) WriteDirect(b []byte, off int64) (int, error) {
	if n, err, done := f.writeBack(b, off); done {
		return n, err
	}
	return f.writeThrough(b, off, func(sf storage.File) (int, error) {
		if d, ok := sf.(interface {
			WriteDirect([]byte, int64) (int, error)
		}); ok {
			return d.WriteDirect(b, off)
		}
		return sf.WriteAt(b, off)
	})
}

func (f *file) WriteDropBehind(b []byte, off int64) (int, error) {
	if n, err, done := f.writeBack(b, off); done {
		return n, err
	}
	return f.writeThrough(b, off, func(sf storage.File) (int, error) {
		if d, ok := sf.(interface {
			WriteDropBehind([]byte, int64) (int, error)
		}); ok {
			return d.WriteDropBehind(b, off)
		}
		return sf.WriteAt(b, off)
	})
}

// writeThrough runs write (of b at off) on the disk's file and then, if
// the file has a complete copy, writes b at off to the copy too. The entry is looked up,
// and its generation moved on, only after the disk's write: a promotion
// that copied the file before the write landed sees the generation move
// and throws its copy away, and one that completes before the write looks
// gets the write too.
func (f *file) writeThrough(b []byte, off int64, write func(storage.File) (int, error)) (int, error) {
	if f.t.lost.Load() {
		return 0, lostError("write", f.rel)
	}
	f.wroteDisk.Store(true)
	wrote, err := write(f.slow)
	e := f.t.lookup(f.rel)
	if e == nil {
		return wrote, err
	}
	e.gen.Add(1)
	if err != nil {
		if !e.isDirty() {
			f.t.drop(e) // the disk's bytes there are unknown now
		}
		return wrote, err
	}
	e.mu.RLock()
	if !e.complete {
		e.mu.RUnlock()
		return wrote, nil
	}
	var ferr error
	if e.isDirty() {
		// A destage running now may put older bytes over these on the
		// disk: the range is destaged again.
		ferr = f.t.dirtyRange(e, off, off+int64(len(b)))
	}
	if ferr == nil {
		ferr = f.t.withCopy(e, func(cf storage.File) error { _, err := cf.WriteAt(b, off); return err })
	}
	e.mu.RUnlock()
	if ferr != nil {
		f.t.fastError(e, ferr)
		if f.t.lost.Load() {
			return 0, lostError("write", f.rel)
		}
		return wrote, nil
	}
	f.t.grew(e, off+int64(len(b)))
	return wrote, nil
}

// Truncate cuts the disk's file and the copy; written back (the chunk has
// a complete copy), the copy alone, and the destager cuts the disk's file.
func (f *file) Truncate(size int64) error {
	if f.t.lost.Load() {
		return lostError("truncate", f.rel)
	}
	back := f.t.writesBack(f.rel)
	e := f.t.lookup(f.rel)
	if e == nil {
		f.wroteDisk.Store(true)
		return f.slow.Truncate(size)
	}
	e.mu.RLock()
	if !back || !e.complete {
		f.wroteDisk.Store(true)
		if err := f.slow.Truncate(size); err != nil {
			dirty := e.isDirty()
			e.mu.RUnlock()
			if !dirty {
				f.t.drop(e) // the disk's size is unknown now
			}
			return err
		}
	}
	e.gen.Add(1)
	if !e.complete {
		e.mu.RUnlock()
		return nil
	}
	var ferr error
	if back || e.isDirty() {
		ferr = f.t.dirtyCut(e, size)
	}
	if ferr == nil {
		ferr = f.t.withCopy(e, func(cf storage.File) error { return cf.Truncate(size) })
	}
	e.mu.RUnlock()
	if ferr != nil {
		f.t.fastError(e, ferr)
		if f.t.lost.Load() {
			return lostError("truncate", f.rel)
		}
		if back {
			return f.Truncate(size) // the copy was dropped: through to the disk
		}
		return nil
	}
	if back {
		f.wroteBack.Store(true)
	}
	f.t.resized(e, size)
	return nil
}

// Sync makes what was written durable: the disk's file after writes that
// went through (write-through acknowledges nothing that is only on the
// flash), and a dirty copy, whose bytes are the chunk's until destaged.
func (f *file) Sync() error {
	if f.t.lost.Load() {
		return lostError("sync", f.rel)
	}
	back, disk := f.wroteBack.Swap(false), f.wroteDisk.Swap(false)
	if e := f.copyOf(); e != nil {
		var err error
		if e.isDirty() {
			err = f.t.withCopy(e, func(cf storage.File) error { return cf.Sync() })
		}
		e.mu.RUnlock()
		if err != nil {
			f.t.fastError(e, err)
			return lostError("sync", f.rel)
		}
	}
	if disk || !back {
		return f.slow.Sync()
	}
	return nil
}

// Size is the copy's when it is dirty (the disk's is older).
func (f *file) Size() (int64, error) {
	if f.t.lost.Load() {
		return 0, lostError("size", f.rel)
	}
	if e := f.copyOf(); e != nil {
		if e.isDirty() {
			var size int64
			err := f.t.withCopy(e, func(cf storage.File) error { var err error; size, err = cf.Size(); return err })
			e.mu.RUnlock()
			if err != nil {
				f.t.fastError(e, err)
				return 0, lostError("size", f.rel)
			}
			return size, nil
		}
		e.mu.RUnlock()
	}
	return f.slow.Size()
}
func (f *file) Close() error          { return f.slow.Close() }
func (f *file) StartWriteback() error { return passWriteback(f.slow) }
func (f *file) DropCache()            { passDropCache(f.slow) }

// sender is a File the kernel can send bytes from (storage's sendfile).
type sender interface {
	SendFrom(func(fd int) error) error
}

// SendFrom lets the engine send bytes with sendfile from the copy when
// there is one, else from the disk's file. A copy that fails before the
// send starts is the cache device failing: it is dropped and the disk's
// file sends; one that fails with EIO while sending drops the device too,
// and the call fails (the reader asks again).
func (f *file) SendFrom(send func(fd int) error) error {
	if f.t.lost.Load() {
		return lostError("read", f.rel)
	}
	if e := f.copyOf(); e != nil {
		if sent, err := f.sendFromCopy(e, send); sent {
			return err
		}
		if f.t.lost.Load() {
			return lostError("read", f.rel)
		}
	}
	s, ok := f.slow.(sender)
	if !ok {
		return syscall.EOPNOTSUPP // the engine reads instead
	}
	f.t.misses.Add(1)
	f.t.missed(f.rel)
	return s.SendFrom(send)
}

// sendFromCopy sends from e's copy and read-unlocks e.mu; done says the
// call is over (sent, or failed while sending), else the disk's file is
// to send.
func (f *file) sendFromCopy(e *entry, send func(fd int) error) (done bool, err error) {
	started := false
	err = f.t.withCopy(e, func(cf storage.File) error {
		s, ok := cf.(sender)
		if !ok {
			return syscall.EOPNOTSUPP
		}
		return s.SendFrom(func(fd int) error { started = true; return send(fd) })
	})
	e.mu.RUnlock()
	switch {
	case err == nil:
		f.t.hit(e, 0)
		return true, nil
	case !started:
		if !errors.Is(err, syscall.EOPNOTSUPP) {
			f.t.fastError(e, err)
		}
		return false, nil
	default:
		if errors.Is(err, syscall.EIO) {
			f.t.fastError(e, err)
		}
		return true, err
	}
}

// withCopy runs fn with e's copy, open (e.mu held; e complete).
func (t *Tier) withCopy(e *entry, fn func(storage.File) error) error {
	cf, done, err := t.copyFile(e)
	if err != nil {
		return err
	}
	defer done()
	return fn(cf)
}

func passWriteback(f storage.File) error {
	if w, ok := f.(interface{ StartWriteback() error }); ok {
		return w.StartWriteback()
	}
	return nil
}

func passDropCache(f storage.File) {
	if d, ok := f.(interface{ DropCache() }); ok {
		d.DropCache()
	}
}
