// Package flashcache puts a storage target's chunks on a faster device in
// front of its disk: Dell Fluid Cache's SSDs in front of a disk array,
// rebuilt as a file system layer under the chunk engine (issue 42;
// docs/architecture.md, "Flash cache").
//
// A Tier is a storage.FS over the target's disk (the slow file system)
// that keeps copies of chunk files (data and checksum sidecars, whole) in a
// cache directory on the fast device. The engine above it is unchanged:
// its writes, reads, syncs and checksums go through the tier, which decides
// where each lands.
//
//   - Write-through: a write goes to the disk, and to the cached copy when
//     the chunk has one (or is new: writes allocate); Sync makes the disk's
//     copy durable, and nothing is acknowledged before that. Reads of a
//     chunk with a copy read the flash.
//   - Reads of a chunk without a copy read the disk; a chunk read again
//     within a while (a ghost list remembers recent misses) is promoted: its
//     files are copied to the flash in the background, and the copy counts
//     only if no write came meanwhile.
//   - When the copies pass the cache's size, the least recently used are
//     evicted.
//   - A cache device that fails (an I/O error, a full device) is dropped at
//     once: the tier serves everything from the disk (write-through, which
//     loses nothing) and Stats says why.
//
// Only chunk files are cached (the target's chunks/ and its chain stores'
// chains/<chain>/chunks/); target.json, the lock and the rest go to the
// disk alone. The cache directory holds the
// copies at the same relative paths, and tandem-cache.json: the target it
// caches and whether it was closed cleanly. A cache not closed cleanly, or
// of another target, is emptied when it is opened again (its copies may be
// older than the disk).
package flashcache

import (
	"container/list"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"tandemfs/internal/proto"
	"tandemfs/internal/storage"
)

// Mode is how a tier treats writes.
type Mode int

const (
	// Off: no cache; every call goes to the disk.
	Off Mode = iota
	// WriteThrough: writes are durable on the disk before they are
	// acknowledged; the flash holds copies for reads.
	WriteThrough
)

func (m Mode) String() string {
	switch m {
	case Off:
		return "off"
	case WriteThrough:
		return "writethrough"
	case WriteBack:
		return "writeback"
	}
	return fmt.Sprintf("mode(%d)", int(m))
}

// ParseMode reads a mode's name.
func ParseMode(s string) (Mode, error) {
	switch s {
	case "off":
		return Off, nil
	case "writethrough", "write-through", "wt":
		return WriteThrough, nil
	case "writeback", "write-back", "wb":
		return WriteBack, nil
	}
	return Off, fmt.Errorf("cache mode %q: give writethrough, writeback or off", s)
}

// MinSize is the smallest cache: room for one chunk of the largest size a
// file may have, and its checksums.
const MinSize = 64<<20 + 128<<10

// Config is one cached target.
type Config struct {
	// Target is the target directory; Dir the cache directory, on
	// another file system.
	Target, Dir string
	// Size bounds the bytes of the copies on the flash.
	Size int64
	Mode Mode
	// Slow is the file system of the target (nil: the real one); Fast
	// that of the cache (nil: the real one).
	Slow, Fast storage.FS
	// Logf receives what the tier decides (a device dropped, a cache
	// emptied); nil: the standard logger.
	Logf func(format string, args ...any)
	// PromoteWithin is how soon a second read of a chunk must follow the
	// first for the chunk to be promoted (default 10 minutes).
	PromoteWithin time.Duration
}

// Tier is the file system of one cached target (storage.FS).
type Tier struct {
	cfg    Config
	slow   storage.FS
	fast   storage.FS
	target string // cleaned
	dir    string

	mu      sync.Mutex
	entries map[string]*entry // by path relative to the target
	lru     list.List         // of *entry, most recently used at the front
	used    int64             // bytes of complete copies
	ghosts  map[string]time.Time
	failed  error // the cache device's failure; nil while it serves

	promotions chan *entry
	wg         sync.WaitGroup
	stop       chan struct{}
	closeOnce  sync.Once

	wbState // writeback.go

	hits, misses, promoted, evicted atomic.Int64
	readBytes                       atomic.Int64 // bytes read from the flash
	openCopies                      atomic.Int64 // copies kept open (keep)
	maxOpen                         int64        // maxOpenCopies (less in tests)
}

// maxOpenCopies bounds the copies a tier keeps open: a cache of a few
// hundred GiB holds hundreds of thousands of chunk files. Past it a copy
// is opened for each call (copyFile).
const maxOpenCopies = 4096

