package storage

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Op is a kind of file system call, as matched by a Fault.
type Op uint32

// Operations a Fault can target. They combine as a mask.
const (
	OpOpen Op = 1 << iota
	OpRead
	OpWrite
	OpSync
	OpTruncate
	OpSize
	OpMkdir
	OpRemove
	OpRename
	OpReadDir
	OpSyncDir
	OpStatfs
	OpLock
	OpAll Op = 1<<iota - 1
)

// Fault describes calls to fail or observe. A call matches when its
// operation is in Ops and its path contains Path ("" matches every path) and,
// if Match is set, Match accepts the path.
type Fault struct {
	Ops   Op
	Path  string
	Match func(path string) bool
	// Err is returned by matching calls, e.g. syscall.EIO or
	// syscall.ENOSPC. With a nil Err matching calls proceed (after Hook).
	Err error
	// Hook, if set, runs before each matching call (outside any lock of
	// the FaultFS): a test can take a crash image of a target there.
	Hook func(op Op, path string)
	// Skip lets this many matching calls through untouched first.
	Skip int
	// Times is how many matching calls after Skip the fault applies to;
	// 0 means all.
	Times int
	// Partial makes a failing write write part of its bytes first, the way
	// a disk that fills up mid-write does: up to the last 4 KiB page
	// boundary in the first half of the range (file systems allocate, and
	// so fail, page by page).
	Partial bool
}

// FaultFS wraps an FS and makes selected calls fail. It is the fault
// injector for tests of the engine and of whole clusters: a target opened on
// a FaultFS behaves like one on a failing disk.
type FaultFS struct {
	FS FS

	mu     sync.Mutex
	faults []*activeFault
}

type activeFault struct {
	Fault
	seen, failed int
}

// NewFaultFS returns a FaultFS over fs (OSFS when nil) with no faults.
func NewFaultFS(fs FS) *FaultFS {
	if fs == nil {
		fs = OSFS{}
	}
	return &FaultFS{FS: fs}
}

// Inject adds a fault and returns a function that removes it.
func (f *FaultFS) Inject(fault Fault) (remove func()) {
	af := &activeFault{Fault: fault}
	f.mu.Lock()
	f.faults = append(f.faults, af)
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		for i, x := range f.faults {
			if x == af {
				f.faults = append(f.faults[:i], f.faults[i+1:]...)
				return
			}
		}
	}
}

// Clear removes every fault.
func (f *FaultFS) Clear() {
	f.mu.Lock()
	f.faults = nil
	f.mu.Unlock()
}

// check runs the hooks of the faults matching this call and returns the
// first one that fails it, or nil.
func (f *FaultFS) check(op Op, path string) *Fault {
	var hit *Fault
	var hooks []func(Op, string)
	f.mu.Lock()
	for _, af := range f.faults {
		if af.Ops&op == 0 || !strings.Contains(path, af.Path) || (af.Match != nil && !af.Match(path)) {
			continue
		}
		af.seen++
		if af.seen <= af.Skip || (af.Times > 0 && af.failed >= af.Times) {
			continue
		}
		af.failed++
		if af.Hook != nil {
			hooks = append(hooks, af.Hook)
		}
		if af.Err != nil && hit == nil {
			fault := af.Fault
			hit = &fault
		}
	}
	f.mu.Unlock()
	for _, h := range hooks {
		h(op, path)
	}
	return hit
}

func (f *FaultFS) err(op Op, path string) error {
	if ft := f.check(op, path); ft != nil {
		return &os.PathError{Op: opName(op), Path: path, Err: ft.Err}
	}
	return nil
}

func opName(op Op) string {
	names := []string{"open", "read", "write", "sync", "truncate", "stat", "mkdir",
		"remove", "rename", "readdir", "syncdir", "statfs", "lock"}
	for i, n := range names {
		if op == 1<<i {
			return n + " (injected)"
		}
	}
	return "injected"
}

func (f *FaultFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	if err := f.err(OpOpen, name); err != nil {
		return nil, err
	}
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: file, fs: f, name: name}, nil
}

func (f *FaultFS) Mkdir(name string, perm os.FileMode) error {
	if err := f.err(OpMkdir, name); err != nil {
		return err
	}
	return f.FS.Mkdir(name, perm)
}

func (f *FaultFS) MkdirAll(name string, perm os.FileMode) error {
	if err := f.err(OpMkdir, name); err != nil {
		return err
	}
	return f.FS.MkdirAll(name, perm)
}

func (f *FaultFS) Remove(name string) error {
	if err := f.err(OpRemove, name); err != nil {
		return err
	}
	return f.FS.Remove(name)
}

