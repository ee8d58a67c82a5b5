package flashcache

import (
	"container/list"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"tandemfs/internal/storage"
)

// Write-back (Fluid Cache's WB mode): a write to a chunk of a replicated
// chain whose members all serve lands on the flash copy only, and Sync
// makes the copy durable; the chain acknowledges once every member did
// that, so an acknowledged write sits on the flash of two servers (or
// more). A destager then copies the dirty byte ranges to the disk in the
// background, oldest dirty chunk first.
//
// What keeps it safe:
//   - A chunk becomes dirty through a marker file under the cache's dirty/
//     directory, made durable before the write that dirtied it can be
//     acknowledged, and removed only once the disk holds the chunk's bytes
//     (fsynced). After kill -9 or a power cut the copies with markers are
//     taken back (whole chunks dirty) and destaged; the others are dropped.
//   - Writes hold the entry's lock shared while they add their range and
//     write the copy; the destager takes the ranges under the lock held
//     exclusively, so a write it did not take is in the next ranges and
//     destaged again: a later overwrite is never left behind an earlier one.
//   - Eviction skips dirty copies; past half of the cache dirty, writes go
//     through to the disk (dm-writecache's high watermark).
//   - A destage the disk fails makes writes go through until one succeeds:
//     the engine then meets the disk's errors itself and reports the
//     target failed (its chains serve from the other members), as without
//     a cache.
//   - Chains of one target (erasure-coded shards), chains with one serving
//     member and chunks with no copy on the flash write through.
//   - The cache device failing with dirty copies leaves the disk stale in
//     them: the tier lists them in the target's tandem-cache-stale file and
//     fails every later call on chunks with EIO, so the server reports the
//     target failed and its chains serve from the other members. Once the
//     chains took it out, the server has the tier move the listed chunks
//     aside (cache-lost/, RecoverLost) and brings the target back: the
//     tier serves from the disk (write-through), and the chains' resync
//     copies the chunks back from the other members (storage/lostchunks.go).
//     A start before that completed sets them aside again.
//   - A target written back carries tandem-writeback (naming the cache) on
//     its disk until a start in another mode has destaged everything: a
//     server started without that cache refuses to serve the stale disk.
//   - A clean stop keeps the dirty copies and their markers; the next start
//     destages them (before serving, in write-through or off mode).

// WriteBack: writes are durable on the flash of every serving chain
// member before they are acknowledged, and destaged to the disk later.
const WriteBack Mode = WriteThrough + 1

const (
	dirtyDir      = "dirty"
	staleListName = "tandem-cache-stale"
	wbFlagName    = "tandem-writeback"
	lostDir       = "cache-lost"
	// maxRanges bounds the dirty ranges kept per chunk; past it the chunk
	// is destaged whole.
	maxRanges = 64
	// destagePiece is how much the destager copies at a time.
	destagePiece = 1 << 20
)

// ErrCacheLost is what every call on a chunk of a target answers once its
// cache device failed holding writes the disk does not have (with EIO, so
// that the server reports the target failed).
var ErrCacheLost = fmt.Errorf("the flash cache holding this target's newest writes failed, so the target is out of service until its chains take it out and it is resynced: %w", syscall.EIO)

func lostError(op, rel string) error { return &os.PathError{Op: op, Path: rel, Err: ErrCacheLost} }

// dirtyState is an entry's part in write-back (guarded by entry.dmu).
type dirtyState struct {
	dirty  bool       // a marker exists
	whole  bool       // destage the whole copy (ranges unknown)
	ranges [][2]int64 // byte ranges written since the last destage took them
	cut    int64      // smallest size a truncate set since then; -1: none
	queued bool       // in the destage queue
	bytes  int64      // what these ranges count in Tier.dirtyBytes
}

// markerName is rel's marker file name: one level, / (and %) escaped.
func markerName(rel string) string { return url.PathEscape(rel) }

func (t *Tier) markerPath(rel string) string {
	return filepath.Join(t.dir, dirtyDir, markerName(rel))
}