// keep returns f to be kept open by its entry, or closes it and returns
// nil when maxOpenCopies are open.
func (t *Tier) keep(f storage.File) storage.File {
	if t.openCopies.Add(1) <= t.maxOpen {
		return f
	}
	t.openCopies.Add(-1)
	f.Close()
	return nil
}

// closeCopy closes e's open copy, if any (e.mu held exclusively).
func (t *Tier) closeCopy(e *entry) {
	if e.f != nil {
		e.f.Close()
		e.f = nil
		t.openCopies.Add(-1)
	}
}

// copyFile returns e's copy, open, and what to call when done with it
// (e.mu held; e complete).
func (t *Tier) copyFile(e *entry) (storage.File, func(), error) {
	if e.f != nil {
		return e.f, func() {}, nil
	}
	f, err := t.fast.OpenFile(t.fastPath(e.rel), os.O_RDWR, 0)
	if err != nil {
		return nil, nil, err
	}
	return f, func() { f.Close() }, nil
}

// entry is one chunk file's copy on the flash.
type entry struct {
	rel string
	// mu is held shared while the copy is read or written through, and
	// exclusively while it is made complete, evicted or dropped.
	mu sync.RWMutex
	// complete: the copy holds the file's bytes; f is its open file, or
	// nil past maxOpenCopies (copyFile opens it for each call).
	// gen counts the writes to the file, so a promotion that a write
	// overtook is not taken. Guarded by mu (and Tier.mu for elem).
	complete  bool
	promoting bool
	f         storage.File
	gen       atomic.Uint64
	size      int64 // accounted bytes (the copy's size when it completed)
	elem      *list.Element

	// Write-back (writeback.go): dmu guards ds; destaging is held while
	// the destager writes the disk's file, and by calls that remove or
	// truncate it under a dirty copy.
	dmu       sync.Mutex
	ds        dirtyState
	destaging sync.Mutex
}

// manifest is tandem-cache.json.
type manifest struct {
	Target string `json:"target"`
	Clean  bool   `json:"clean"`
}

const manifestName = "tandem-cache.json"

// Open opens the cache of one target, emptying it unless it was closed
// cleanly with the same target, and starts its promoter.
func Open(cfg Config) (*Tier, error) {
	if cfg.Slow == nil {
		cfg.Slow = storage.OSFS{}
	}
	if cfg.Fast == nil {
		cfg.Fast = storage.OSFS{}
	}
	if cfg.Logf == nil {
		cfg.Logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	}
	if cfg.PromoteWithin == 0 {
		cfg.PromoteWithin = 10 * time.Minute
	}
	// The engine opens its files by absolute paths.
	for _, p := range []*string{&cfg.Target, &cfg.Dir} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return nil, fmt.Errorf("cache %s: %w", *p, err)
		}
		*p = abs
	}
	t := &Tier{cfg: cfg, slow: cfg.Slow, fast: cfg.Fast, target: filepath.Clean(cfg.Target), dir: filepath.Clean(cfg.Dir),
		entries: map[string]*entry{}, ghosts: map[string]time.Time{}, promotions: make(chan *entry, 256), stop: make(chan struct{}),
		maxOpen: maxOpenCopies}
	t.dqCond = sync.NewCond(&t.dq)
	stale, err := t.setAsideStale()
	if err != nil {
		return nil, fmt.Errorf("cache %s: setting aside the chunks a lost cache held: %w", t.dir, err)
	}
	wroteBack := CheckUncached(t.target, t.slow) != nil
	if cfg.Mode == Off && !wroteBack {
		return t, nil
	}
	if err := t.checkWriteBackFlag(stale); err != nil {
		return nil, err
	}
	if cfg.Mode != Off {
		if err := t.check(); err != nil {
			return nil, err
		}
	}
	if err := t.load(stale); err != nil {
		return nil, err
	}
	if err := t.forgetLostList(stale); err != nil {
		return nil, fmt.Errorf("cache %s: %w", t.dir, err)
	}
	if cfg.Mode != WriteBack {
		if err := t.leaveWriteBack(); err != nil {
			return nil, err
		}
	}
	if cfg.Mode == Off {
		return t, nil
	}
	t.wg.Add(1)
	go t.promoter()
	if cfg.Mode == WriteBack {
		t.wg.Add(1)
		go t.destager()
	}
	return t, nil
}

