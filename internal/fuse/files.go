package fuse

import (
	"syscall"

	gofuse "github.com/hanwen/go-fuse/v2/fuse"

	"tandemfs/internal/acl"
	"tandemfs/internal/client"
	"tandemfs/internal/proto"
)

func (fs *FS) addFile(h *client.Handle) uint64 {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.nextFh++
	fs.files[fs.nextFh] = h
	return fs.nextFh
}

func (fs *FS) file(fh uint64) *client.Handle {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.files[fh]
}

func (fs *FS) Create(cancel <-chan struct{}, in *gofuse.CreateIn, name string, out *gofuse.CreateOut) gofuse.Status {
	n, st := fs.create(&in.InHeader, in.NodeId, name, syscall.S_IFREG|(in.Mode&07777), in.Umask, 0, "", &out.EntryOut)
	if !st.Ok() {
		return st
	}
	h, err := fs.c.OpenCreated(n, in.Flags&^syscall.O_TRUNC)
	if err != nil {
		return status(err)
	}
	out.Fh = fs.addFile(h)
	return gofuse.OK
}

// Open takes the file's current size and layout from the metadata
// service, or from the client's cache when a file lease vouches for them:
// close-to-open consistency, as NFS's default. A job whose rank 0 writes
// and closes a file before a barrier reads it whole on every other rank
// after the barrier, even before the notice of the change reaches their
// clients.
func (fs *FS) Open(cancel <-chan struct{}, in *gofuse.OpenIn, out *gofuse.OpenOut) gofuse.Status {
	n, asked, err := fs.c.OpenAttr(in.NodeId)
	if err != nil {
		return status(err)
	}
	// Close-to-open: the kernel may still hold a size from before the
	// file's last close, by another client (the change reaches it on the
	// watch, a few milliseconds later; asked: the file lease did not
	// vouch for the client's copy) or by another process of this mount
	// (hamatrix row 9: the first reader of a copy just closed here read
	// short, in 4 runs of 4, until this dropped the kernel's attributes
	// for such files too), and would end reads there. Dropped, the
	// kernel asks again (this client answers from its cache) when a read
	// goes past its size or at the next stat.
	if asked || fs.kernel.takeClosedWritable(in.NodeId) {
		fs.kernel.InvalidateAttr(in.NodeId)
	}
	if n.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		return gofuse.EISDIR
	}
	if in.Mode&gofuse.OPEN_KILL_SUIDGID != 0 {
		if err := fs.dropPrivileges(n); err != nil {
			return status(err)
		}
	}
	h, err := fs.c.Open(n, in.Flags)
	if err != nil {
		return status(err)
	}
	out.Fh = fs.addFile(h)
	out.OpenFlags |= openReplyFlags(in.Flags)
	if in.Flags&syscall.O_TRUNC == 0 && fs.c.KeepKernelPages(n) {
		out.OpenFlags |= gofuse.FOPEN_KEEP_CACHE // kernelpages.go
	}
	return gofuse.OK
}

// openReplyFlags are the FOPEN_ flags for an open with open(2) flags.
// A read-only handle has nothing to flush: its close need not wait for a
// FLUSH round trip to the client (FOPEN_NOFLUSH), which spares every
// open-read-close (compilers reading headers, the read phase of mdtest) a
// kernel round trip. Writers' handles keep FLUSH: it commits their writes
// before close returns (close-to-open). POSIX locks taken through a
// read-only open are released with it instead (locks.go).
func openReplyFlags(flags uint32) uint32 {
	if flags&syscall.O_ACCMODE == syscall.O_RDONLY {
		return gofuse.FOPEN_NOFLUSH
	}
	return 0
}

// dropPrivileges clears set-user-ID (and set-group-ID with group execute)
// as the kernel asks when an unprivileged user writes or truncates.
func (fs *FS) dropPrivileges(n *proto.Inode) error {
	m := acl.KillSuidGid(n.Mode)
	if m == n.Mode {
		return nil
	}
	_, err := fs.c.SetAttr(&proto.SetAttrReq{Ino: n.Ino, Valid: proto.SetMode, Mode: m})
	return err
}