func (f *FaultFS) Rename(oldname, newname string) error {
	if err := f.err(OpRename, newname); err != nil {
		return err
	}
	return f.FS.Rename(oldname, newname)
}

func (f *FaultFS) ReadDirNames(name string) ([]string, error) {
	if err := f.err(OpReadDir, name); err != nil {
		return nil, err
	}
	return f.FS.ReadDirNames(name)
}

func (f *FaultFS) SyncDir(name string) error {
	if err := f.err(OpSyncDir, name); err != nil {
		return err
	}
	return f.FS.SyncDir(name)
}

func (f *FaultFS) Statfs(name string) (uint64, uint64, error) {
	if err := f.err(OpStatfs, name); err != nil {
		return 0, 0, err
	}
	return f.FS.Statfs(name)
}

func (f *FaultFS) Stat(name string) (int64, time.Time, error) {
	if err := f.err(OpSize, name); err != nil {
		return 0, time.Time{}, err
	}
	return f.FS.Stat(name)
}

// MarkTopDir passes the top-directory hint (spread.go) on to the file
// system underneath; it takes no faults, since it is only a hint.
func (f *FaultFS) MarkTopDir(name string) error { return markTopDir(f.FS, name) }

func (f *FaultFS) Lock(name string) (io.Closer, error) {
	if err := f.err(OpLock, name); err != nil {
		return nil, err
	}
	return f.FS.Lock(name)
}

type faultFile struct {
	File
	fs   *FaultFS
	name string
}

func (f *faultFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.fs.err(OpRead, f.name); err != nil {
		return 0, err
	}
	return f.File.ReadAt(p, off)
}

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	return f.write(p, off, f.File.WriteAt)
}

// WriteDirect writes with O_DIRECT where the file underneath can, so that
// servers taking injected faults (the failure matrix) copy resyncs as real
// ones do (direct.go); the faults are those of a write.
func (f *faultFile) WriteDirect(p []byte, off int64) (int, error) {
	if d, ok := f.File.(directWriter); ok {
		return f.write(p, off, d.WriteDirect)
	}
	return f.WriteAt(p, off)
}

// WriteDropBehind writes with RWF_DONTCACHE where the file underneath
// can (dropbehind.go), with the faults of a write; where it cannot it
// says so as the real file does, having written nothing.
func (f *faultFile) WriteDropBehind(p []byte, off int64) (int, error) {
	if d, ok := f.File.(dropBehindWriter); ok {
		return f.write(p, off, d.WriteDropBehind)
	}
	return 0, fmt.Errorf("write %s with RWF_DONTCACHE: %w", f.name, unix.EOPNOTSUPP)
}

// SendFrom lets the file underneath send its bytes (sendfile.go), with
// the faults of a read, since the kernel reads them from the disk.
func (f *faultFile) SendFrom(send func(fd int) error) error {
	if err := f.fs.err(OpRead, f.name); err != nil {
		return err
	}
	if s, ok := f.File.(fileSender); ok {
		return s.SendFrom(send)
	}
	return errNoSendfile
}

// StartWriteback passes the hint on (writeback.go); it makes nothing
// durable, so it takes no faults.
func (f *faultFile) StartWriteback() error {
	if w, ok := f.File.(writebackStarter); ok {
		return w.StartWriteback()
	}
	return nil
}

// DropCache passes the request on (fs.go): a scrub then reads the disk.
func (f *faultFile) DropCache() { dropCache(f.File) }

func (f *faultFile) write(p []byte, off int64, writeAt func([]byte, int64) (int, error)) (int, error) {
	ft := f.fs.check(OpWrite, f.name)
	if ft == nil {
		return writeAt(p, off)
	}
	err := &os.PathError{Op: "write (injected)", Path: f.name, Err: ft.Err}
	if !ft.Partial {
		return 0, err
	}
	end := (off + int64(len(p))/2) &^ (4096 - 1)
	if end <= off {
		return 0, err
	}
	n, werr := writeAt(p[:end-off], off)
	if werr != nil {
		return n, werr
	}
	return n, err
}

func (f *faultFile) Sync() error {
	if err := f.fs.err(OpSync, f.name); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *faultFile) Truncate(size int64) error {
	if err := f.fs.err(OpTruncate, f.name); err != nil {
		return err
	}
	return f.File.Truncate(size)
}

func (f *faultFile) Size() (int64, error) {
	if err := f.fs.err(OpSize, f.name); err != nil {
		return 0, err
	}
	return f.File.Size()
}