// leaveWriteBack destages what a write-back cache holds dirty and then
// takes the write-back flag off the target: a start in another mode.
func (t *Tier) leaveWriteBack() error {
	if err := t.destageAll(); err != nil {
		return fmt.Errorf("cache %s: destaging before serving %s: %w (the cache keeps it: start again in writeback mode to serve it)", t.dir, t.cfg.Mode, err)
	}
	if t.recovering.Load() {
		return nil // the flag stays until the lost chunks are resynced (ResyncedLost)
	}
	err := t.slow.Remove(filepath.Join(t.target, wbFlagName))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return t.slow.SyncDir(t.target)
}

// check refuses a cache that cannot work: too small, or on the target's
// own file system (no faster device at all).
func (t *Tier) check() error {
	if t.cfg.Size < MinSize {
		return fmt.Errorf("cache %s: %d bytes is smaller than one chunk and its checksums (%d bytes)", t.dir, t.cfg.Size, MinSize)
	}
	if err := t.fast.MkdirAll(t.dir, 0o755); err != nil {
		return fmt.Errorf("cache %s: %w", t.dir, err)
	}
	same, err := sameFileSystem(t.target, t.dir)
	if err != nil {
		return fmt.Errorf("cache %s: %w", t.dir, err)
	}
	if same {
		return fmt.Errorf("cache %s is on the same file system as its target %s: give a directory on the faster device", t.dir, t.target)
	}
	return nil
}

func sameFileSystem(a, b string) (bool, error) {
	var sa, sb syscall.Stat_t
	if err := syscall.Stat(a, &sa); err != nil {
		return false, err
	}
	if err := syscall.Stat(b, &sb); err != nil {
		return false, err
	}
	return sa.Dev == sb.Dev, nil
}

// load takes over the copies of a cache closed cleanly for this target;
// of one that was not (a crash), only the dirty copies (write-back's,
// whole); it empties a cache of another target or whose dirty copies were
// given up (stale: the target's disk was set aside for a resync). It
// records that the cache is in use (not clean).
func (t *Tier) load(stale bool) error {
	var m manifest
	b, err := storage.ReadFile(t.fast, filepath.Join(t.dir, manifestName))
	if errors.Is(err, os.ErrNotExist) {
		err = nil // a new cache
	}
	if err != nil {
		return fmt.Errorf("cache %s: %w", t.dir, err)
	}
	parsed := len(b) > 0 && json.Unmarshal(b, &m) == nil
	switch {
	case len(b) > 0 && (!parsed || m.Target != t.target):
		if names, _ := t.fast.ReadDirNames(filepath.Join(t.dir, dirtyDir)); len(names) > 0 {
			return fmt.Errorf("cache %s holds %d chunks written back for target %s, not yet on its disk: give it to that target", t.dir, len(names), m.Target)
		}
		t.cfg.Logf("flashcache: %s cached another target (%s): emptying it", t.dir, m.Target)
		err = t.empty()
	case stale:
		t.cfg.Logf("flashcache: %s: its copies were given up when it failed: emptying it", t.dir)
		err = t.empty()
	case parsed && m.Clean:
		if err = t.scan(); err == nil {
			err = t.loadDirty()
		}
	case parsed:
		t.cfg.Logf("flashcache: %s was not closed cleanly: keeping its dirty copies (to destage), dropping the others", t.dir)
		if err = t.loadDirty(); err == nil {
			err = t.removeUnmarked()
		}
	}
	if err != nil {
		return fmt.Errorf("cache %s: %w", t.dir, err)
	}
	if err := t.fast.MkdirAll(filepath.Join(t.dir, dirtyDir), 0o755); err != nil {
		return fmt.Errorf("cache %s: %w", t.dir, err)
	}
	return t.writeManifest(false)
}

// scan indexes the copies of a cleanly closed cache.
func (t *Tier) scan() error {
	return filepath.WalkDir(t.dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if rel, _ := filepath.Rel(t.dir, path); !isChunkPath(rel) {
			return nil // the manifest
		}
		size, _, err := t.fast.Stat(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(t.dir, path)
		var f storage.File
		if t.openCopies.Load() < t.maxOpen {
			if f, err = t.fast.OpenFile(path, os.O_RDWR, 0); err != nil {
				return err
			}
			f = t.keep(f)
		}
		e := &entry{rel: rel, complete: true, f: f, size: size}
		t.entries[rel] = e
		e.elem = t.lru.PushBack(e)
		t.used += size
		return nil
	})
}

// empty removes every copy.
func (t *Tier) empty() error {
	for rel, e := range t.entries {
		t.closeCopy(e)
		delete(t.entries, rel)
	}
	t.lru.Init()
	t.used = 0
	for _, d := range []string{"chunks", "chains", dirtyDir} {
		if err := os.RemoveAll(filepath.Join(t.dir, d)); err != nil {
			return err
		}
	}
	return nil
}

