package meta

import (
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// lazySyncFS makes the Raft log's write-ahead log durable in groups.
//
// Pebble, asked for a synced commit, writes the record to the WAL file and
// then calls Sync. Here that Sync only marks the file dirty: the record is
// already in the operating system when the commit returns, so it survives
// the death of any process (kill -9 included), and a background loop
// fsyncs dirty WAL files every interval, bounding what a power failure of
// the metadata server can take. Callers that need more (an application's
// fsync) call syncNow. With three metadata replicas an acknowledged
// command is in the memory of a majority of machines, so no single
// failure loses it.
//
// This is the trade every local file system makes for metadata (ext4
// commits its journal every 5 s); `--sync always` turns it off.
type lazySyncFS struct {
	vfs.FS
	mu     sync.Mutex
	synced *sync.Cond // broadcast when a sync ends
	dirty  map[*lazyFile]struct{}
	// Syncs (syncNow's, or a closing file's) run one at a time, each of
	// every file marked dirty since the last one took its files.
	syncing bool
	marks   uint64 // times a WAL file was marked dirty
	covered uint64 // marks when the last sync to end took its files
	failed  error  // the first failed fsync: what it covered may be lost
	stop    chan struct{}
	done    chan struct{}
}

func newLazySyncFS(inner vfs.FS, interval time.Duration) *lazySyncFS {
	fs := &lazySyncFS{FS: inner, dirty: map[*lazyFile]struct{}{},
		stop: make(chan struct{}), done: make(chan struct{})}
	fs.synced = sync.NewCond(&fs.mu)
	go fs.loop(interval)
	return fs
}

func (fs *lazySyncFS) loop(interval time.Duration) {
	defer close(fs.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-fs.stop:
			fs.syncNow()
			return
		case <-t.C:
			fs.syncNow()
		}
	}
}

// close stops the background loop after a final sync.
func (fs *lazySyncFS) close() {
	close(fs.stop)
	<-fs.done
}

// syncNow returns once the WAL records of every commit that returned
// before it was called are on disk: after a sync that took its files
// when every mark made before the call had been made. Such a sync covers
// each record of those commits: the record's file was in what it took,
// or an earlier sync took it after the record's mark and ended first.
// So a caller that comes while a sync runs shares it if it covers the
// caller's marks, and otherwise waits and shares the next (group commit);
// before 2026-11-27 such a caller could return at once. Once an fsync
// failed, every later call fails: the records it covered may be lost,
// and no later fsync brings them back.
func (fs *lazySyncFS) syncNow() error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	need := fs.marks
	for fs.covered < need && fs.failed == nil {
		if fs.syncing {
			fs.synced.Wait()
			continue
		}
		fs.runSyncLocked(fs.takeDirtyLocked(), nil)
	}
	return fs.failed
}

// takeDirtyLocked returns the files written since their last sync, and
// forgets them.
func (fs *lazySyncFS) takeDirtyLocked() []*lazyFile {
	files := make([]*lazyFile, 0, len(fs.dirty))
	for f := range fs.dirty {
		files = append(files, f)
	}
	clear(fs.dirty)
	return files
}

// runSyncLocked runs the next sync, of files (all those marked dirty,
// just taken) and then closing (when not nil), without fs.mu held; no
// sync may be running.
func (fs *lazySyncFS) runSyncLocked(files []*lazyFile, closing *lazyFile) error {
	fs.syncing = true
	took := fs.marks
	fs.mu.Unlock()
	var first error
	for _, f := range files {
		if err := f.File.Sync(); err != nil && first == nil {
			first = err
		}
	}
	var closeErr error
	if closing != nil {
		closeErr = closing.File.Sync()
		if err := closing.File.Close(); closeErr == nil {
			closeErr = err
		}
	}
	fs.mu.Lock()
	fs.syncing = false
	fs.covered = took
	if first == nil {
		first = closeErr
	}
	if first != nil && fs.failed == nil {
		fs.failed = first
	}
	fs.synced.Broadcast()
	return closeErr
}

func isWAL(name string) bool { return strings.HasSuffix(name, ".log") }

func (fs *lazySyncFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !isWAL(name) {
		return f, err
	}
	return &lazyFile{File: f, fs: fs}, nil
}

func (fs *lazySyncFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	return fs.wrap(name, f, err)
}

func (fs *lazySyncFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, o ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, c, o...)
	return fs.wrap(name, f, err)
}

func (fs *lazySyncFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, c)
	return fs.wrap(newname, f, err)
}

// lazyFile is a WAL file whose syncs are deferred to its lazySyncFS.
type lazyFile struct {
	vfs.File
	fs *lazySyncFS
}

func (f *lazyFile) markDirty() {
	f.fs.mu.Lock()
	f.fs.dirty[f] = struct{}{}
	f.fs.marks++
	f.fs.mu.Unlock()
}

func (f *lazyFile) Sync() error     { f.markDirty(); return nil }
func (f *lazyFile) SyncData() error { f.markDirty(); return nil }

func (f *lazyFile) SyncTo(int64) (bool, error) {
	f.markDirty()
	return true, nil
}

// Close syncs for real, as one of the syncs: a closed WAL is one Pebble
// has moved past, and a sync running meanwhile must not find it closed,
// nor a caller of syncNow return before its records in it are on disk.
func (f *lazyFile) Close() error {
	fs := f.fs
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for fs.syncing {
		fs.synced.Wait()
	}
	delete(fs.dirty, f)
	return fs.runSyncLocked(fs.takeDirtyLocked(), f)
}