// SetWriteBackRule gives the tier the server's view of its chains: ok
// reports whether a write to chain may be written back (every member
// serves, and there are two or more). Until it is set, everything writes
// through.
func (t *Tier) SetWriteBackRule(ok func(chain uint32) bool) {
	t.wbRule.Store(&ok)
}

// writesBack reports whether a write to rel may be written back now.
func (t *Tier) writesBack(rel string) bool {
	if t.cfg.Mode != WriteBack || t.lost.Load() || t.diskFailing.Load() || !t.serving() {
		return false
	}
	if t.dirtyBytes.Load() >= t.cfg.Size/2 {
		return false // past the high watermark: the destager catches up
	}
	rule := t.wbRule.Load()
	if rule == nil {
		return false
	}
	chain, ok := storage.ChainOfPath(rel)
	if !ok {
		return false // a chain of one target: no second copy anywhere
	}
	return (*rule)(chain)
}

// dirtyRange records [off, end) of e as dirty (e.mu held shared or
// exclusively), creating e's marker first if e was clean. The marker and
// the copy's directory entry are durable before it returns.
func (t *Tier) dirtyRange(e *entry, off, end int64) error {
	e.dmu.Lock()
	defer e.dmu.Unlock()
	if err := t.markDirty(e); err != nil {
		return err
	}
	if !e.ds.whole {
		before := rangeBytes(e.ds.ranges)
		e.ds.ranges = addRange(e.ds.ranges, off, end)
		if len(e.ds.ranges) > maxRanges {
			e.ds.whole, e.ds.ranges = true, nil
		}
		grow := rangeBytes(e.ds.ranges) - before
		if e.ds.whole {
			grow = max(end, e.size) - e.ds.bytes
		}
		e.ds.bytes += grow
		t.dirtyBytes.Add(grow)
	}
	t.enqueue(e)
	return nil
}

// markDirty makes e dirty, its marker first (e.dmu held).
func (t *Tier) markDirty(e *entry) error {
	if e.ds.dirty {
		return nil
	}
	if err := t.writeMarker(e.rel); err != nil {
		return err
	}
	e.ds.dirty, e.ds.cut = true, -1
	return nil
}

// dirtyCut records a truncate of e to size.
func (t *Tier) dirtyCut(e *entry, size int64) error {
	e.dmu.Lock()
	defer e.dmu.Unlock()
	if err := t.markDirty(e); err != nil {
		return err
	}
	if e.ds.cut < 0 || size < e.ds.cut {
		e.ds.cut = size
	}
	t.enqueue(e)
	return nil
}