func (t *Tier) writeManifest(clean bool) error {
	b, _ := json.Marshal(manifest{Target: t.target, Clean: clean})
	return storage.WriteFileAtomic(t.fast, filepath.Join(t.dir, manifestName), b)
}

// Close stops the promoter and the destager and marks the cache clean, so
// that the next Open keeps its copies. Dirty copies stay dirty, with their
// markers: the next start destages them.
func (t *Tier) Close() error {
	var err error
	t.closeOnce.Do(func() {
		t.halt()
		if t.cfg.Mode == Off {
			return
		}
		t.mu.Lock()
		failed := t.failed
		entries := make([]*entry, 0, len(t.entries))
		for _, e := range t.entries {
			entries = append(entries, e)
		}
		t.mu.Unlock()
		for _, e := range entries {
			e.mu.Lock() // (entry locks are taken before t.mu, never after)
			t.closeCopy(e)
			e.complete = false
			e.mu.Unlock()
		}
		if failed == nil {
			err = t.writeManifest(true)
		}
	})
	return err
}

// halt stops the promoter and the destager (a destage under way ends
// first).
func (t *Tier) halt() {
	t.dq.Lock()
	t.stopping = true
	t.dq.Unlock()
	t.dqCond.Broadcast()
	close(t.stop)
	t.wg.Wait()
}

// rel is name's path relative to the target when the tier caches it: a
// chunk file of the target's own store (chunks/...) or of a replicated
// chain's store inside it (chains/<chain>/chunks/...).
func (t *Tier) rel(name string) (string, bool) {
	if t.cfg.Mode == Off {
		return "", false
	}
	r, err := filepath.Rel(t.target, filepath.Clean(name))
	if err != nil {
		return "", false
	}
	return r, isChunkPath(r)
}

// isChunkPath reports whether a path relative to a target is a chunk
// file's (or under the directories that hold them).
func isChunkPath(r string) bool {
	parts := strings.SplitN(r, string(filepath.Separator), 4)
	own := len(parts) >= 2 && parts[0] == "chunks"
	chain := len(parts) == 4 && parts[0] == "chains" && parts[2] == "chunks"
	return own || chain
}

func (t *Tier) fastPath(rel string) string { return filepath.Join(t.dir, rel) }

// serving reports whether the cache device still serves.
func (t *Tier) serving() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed == nil
}

// fail drops the cache device after err: every copy is forgotten and the
// tier serves from the disk from now on.
func (t *Tier) fail(err error) {
	t.mu.Lock()
	if t.failed != nil {
		t.mu.Unlock()
		return
	}
	t.failed = err
	entries := t.entries
	t.entries = map[string]*entry{}
	t.lru.Init()
	t.used = 0
	t.mu.Unlock()
	var dirty []string
	for rel, e := range entries {
		if e.isDirty() {
			dirty = append(dirty, rel)
		}
	}
	if len(dirty) > 0 {
		t.lose(dirty) // before anyone reads the disk's older bytes
	} else {
		t.cfg.Logf("flashcache: cache %s of target %s failed: %v; serving from the disk alone (it holds every acknowledged write)", t.dir, t.target, err)
	}
	for _, e := range entries {
		e.mu.Lock()
		t.closeCopy(e)
		e.complete = false
		e.mu.Unlock()
	}
}

// fastError handles an error of the cache device on rel's copy: a full
// device makes room or drops the copy; anything else, or any error on a
// dirty copy (its bytes are then unknown), drops the device.
func (t *Tier) fastError(e *entry, err error) {
	if errors.Is(err, syscall.ENOSPC) && !e.isDirty() {
		t.cfg.Logf("flashcache: cache %s is full: dropping %s and evicting", t.dir, e.rel)
		t.drop(e)
		t.evict(0)
		return
	}
	t.fail(err)
}

// lookup returns rel's entry, or nil.
func (t *Tier) lookup(rel string) *entry {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.entries[rel]
}

// touch marks e used now.
func (t *Tier) touch(e *entry) {
	t.mu.Lock()
	if e.elem != nil {
		t.lru.MoveToFront(e.elem)
	}
	t.mu.Unlock()
}

// drop removes e's copy (e.mu not held).
func (t *Tier) drop(e *entry) {
	e.mu.Lock()
	defer e.mu.Unlock()
	t.dropLocked(e)
}

