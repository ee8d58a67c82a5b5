package meta

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
)

// walPrefillFS writes each new WAL file of the Raft log full of zeros
// before Pebble appends to it.
//
// An fsync of a file that grew must write the file's inode as well as the
// new data, one more write the disk does before the fsync returns. Every
// application fsync of a small (inline) file and every commit under
// `--sync-every 0` waits for an fsync of the Raft log, so that write is in
// their latency: on the development VM (ext4), a 150-byte append plus
// fdatasync took 215-240 µs on a growing file and 144-164 µs on a file
// already written that far (2026-11-27). Pebble itself recycles a WAL file
// once its memtable is flushed, overwriting a file already full; only the
// files it creates new (the first after each start, and whenever none is
// left to recycle) grow.
//
// Recovery reads the zeros after the last record as the end of the log,
// as it reads the old records of a recycled file (Pebble's replay treats a
// zeroed chunk at the tail of the newest WAL as its end; older WALs end
// with an EOF trailer written when Pebble closes them).
type walPrefillFS struct {
	vfs.FS
	logf func(string, ...any)

	mu   sync.Mutex
	next int64 // bytes to write ahead in the next new WAL file
}

// A WAL file holds about one memtable's worth of records before Pebble
// moves to the next, and Pebble's memtables start at 256 KiB and double
// up to MemTableSize (4 MiB by default, as the log store has it). Each
// new file is written ahead twice the memtable it will hold, so that the
// writing, which the commit that moves Pebble to the new file waits for,
// is no longer than needed: 8 MiB at every early move cost that commit
// about 5 ms (a perf trace of the metadata service, 2026-11-27).
const (
	walPrefillFirst = 512 << 10
	walPrefillMax   = 8 << 20
)

func newWALPrefillFS(inner vfs.FS, logf func(string, ...any)) *walPrefillFS {
	return &walPrefillFS{FS: inner, logf: logf, next: walPrefillFirst}
}

// take returns how much to write ahead in the next new WAL file.
func (fs *walPrefillFS) take() int64 {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n := fs.next
	fs.next = min(2*n, walPrefillMax)
	return n
}

func (fs *walPrefillFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	if err != nil || !isWAL(name) {
		return f, err
	}
	if err := prefill(f, fs.take()); err != nil {
		// Not fatal: the file grows as Pebble writes it, as before.
		// A disk too full for the zeros says so to Pebble's own writes.
		fs.logf("raft log: %s not written ahead (%v); its fsyncs will also write its size", name, err)
	}
	return f, nil
}

// prefill writes size bytes of zeros at the start of the empty file f
// (without moving its offset, where Pebble's appends begin) and syncs
// them. On failure it cuts f back to empty.
func prefill(f vfs.File, size int64) error {
	zeros := make([]byte, min(size, 1<<20))
	var err error
	for off := int64(0); off < size && err == nil; off += int64(len(zeros)) {
		_, err = f.WriteAt(zeros[:min(int64(len(zeros)), size-off)], off)
	}
	if err == nil {
		err = f.SyncData()
	}
	if err == nil {
		return nil
	}
	fd := f.Fd()
	if fd == vfs.InvalidFd {
		return fmt.Errorf("writing zeros: %w (and the file cannot be cut back)", err)
	}
	return errors.Join(fmt.Errorf("writing zeros: %w", err), unix.Ftruncate(int(fd), 0))
}