// writeMarker creates rel's marker and makes it, and the copy's name,
// durable.
func (t *Tier) writeMarker(rel string) error {
	p := t.markerPath(rel)
	f, err := t.fast.OpenFile(p, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	f.Close()
	if err := t.fast.SyncDir(filepath.Dir(p)); err != nil {
		return err
	}
	return t.fast.SyncDir(filepath.Dir(t.fastPath(rel)))
}

func (e *entry) isDirty() bool {
	e.dmu.Lock()
	defer e.dmu.Unlock()
	return e.ds.dirty
}

// enqueue queues e for the destager if it is not queued (e.dmu held).
func (t *Tier) enqueue(e *entry) {
	if e.ds.queued {
		return
	}
	e.ds.queued = true
	t.dq.Lock()
	t.dirtyQ.PushBack(e)
	t.dq.Unlock()
	t.dqCond.Signal()
}

func rangeBytes(rs [][2]int64) int64 {
	var n int64
	for _, r := range rs {
		n += r[1] - r[0]
	}
	return n
}

// addRange adds [a, b) to sorted disjoint ranges, merging those it
// touches.
func addRange(rs [][2]int64, a, b int64) [][2]int64 {
	out := make([][2]int64, 0, len(rs)+1)
	placed := false
	for _, r := range rs {
		switch {
		case r[1] < a:
			out = append(out, r)
		case r[0] > b:
			if !placed {
				out = append(out, [2]int64{a, b})
				placed = true
			}
			out = append(out, r)
		default:
			a, b = min(a, r[0]), max(b, r[1])
		}
	}
	if !placed {
		out = append(out, [2]int64{a, b})
	}
	return out
}

// destager destages queued dirty copies, oldest first, until the tier
// closes.
func (t *Tier) destager() {
	defer t.wg.Done()
	for {
		t.dq.Lock()
		for t.dirtyQ.Len() == 0 && !t.stopping {
			t.dqCond.Wait()
		}
		if t.stopping {
			t.dq.Unlock()
			return
		}
		e := t.dirtyQ.Remove(t.dirtyQ.Front()).(*entry)
		t.dq.Unlock()
		if h := t.hold.Load(); h != nil {
			select {
			case <-*h:
			case <-t.stop:
				return // e stays dirty, its marker with it
			}
		}
		if err := t.destage(e); err != nil && !errors.Is(err, errGone) {
			t.destageFailed(e, err)
		} else if err == nil {
			t.diskFailing.Store(false)
		}
	}
}

// errGone: the chunk was removed (or its copy dropped) while dirty; there
// is nothing left to destage.
var errGone = errors.New("removed")

// destage copies what e's copy holds beyond the disk's bytes to the disk,
// makes it durable, and cleans e unless writes came meanwhile (then e is
// queued again).
func (t *Tier) destage(e *entry) error {
	// One destage of e at a time, and none while its chunk is removed or
	// cut on the disk.
	e.destaging.Lock()
	defer e.destaging.Unlock()
	e.mu.Lock() // no write is between adding its range and writing the copy
	e.dmu.Lock()
	take := e.ds
	e.ds.ranges, e.ds.whole, e.ds.cut, e.ds.bytes, e.ds.queued = nil, false, -1, 0, false
	e.dmu.Unlock()
	complete := e.complete
	var size int64
	var serr error
	if complete {
		serr = t.withCopy(e, func(cf storage.File) error { var err error; size, err = cf.Size(); return err })
	}
	e.mu.Unlock()
	if !take.dirty || !complete || !t.current(e) {
		t.dirtyBytes.Add(-take.bytes)
		return errGone
	}
	if serr != nil {
		t.undo(e, take)
		return serr
	}
	if take.whole {
		take.ranges = [][2]int64{{0, size}}
		take.cut = 0
	}
	err := t.copyRanges(e, take, size)
	if err != nil {
		t.undo(e, take)
		return err
	}
	t.dirtyBytes.Add(-take.bytes)
	t.destaged.Add(rangeBytes(take.ranges))
	e.dmu.Lock()
	defer e.dmu.Unlock()
	if e.ds.ranges != nil || e.ds.whole || e.ds.cut >= 0 || !t.current(e) {
		return nil // written meanwhile: queued again by that write, or gone
	}
	e.ds.dirty = false
	if err := t.fast.Remove(t.markerPath(e.rel)); err != nil && !errors.Is(err, os.ErrNotExist) {
		e.ds.dirty = true // the marker stays: a restart destages again, harmlessly
	}
	return nil
}

// flush destages e now if it is dirty.
func (t *Tier) flush(e *entry) error {
	for i := 0; e.isDirty(); i++ {
		if i == 10 {
			return fmt.Errorf("destaging %s: written again and again meanwhile", e.rel)
		}
		if err := t.destage(e); errors.Is(err, errGone) {
			return nil
		} else if err != nil {
			return err
		}
	}
	return nil
}

// undo puts a destage's ranges back after it failed.
func (t *Tier) undo(e *entry, take dirtyState) {
	e.dmu.Lock()
	defer e.dmu.Unlock()
	if take.whole {
		e.ds.whole, e.ds.ranges = true, nil
	}
	for _, r := range take.ranges {
		if !e.ds.whole {
			e.ds.ranges = addRange(e.ds.ranges, r[0], r[1])
		}
	}
	if take.cut >= 0 && (e.ds.cut < 0 || take.cut < e.ds.cut) {
		e.ds.cut = take.cut
	}
	e.ds.bytes += take.bytes // still counted in Tier.dirtyBytes
}

// current reports whether e is still rel's entry.
func (t *Tier) current(e *entry) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.entries[e.rel] == e
}

