package meta

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// The Raft log's group sync: an application's fsync returns only after
// an fsync that started after it was asked for.

// walFile is a WAL file whose fsyncs are counted and can be held.
type walFile struct {
	vfs.File
	gate   chan struct{} // when not nil, each fsync waits for a value
	syncs  atomic.Int32
	err    error
	closed atomic.Bool
}

func (f *walFile) Sync() error {
	if f.gate != nil {
		<-f.gate
	}
	f.syncs.Add(1)
	return f.err
}

func (f *walFile) Close() error { f.closed.Store(true); return nil }

func lazyFS(t *testing.T) *lazySyncFS {
	fs := newLazySyncFS(vfs.Default, time.Hour)
	t.Cleanup(fs.close)
	return fs
}

func syncing(fs *lazySyncFS) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.syncing
}

// syncRunning starts a syncNow and returns, with the channel its result
// comes on, once its sync runs (held at the WAL's gate).
func syncRunning(fs *lazySyncFS) <-chan error {
	done := make(chan error, 1)
	go func() { done <- fs.syncNow() }()
	for !syncing(fs) {
		time.Sleep(time.Millisecond)
	}
	return done
}

// syncAsked starts a syncNow and returns the channel its result comes on.
func syncAsked(fs *lazySyncFS) <-chan error {
	done := make(chan error, 1)
	go func() { done <- fs.syncNow() }()
	return done
}

// stillWaiting fails the test if done delivers within 50 ms.
func stillWaiting(t *testing.T, done <-chan error, what string) {
	t.Helper()
	select {
	case <-done:
		t.Fatal(what)
	case <-time.After(50 * time.Millisecond):
	}
}

// allSucceed waits for each of dones, in order, and fails the test on an
// error.
func allSucceed(t *testing.T, dones ...<-chan error) {
	t.Helper()
	for _, done := range dones {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

func TestAnFsyncAskedForDuringAGroupSyncWaitsForTheNext(t *testing.T) {
	fs := lazyFS(t)
	wal := &walFile{gate: make(chan struct{})}
	f := &lazyFile{File: wal, fs: fs}
	f.Sync() // a commit's record: the file is dirty
	first := syncRunning(fs)
	// The running sync took the file before this caller came: it may
	// not have covered the caller's record.
	f.Sync()
	second := syncAsked(fs)
	stillWaiting(t, second, "an fsync asked for while a sync ran returned before it ended")
	wal.gate <- struct{}{} // the first sync ends; the second caller's starts
	allSucceed(t, first)
	wal.gate <- struct{}{}
	allSucceed(t, second)
	if n := wal.syncs.Load(); n != 2 {
		t.Fatalf("%d fsyncs, want 2", n)
	}
}

func TestAnFsyncWhoseRecordsARunningSyncTookSharesIt(t *testing.T) {
	fs := lazyFS(t)
	wal := &walFile{gate: make(chan struct{})}
	f := &lazyFile{File: wal, fs: fs}
	f.Sync() // both callers' records, written before the sync takes the file
	first := syncRunning(fs)
	second := syncAsked(fs)
	stillWaiting(t, second, "an fsync returned while the sync holding its record still ran")
	close(wal.gate)
	allSucceed(t, first, second)
	if n := wal.syncs.Load(); n != 1 {
		t.Fatalf("%d fsyncs, want the one both callers' records were in", n)
	}
}

func TestAnFsyncWithNothingWrittenSinceTheLastSyncSyncsNothing(t *testing.T) {
	fs := lazyFS(t)
	wal := &walFile{}
	f := &lazyFile{File: wal, fs: fs}
	f.Sync()
	for range 3 {
		if err := fs.syncNow(); err != nil {
			t.Fatal(err)
		}
	}
	if n := wal.syncs.Load(); n != 1 {
		t.Fatalf("%d fsyncs for one record, want 1", n)
	}
}

func TestCallersThatComeDuringOneSyncShareTheNext(t *testing.T) {
	fs := lazyFS(t)
	wal := &walFile{gate: make(chan struct{})}
	f := &lazyFile{File: wal, fs: fs}
	f.Sync()
	waiting := []<-chan error{syncRunning(fs)}
	f.Sync()
	for range 3 {
		waiting = append(waiting, syncAsked(fs))
	}
	time.Sleep(20 * time.Millisecond) // let them queue
	close(wal.gate)
	allSucceed(t, waiting...)
	if n := wal.syncs.Load(); n != 2 {
		t.Fatalf("%d fsyncs for one running sync and three callers behind it, want 2", n)
	}
}

func TestAFailedFsyncFailsEveryLaterOne(t *testing.T) {
	fs := lazyFS(t)
	wal := &walFile{err: errors.New("EIO")}
	f := &lazyFile{File: wal, fs: fs}
	f.Sync()
	if err := fs.syncNow(); err == nil {
		t.Fatal("a failed fsync reported success")
	}
	wal.err = nil
	f.Sync()
	if err := fs.syncNow(); err == nil {
		t.Fatal("an fsync after a failed one succeeded: the records the failed one covered may be lost")
	}
}

func TestClosingAWALSyncsEveryDirtyFile(t *testing.T) {
	fs := lazyFS(t)
	old, cur := &walFile{}, &walFile{}
	oldF, curF := &lazyFile{File: old, fs: fs}, &lazyFile{File: cur, fs: fs}
	oldF.Sync()
	curF.Sync()
	if err := oldF.Close(); err != nil {
		t.Fatal(err)
	}
	if !old.closed.Load() || old.syncs.Load() != 1 || cur.syncs.Load() != 1 {
		t.Fatalf("closing one WAL: it synced %d times (closed %v), the other %d; want both once",
			old.syncs.Load(), old.closed.Load(), cur.syncs.Load())
	}
}