func (fs *FS) Read(cancel <-chan struct{}, in *gofuse.ReadIn, buf []byte) (gofuse.ReadResult, gofuse.Status) {
	h := fs.file(in.Fh)
	if h == nil {
		return nil, gofuse.EBADF
	}
	fs.reads.Add(1)
	data, done, err := h.ReadData(buf[:in.Size], in.Offset)
	if err != nil {
		return nil, status(err)
	}
	return &pinnedRead{data: data, done: done}, gofuse.OK
}

// pinnedRead is a read reply whose bytes may be readahead memory that must
// not be reused before the kernel has them: go-fuse calls Done after
// writing a result that has Slices (for results without it, Done comes
// before the write when splicing is off).
type pinnedRead struct {
	data []byte
	done func()
}

func (r *pinnedRead) Size() int                            { return len(r.data) }
func (r *pinnedRead) Bytes([]byte) ([]byte, gofuse.Status) { return r.data, gofuse.OK }
func (r *pinnedRead) Slices() ([][]byte, gofuse.Status)    { return [][]byte{r.data}, gofuse.OK }
func (r *pinnedRead) Done() {
	if r.done != nil { // once: a second release would free memory in use
		r.done()
		r.done = nil
	}
}

func (fs *FS) Write(cancel <-chan struct{}, in *gofuse.WriteIn, data []byte) (uint32, gofuse.Status) {
	h := fs.file(in.Fh)
	if h == nil {
		return 0, gofuse.EBADF
	}
	if in.WriteFlags&gofuse.WRITE_KILL_SUIDGID != 0 {
		n, err := fs.c.GetAttr(in.NodeId)
		if err == nil {
			err = fs.dropPrivileges(n)
		}
		if err != nil {
			return 0, status(err)
		}
	}
	var n int
	var err error
	if in.Flags&syscall.O_APPEND != 0 && in.WriteFlags&gofuse.WRITE_CACHE == 0 {
		n, err = h.Append(data) // the kernel's offset is its cached size
	} else {
		n, err = h.Write(data, in.Offset)
	}
	return uint32(n), status(err)
}

// Flush runs at every close(2) of a writable open: it commits the writes
// and, as POSIX asks, releases the closing process's locks on the file.
func (fs *FS) Flush(cancel <-chan struct{}, in *gofuse.FlushIn) gofuse.Status {
	h := fs.file(in.Fh)
	if h == nil {
		return gofuse.EBADF
	}
	err := h.Flush()
	fs.kernel.closedForWriting(in.NodeId)
	if lerr := fs.c.ReleaseLocks(in.NodeId, in.LockOwner, false); err == nil {
		err = lerr
	}
	return status(err)
}

func (fs *FS) Fsync(cancel <-chan struct{}, in *gofuse.FsyncIn) gofuse.Status {
	h := fs.file(in.Fh)
	if h == nil {
		return gofuse.EBADF
	}
	return status(h.Fsync())
}

func (fs *FS) Release(cancel <-chan struct{}, in *gofuse.ReleaseIn) {
	fs.mu.Lock()
	h := fs.files[in.Fh]
	delete(fs.files, in.Fh)
	fs.mu.Unlock()
	fs.releaseLocks(in)
	if h != nil {
		h.Release()
	}
}

// Fallocate supports mode 0 (allocate, extending the size); TandemFS
// allocates chunk space on write, so nothing is reserved in advance.
func (fs *FS) Fallocate(cancel <-chan struct{}, in *gofuse.FallocateIn) gofuse.Status {
	if in.Mode != 0 {
		return gofuse.Status(syscall.EOPNOTSUPP)
	}
	n, err := fs.c.GetAttr(in.NodeId)
	if err != nil {
		return status(err)
	}
	if end := in.Offset + in.Length; end > n.Size {
		_, err = fs.c.SetAttr(&proto.SetAttrReq{Ino: in.NodeId, Valid: proto.SetSize, Size: end})
	}
	return status(err)
}