// copyRanges writes take's ranges of e's copy to the disk's file (cut
// first to take.cut, then to size) and syncs it.
func (t *Tier) copyRanges(e *entry, take dirtyState, size int64) error {
	dst, err := t.slow.OpenFile(filepath.Join(t.target, e.rel), os.O_WRONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return errGone
	}
	if err != nil {
		return diskError{err}
	}
	defer dst.Close()
	if take.cut >= 0 {
		if err := dst.Truncate(min(take.cut, size)); err != nil {
			return diskError{err}
		}
	}
	buf := make([]byte, destagePiece)
	for _, r := range take.ranges {
		for off := r[0]; off < min(r[1], size); {
			n := min(int64(len(buf)), min(r[1], size)-off)
			got, err := t.readCopyAt(e, buf[:n], off)
			if err != nil {
				return err
			}
			if got == 0 {
				break
			}
			if _, err := dst.WriteAt(buf[:got], off); err != nil {
				return diskError{err}
			}
			off += int64(got)
		}
	}
	if err := dst.Truncate(size); err != nil {
		return diskError{err}
	}
	if err := dst.Sync(); err != nil {
		return diskError{err}
	}
	return nil
}

// readCopyAt reads e's copy under its lock, shared (a read past the copy's
// end, cut meanwhile, reads less).
func (t *Tier) readCopyAt(e *entry, b []byte, off int64) (int, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if !e.complete {
		return 0, errGone
	}
	var n int
	err := t.withCopy(e, func(cf storage.File) error {
		var err error
		n, err = cf.ReadAt(b, off)
		if err == io.EOF {
			err = nil
		}
		return err
	})
	return n, err
}

// destageFailed handles a destage that failed: the disk failing is the
// engine's to find (its own calls fail too), so the chunk waits a second
// and is tried again; the cache device failing is fail's.
func (t *Tier) destageFailed(e *entry, err error) {
	if isDiskError(err) {
		if !t.diskFailing.Swap(true) {
			t.cfg.Logf("flashcache: destaging %s to %s: %v; writing through until a destage succeeds, trying again", e.rel, t.target, err)
		}
		select {
		case <-t.stop:
		case <-time.After(time.Second):
		}
		e.dmu.Lock()
		t.enqueue(e)
		e.dmu.Unlock()
		return
	}
	t.fail(err)
}

// lose handles the cache device failing while copies were dirty: their
// names go to the target's lost list on the disk, and every later call on
// chunks fails (ErrCacheLost), so that the server reports the target
// failed; once its chains took it out, the server has the tier set the
// chunks aside (RecoverLost) and brings the target back for the chains to
// resync. Called by fail with the dirty entries.
func (t *Tier) lose(dirty []string) {
	t.lostMu.Lock() // RecoverLost waits for the list
	defer t.lostMu.Unlock()
	t.lost.Store(true)
	t.lostCount.Store(int64(len(dirty)))
	list := strings.Join(dirty, "\n") + "\n"
	if old, err := storage.ReadFile(t.slow, filepath.Join(t.target, staleListName)); err == nil {
		list = string(old) + list
	}
	if err := storage.WriteFileAtomic(t.slow, filepath.Join(t.target, staleListName), []byte(list)); err != nil {
		t.lostListErr = err
		t.cfg.Logf("flashcache: target %s: recording its %d stale chunks: %v (it stays failed; replace it: tandem target replace)", t.target, len(dirty), err)
		return
	}
	t.cfg.Logf("flashcache: cache %s failed holding %d chunks of target %s not yet on its disk: the target fails over, sets them aside and rejoins its chains, which copy them back",
		t.dir, len(dirty), t.target)
}