func (t *Tier) dropLocked(e *entry) {
	t.mu.Lock()
	if t.entries[e.rel] == e {
		delete(t.entries, e.rel)
	}
	if e.elem != nil {
		t.lru.Remove(e.elem)
		e.elem = nil
		t.used -= e.size
	}
	t.mu.Unlock()
	t.closeCopy(e)
	e.complete = false
	t.fast.Remove(t.fastPath(e.rel))
	t.clean(e)
}

// clean forgets e's dirty state and marker: its chunk was removed, or cut
// on the disk too.
func (t *Tier) clean(e *entry) {
	e.dmu.Lock()
	defer e.dmu.Unlock()
	if !e.ds.dirty {
		return
	}
	t.dirtyBytes.Add(-e.ds.bytes)
	e.ds = dirtyState{cut: -1, queued: e.ds.queued}
	t.fast.Remove(t.markerPath(e.rel))
}

// evict removes the least recently used clean copies until the copies
// and more bytes fit in the cache's size, with a tenth of it to spare.
// Dirty copies are passed over (moved to the front): they are destaged
// first.
func (t *Tier) evict(more int64) {
	for passed := 0; ; {
		t.mu.Lock()
		limit := t.cfg.Size - t.cfg.Size/10
		if t.used+more <= limit || t.lru.Len() == 0 || passed >= t.lru.Len() {
			t.mu.Unlock()
			return
		}
		e := t.lru.Back().Value.(*entry)
		t.mu.Unlock()
		if e.isDirty() {
			t.touch(e)
			passed++
			continue
		}
		t.drop(e)
		t.evicted.Add(1)
	}
}

// Stats is what a tier reports.
type Stats struct {
	Mode     string `json:"mode"`
	Dir      string `json:"dir"`
	Size     int64  `json:"size"`
	Used     int64  `json:"used"`
	Files    int    `json:"files"`
	Hits     int64  `json:"hits"`
	Misses   int64  `json:"misses"`
	Promoted int64  `json:"promoted"`
	Evicted  int64  `json:"evicted"`
	// Dirty is the bytes written back and not yet on the disk;
	// DestageRate the bytes a second destaged of late.
	Dirty       int64 `json:"dirty"`
	Destaged    int64 `json:"destaged"`
	DestageRate int64 `json:"destage_rate"`
	// Failed says why the cache device was dropped ("" while it serves).
	Failed string `json:"failed,omitempty"`
}

// HitRatio is the share of chunk reads the flash answered.
func (s Stats) HitRatio() float64 {
	if s.Hits+s.Misses == 0 {
		return 0
	}
	return float64(s.Hits) / float64(s.Hits+s.Misses)
}

// Stats reports the tier's state.
func (t *Tier) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := Stats{Mode: t.cfg.Mode.String(), Dir: t.dir, Size: t.cfg.Size, Used: t.used, Files: t.lru.Len(),
		Hits: t.hits.Load(), Misses: t.misses.Load(), Promoted: t.promoted.Load(), Evicted: t.evicted.Load(),
		Dirty: t.dirtyBytes.Load(), Destaged: t.destaged.Load(), DestageRate: t.destageRate()}
	if t.failed == nil {
		return s // a device serving (a new one may be there while lost chunks resync)
	}
	s.Failed = t.failed.Error()
	switch n := t.lostCount.Load(); {
	case t.lost.Load():
		s.Failed += fmt.Sprintf("; it held %d chunks not yet on the disk: the target is failed over until its chains take it out, then rejoins them to copy those back", n)
	case t.recovering.Load():
		s.Failed += fmt.Sprintf("; it held %d chunks not yet on the disk: they were set aside and are being copied back from the chains' other members; the target writes through to its disk", n)
	case t.resynced.Load():
		s.Failed += fmt.Sprintf("; the %d chunks it held not yet on the disk were copied back from the chains' other members; the target writes through to its disk, which holds every acknowledged write", n)
	default:
		s.Failed += "; the target serves from its disk alone, which holds every acknowledged write"
	}
	return s
}

// Report is Stats as the storage server sends it with its heartbeats.
func (t *Tier) Report() proto.CacheReport {
	s := t.Stats()
	return proto.CacheReport{Path: t.target, Dir: s.Dir, Mode: s.Mode, Size: uint64(s.Size), Used: uint64(s.Used),
		Files: uint64(s.Files), Hits: uint64(s.Hits), Misses: uint64(s.Misses), Promoted: uint64(s.Promoted),
		Evicted: uint64(s.Evicted), Dirty: uint64(s.Dirty), Destaged: uint64(s.Destaged), DestageRate: uint64(s.DestageRate),
		Failed: s.Failed}
}
