package storage

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// FS is the file system a target lives on. All disk access of the engine
// goes through it so that tests (and fault-injection tests of the whole
// cluster) can make a target fail like a real disk does; see FaultFS.
type FS interface {
	// OpenFile opens name like os.OpenFile.
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	// Mkdir creates one directory; it fails with an error satisfying
	// errors.Is(err, fs.ErrExist) when it exists.
	Mkdir(name string, perm os.FileMode) error
	MkdirAll(name string, perm os.FileMode) error
	Remove(name string) error
	Rename(oldname, newname string) error
	// ReadDirNames lists the names in a directory, in no particular order.
	ReadDirNames(name string) ([]string, error)
	// SyncDir makes the entries of a directory durable.
	SyncDir(name string) error
	// Statfs reports the size and the space available to unprivileged
	// users of the file system holding name, in bytes.
	Statfs(name string) (total, free uint64, err error)
	// Lock takes an exclusive advisory lock on name (creating it), failing
	// at once if another process holds it.
	Lock(name string) (io.Closer, error)
	// Stat reports a file's size and modification time.
	Stat(name string) (size int64, mtime time.Time, err error)
}

// File is an open file. ReadAt and WriteAt are pread/pwrite: they do not
// move a file offset, so one File serves concurrent callers.
type File interface {
	io.ReaderAt
	io.WriterAt
	io.Closer
	Truncate(size int64) error
	// Sync makes the file's data durable (fdatasync: the size is included
	// when it changed, the times are not).
	Sync() error
	Size() (int64, error)
}

// OSFS is the real operating-system file system.
type OSFS struct{}

type osFile struct {
	*os.File
	mu        sync.Mutex
	direct    *os.File // the O_DIRECT descriptor of WriteDirect, once opened
	directErr error
}

func (f *osFile) Close() error {
	f.mu.Lock()
	if f.direct != nil {
		f.direct.Close()
	}
	f.mu.Unlock()
	return f.File.Close()
}

func (f *osFile) Sync() error {
	fd := int(f.File.Fd())
	for {
		err := syscall.Fdatasync(fd)
		if err != syscall.EINTR {
			if err != nil {
				return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
			}
			return nil
		}
	}
}

func (f *osFile) Size() (int64, error) {
	fi, err := f.File.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

func (OSFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &osFile{File: f}, nil
}

func (OSFS) Mkdir(name string, perm os.FileMode) error    { return os.Mkdir(name, perm) }
func (OSFS) MkdirAll(name string, perm os.FileMode) error { return os.MkdirAll(name, perm) }
func (OSFS) Remove(name string) error                     { return os.Remove(name) }
func (OSFS) Rename(oldname, newname string) error         { return os.Rename(oldname, newname) }

func (OSFS) ReadDirNames(name string) ([]string, error) {
	d, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.Readdirnames(-1)
}

func (OSFS) SyncDir(name string) error {
	d, err := os.Open(name)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func (OSFS) Statfs(name string) (total, free uint64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(name, &st); err != nil {
		return 0, 0, &os.PathError{Op: "statfs", Path: name, Err: err}
	}
	bs := uint64(st.Bsize)
	return st.Blocks * bs, st.Bavail * bs, nil
}

func (OSFS) Stat(name string) (int64, time.Time, error) {
	fi, err := os.Stat(name)
	if err != nil {
		return 0, time.Time{}, err
	}
	return fi.Size(), fi.ModTime(), nil
}

func (OSFS) Lock(name string) (io.Closer, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s is locked by another process (is another storage server using this target?)", filepath.Dir(name))
		}
		return nil, &os.PathError{Op: "flock", Path: name, Err: err}
	}
	return f, nil // closing the file releases the lock
}

// ReadFile reads a whole small file (at most 1 MiB) through fs.
func ReadFile(fs FS, name string) ([]byte, error) {
	f, err := fs.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	n, err := f.Size()
	if err != nil {
		return nil, err
	}
	if n > 1<<20 {
		return nil, fmt.Errorf("%s: unexpectedly large (%d bytes)", name, n)
	}
	b := make([]byte, n)
	if _, err := f.ReadAt(b, 0); err != nil && err != io.EOF {
		return nil, err
	}
	return b, nil
}

// WriteFileAtomic replaces name with data so that after a crash the file
// holds either the old or the new contents, never a mix.
func WriteFileAtomic(fs FS, name string, data []byte) error {
	tmp := name + ".tmp"
	f, err := fs.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := fs.Rename(tmp, name); err != nil {
		return err
	}
	return fs.SyncDir(filepath.Dir(name))
}

// cacheDropper is a File whose clean cached pages can be dropped, so that
// the next read comes from the disk (a scrub checks the disk, not memory).
type cacheDropper interface{ DropCache() }

func (f *osFile) DropCache() {
	unix.Fadvise(int(f.File.Fd()), 0, 0, unix.FADV_DONTNEED)
}

// dropCache drops f's clean cached pages if its file system can.
func dropCache(f File) {
	if d, ok := f.(cacheDropper); ok {
		d.DropCache()
	}
}