// readLostList reads the target's lost list: the chunks a failed cache
// held dirty, set aside (or to be) until the chains resynced them. exists
// is false when there is none; an empty list that exists says that the
// cache device at the tier's path was given up (its copies are not to be
// taken back), though every chunk was resynced.
func (t *Tier) readLostList() (rels []string, exists bool, err error) {
	b, err := storage.ReadFile(t.slow, filepath.Join(t.target, staleListName))
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	for _, rel := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if rel != "" && isChunkPath(rel) && !strings.Contains(rel, "..") {
			rels = append(rels, rel)
		}
	}
	return rels, true, nil
}

// moveAside moves the chunk files rels out of the target, to cache-lost/
// (a file already gone is no error), and returns how many it moved.
func (t *Tier) moveAside(rels []string) (int, error) {
	moved := 0
	for _, rel := range rels {
		dst := filepath.Join(t.target, lostDir, rel)
		if err := t.slow.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return moved, err
		}
		err := t.slow.Rename(filepath.Join(t.target, rel), dst)
		if err == nil {
			moved++
		} else if !errors.Is(err, os.ErrNotExist) {
			return moved, err
		}
	}
	return moved, t.slow.SyncDir(t.target)
}

// setAsideStale moves the chunks of the lost list out of the target again
// at a start before their resync completed (a change forwarded meanwhile
// may have recreated part of one), so that the resync copies them whole;
// it reports whether there is a list (the cache's copies are then given
// up). It runs before the engine opens the target.
func (t *Tier) setAsideStale() (bool, error) {
	rels, exists, err := t.readLostList()
	if err != nil || !exists {
		return false, err
	}
	moved, err := t.moveAside(rels)
	if err != nil {
		return true, err
	}
	if len(rels) > 0 {
		t.lostCount.Store(int64(len(rels)))
		t.recovering.Store(true)
		t.cfg.Logf("flashcache: target %s: %d chunks its failed cache held newer than the disk are set aside (%d moved to %s now) until its chains' resync copies them back",
			t.target, len(rels), moved, filepath.Join(t.target, lostDir))
	}
	return true, nil
}

// RecoverLost sets the chunks a failed cache held dirty aside, once the
// engine dropped its handles of them, and lets calls through to the disk
// again: the target can rejoin its chains, whose resync copies the chunks
// back (storage.RecoverableFS). ok is false unless the cache was lost.
func (t *Tier) RecoverLost() (lost []string, ok bool, err error) {
	t.lostMu.Lock()
	defer t.lostMu.Unlock()
	if !t.lost.Load() {
		return nil, false, nil
	}
	if t.lostListErr != nil {
		return nil, false, fmt.Errorf("the list of the chunks its cache held dirty was not recorded: %w", t.lostListErr)
	}
	rels, _, err := t.readLostList()
	if err != nil {
		return nil, false, err
	}
	moved, err := t.moveAside(rels)
	if err != nil {
		return nil, false, err
	}
	t.recovering.Store(true)
	t.lost.Store(false)
	t.cfg.Logf("flashcache: target %s: the %d chunks its failed cache held newer than the disk were moved to %s; it serves from its disk (write-through) while its chains copy them back",
		t.target, moved, filepath.Join(t.target, lostDir))
	return rels, true, nil
}

// LostChunks returns the chunks set aside and not yet resynced.
func (t *Tier) LostChunks() ([]string, error) {
	rels, _, err := t.readLostList()
	return rels, err
}

