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
	mu    sync.Mutex
	dirty map[*lazyFile]struct{}
	stop  chan struct{}
	done  chan struct{}
}

func newLazySyncFS(inner vfs.FS, interval time.Duration) *lazySyncFS {
	fs := &lazySyncFS{FS: inner, dirty: map[*lazyFile]struct{}{},
		stop: make(chan struct{}), done: make(chan struct{})}
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

// syncNow fsyncs every WAL file written since its last fsync.
func (fs *lazySyncFS) syncNow() error {
	fs.mu.Lock()
	files := make([]*lazyFile, 0, len(fs.dirty))
	for f := range fs.dirty {
		files = append(files, f)
	}
	clear(fs.dirty)
	fs.mu.Unlock()
	var first error
	for _, f := range files {
		if err := f.File.Sync(); err != nil && first == nil {
			first = err
		}
	}
	return first
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
	f.fs.mu.Unlock()
}

func (f *lazyFile) Sync() error     { f.markDirty(); return nil }
func (f *lazyFile) SyncData() error { f.markDirty(); return nil }

func (f *lazyFile) SyncTo(int64) (bool, error) {
	f.markDirty()
	return true, nil
}

// Close syncs for real: a closed WAL is one Pebble has moved past.
func (f *lazyFile) Close() error {
	f.fs.mu.Lock()
	delete(f.fs.dirty, f)
	f.fs.mu.Unlock()
	err := f.File.Sync()
	if cerr := f.File.Close(); err == nil {
		err = cerr
	}
	return err
}