// ResyncedLost records that the chains copied the lost chunks back: the
// list is emptied (it stays, empty, so that the failed device's copies
// are never taken back) and the chunks set aside are removed; unless a
// cache device writes back now (a new one, since a start), the target no
// longer needs its cache to start.
func (t *Tier) ResyncedLost() error {
	rels, exists, err := t.readLostList()
	if err != nil || !exists {
		return err
	}
	if err := storage.WriteFileAtomic(t.slow, filepath.Join(t.target, staleListName), nil); err != nil {
		return err
	}
	for _, rel := range rels {
		if err := t.slow.Remove(filepath.Join(t.target, lostDir, rel)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if writingBack := t.cfg.Mode == WriteBack && t.serving(); !writingBack && !t.lost.Load() {
		if err := t.slow.Remove(filepath.Join(t.target, wbFlagName)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	t.recovering.Store(false)
	t.resynced.Store(true)
	return t.slow.SyncDir(t.target)
}

// forgetLostList removes an empty lost list (stale: setAsideStale found
// a list; recovering: it named chunks) once a start emptied the cache it
// was about.
func (t *Tier) forgetLostList(stale bool) error {
	if !stale || t.recovering.Load() {
		return nil
	}
	return t.slow.Remove(filepath.Join(t.target, staleListName))
}

// checkWriteBackFlag refuses a cache other than the one a target wrote
// back to, or that one empty unless the chunks it held dirty were set
// aside (stale: a new device after a failed one), and records write-back
// on the disk when it begins.
func (t *Tier) checkWriteBackFlag(stale bool) error {
	flag := filepath.Join(t.target, wbFlagName)
	b, err := storage.ReadFile(t.slow, flag)
	switch {
	case err == nil && strings.TrimSpace(string(b)) != t.dir:
		return fmt.Errorf("target %s was written back to the cache %s, not %s: start it with that cache so that what it holds is destaged first", t.target, strings.TrimSpace(string(b)), t.dir)
	case err == nil && !stale && !t.hasManifest():
		return fmt.Errorf("target %s was written back to the cache %s, which holds no cache now (a new device?): the target's disk may miss acknowledged writes. "+
			"Replace the target (tandem target replace --id N onto an empty directory): its chains copy every chunk to it from the other members", t.target, t.dir)
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return err
	case err != nil && t.cfg.Mode == WriteBack:
		return storage.WriteFileAtomic(t.slow, flag, []byte(t.dir+"\n"))
	}
	return nil
}

func (t *Tier) hasManifest() bool {
	_, _, err := t.fast.Stat(filepath.Join(t.dir, manifestName))
	return err == nil
}

// CheckUncached refuses a target started without a cache while its disk
// may miss writes acknowledged from one (tandem-writeback).
func CheckUncached(target string, fs storage.FS) error {
	if fs == nil {
		fs = storage.OSFS{}
	}
	b, err := storage.ReadFile(fs, filepath.Join(target, wbFlagName))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("target %s was written back to the flash cache %s, whose newest writes may not be on the disk: start it with --cache %s (any --cache-mode; write-through and off destage first)",
		target, strings.TrimSpace(string(b)), strings.TrimSpace(string(b)))
}

// loadDirty takes back the dirty copies of a cache that was not closed
// cleanly: every copy with a marker, whole; the others are removed.
func (t *Tier) loadDirty() error {
	names, err := t.fast.ReadDirNames(filepath.Join(t.dir, dirtyDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, name := range names {
		rel, err := url.PathUnescape(name)
		if err != nil || !isChunkPath(rel) {
			t.fast.Remove(filepath.Join(t.dir, dirtyDir, name))
			continue
		}
		size, _, err := t.fast.Stat(t.fastPath(rel))
		if errors.Is(err, os.ErrNotExist) {
			t.fast.Remove(filepath.Join(t.dir, dirtyDir, name)) // created, never written
			continue
		}
		if err != nil {
			return err
		}
		t.takeDirty(rel, size)
	}
	return nil
}

// takeDirty indexes rel's copy, of size bytes, as dirty whole.
func (t *Tier) takeDirty(rel string, size int64) {
	e := t.entries[rel]
	if e == nil {
		e = &entry{rel: rel, complete: true, size: size}
		t.entries[rel] = e
		e.elem = t.lru.PushBack(e)
		t.used += size
	}
	e.ds = dirtyState{dirty: true, whole: true, cut: -1, bytes: size}
	t.dirtyBytes.Add(size)
	e.ds.queued = true
	t.dirtyQ.PushBack(e)
}

// removeUnmarked removes the copies of an uncleanly closed cache that
// are not dirty (they may be older than the disk).
func (t *Tier) removeUnmarked() error {
	for _, d := range []string{"chunks", "chains"} {
		err := filepath.WalkDir(filepath.Join(t.dir, d), func(path string, de os.DirEntry, err error) error {
			if err != nil || de.IsDir() {
				if errors.Is(err, os.ErrNotExist) {
					return nil
				}
				return err
			}
			rel, _ := filepath.Rel(t.dir, path)
			if t.entries[rel] == nil {
				return t.fast.Remove(path)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// destageAll destages every dirty copy now, logging progress (percent,
// rate, time left): a start in write-through or off mode does this
// before it serves.
func (t *Tier) destageAll() error {
	total := t.dirtyBytes.Load()
	if total == 0 {
		return nil
	}
	t.cfg.Logf("flashcache: destaging %s of %s's dirty copies in %s before serving %s", sizeText(total), t.target, t.dir, t.cfg.Mode)
	start, last := time.Now(), time.Now()
	for {
		t.dq.Lock()
		if t.dirtyQ.Len() == 0 {
			t.dq.Unlock()
			break
		}
		e := t.dirtyQ.Remove(t.dirtyQ.Front()).(*entry)
		t.dq.Unlock()
		if err := t.destage(e); err != nil && !errors.Is(err, errGone) {
			return fmt.Errorf("destaging %s: %w", e.rel, err)
		}
		if time.Since(last) > 2*time.Second {
			last = time.Now()
			done := total - t.dirtyBytes.Load()
			rate := float64(done) / time.Since(start).Seconds()
			left := time.Duration(float64(total-done) / max(rate, 1) * float64(time.Second))
			t.cfg.Logf("flashcache: destaging %s: %.0f %%, %s/s, %v left", t.target, 100*float64(done)/float64(total), sizeText(int64(rate)), left.Round(time.Second))
		}
	}
	t.cfg.Logf("flashcache: destaged %s of %s in %v", sizeText(total), t.target, time.Since(start).Round(time.Millisecond))
	return nil
}

func sizeText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d KiB", (n+1023)>>10)
}

// destageRate is the bytes a second destaged over the last ten seconds
// or so.
func (t *Tier) destageRate() int64 {
	t.rateMu.Lock()
	defer t.rateMu.Unlock()
	now, done := time.Now(), t.destaged.Load()
	if t.rateAt.IsZero() {
		t.rateAt, t.rateBase = now, done
		return 0
	}
	el := now.Sub(t.rateAt)
	if el <= 0 {
		return t.lastRate
	}
	rate := int64(float64(done-t.rateBase) / el.Seconds())
	if el > 10*time.Second {
		t.rateAt, t.rateBase, t.lastRate = now, done, rate
	}
	return rate
}

// wbState is the Tier's write-back part.
type wbState struct {
	wbRule atomic.Pointer[func(chain uint32) bool]
	lost   atomic.Bool
	// lostCount is how many chunks the failed cache held dirty;
	// recovering: they are set aside until the chains resync them;
	// resynced: they were.
	lostCount            atomic.Int64
	recovering, resynced atomic.Bool
	// lostMu is held by lose while it records the lost list, and by
	// RecoverLost; lostListErr: recording it failed.
	lostMu      sync.Mutex
	lostListErr error
	dirtyBytes  atomic.Int64
	destaged    atomic.Int64

	// hold, set by a test, holds the destager back until it is closed.
	hold atomic.Pointer[chan struct{}]
	// diskFailing: the last destage failed on the disk; writes go
	// through until one succeeds, so that the engine meets the disk's
	// errors and reports the target failed.
	diskFailing atomic.Bool

	dq       sync.Mutex
	dqCond   *sync.Cond
	dirtyQ   list.List // of *entry, oldest dirty first
	stopping bool

	rateMu   sync.Mutex
	rateAt   time.Time
	rateBase int64
	lastRate int64
}
