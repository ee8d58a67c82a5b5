package fuse

import (
	"sync"
	"syscall"

	gofuse "github.com/hanwen/go-fuse/v2/fuse"

	"tandemfs/internal/proto"
)

// dirPage is how many entries one metadata request lists. A directory
// handle holds one page, so listing a directory of any size takes bounded
// memory.
const dirPage = 1024

// dirHandle is an open directory: a window of its listing. Entry i of the
// stream ("." is 0, ".." is 1, then the names in order) has offset i+1.
type dirHandle struct {
	mu     sync.Mutex
	ino    uint64
	parent uint64
	base   uint64 // stream index of page[0]
	page   []proto.DirEntry
	inodes []proto.Inode
	more   bool
	plus   bool
	loaded bool
}

func (fs *FS) OpenDir(cancel <-chan struct{}, in *gofuse.OpenIn, out *gofuse.OpenOut) gofuse.Status {
	n, err := fs.c.GetAttr(in.NodeId)
	if err != nil {
		return status(err)
	}
	if n.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return gofuse.ENOTDIR
	}
	fs.mu.Lock()
	fs.nextFh++
	fh := fs.nextFh
	fs.dirs[fh] = &dirHandle{ino: in.NodeId}
	fs.mu.Unlock()
	out.Fh = fh
	return gofuse.OK
}

func (fs *FS) ReleaseDir(in *gofuse.ReleaseIn) {
	fs.mu.Lock()
	delete(fs.dirs, in.Fh)
	fs.mu.Unlock()
}

func (fs *FS) FsyncDir(cancel <-chan struct{}, in *gofuse.FsyncIn) gofuse.Status {
	return status(fs.c.SyncMeta())
}

func (fs *FS) ReadDir(cancel <-chan struct{}, in *gofuse.ReadIn, out *gofuse.DirEntryList) gofuse.Status {
	return fs.readDir(in, out, false)
}

func (fs *FS) ReadDirPlus(cancel <-chan struct{}, in *gofuse.ReadIn, out *gofuse.DirEntryList) gofuse.Status {
	return fs.readDir(in, out, true)
}

func (fs *FS) readDir(in *gofuse.ReadIn, out *gofuse.DirEntryList, plus bool) gofuse.Status {
	fs.mu.Lock()
	d := fs.dirs[in.Fh]
	fs.mu.Unlock()
	if d == nil {
		return gofuse.EBADF
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := in.Offset; ; i++ {
		var e gofuse.DirEntry
		var n *proto.Inode
		switch i {
		case 0:
			e = gofuse.DirEntry{Name: ".", Mode: syscall.S_IFDIR, Ino: d.ino}
		case 1:
			e = gofuse.DirEntry{Name: "..", Mode: syscall.S_IFDIR, Ino: d.parentIno()}
		default:
			ent, inode, ok, err := fs.entryAt(d, i-2, plus)
			if err != nil {
				return status(err)
			}
			if !ok {
				return gofuse.OK
			}
			e = gofuse.DirEntry{Name: ent.Name, Mode: ent.Mode, Ino: ent.Ino}
			n = inode
		}
		e.Off = i + 1
		if !plus {
			if !out.AddDirEntry(e) {
				return gofuse.OK
			}
			continue
		}
		eo := out.AddDirLookupEntry(e)
		if eo == nil {
			return gofuse.OK
		}
		if n != nil {
			fs.fillEntry(in.NodeId, e.Name, n, eo)
		}
	}
}

func (d *dirHandle) parentIno() uint64 {
	if d.parent == 0 {
		return d.ino
	}
	return d.parent
}

// entryAt returns entry k (0-based, without "." and "..") of the listing,
// fetching pages as needed. Reading forward costs one request per page;
// seeking backwards (rare: rewinddir, telldir/seekdir) restarts the
// listing.
func (fs *FS) entryAt(d *dirHandle, k uint64, plus bool) (proto.DirEntry, *proto.Inode, bool, error) {
	if !d.loaded || k < d.base || plus != d.plus {
		if err := fs.loadPage(d, "", 0, plus); err != nil {
			return proto.DirEntry{}, nil, false, err
		}
	}
	for k >= d.base+uint64(len(d.page)) {
		if !d.more {
			return proto.DirEntry{}, nil, false, nil
		}
		last := d.page[len(d.page)-1].Name
		if err := fs.loadPage(d, last, d.base+uint64(len(d.page)), plus); err != nil {
			return proto.DirEntry{}, nil, false, err
		}
	}
	i := k - d.base
	var n *proto.Inode
	if plus && int(i) < len(d.inodes) {
		n = &d.inodes[i]
	}
	return d.page[i], n, true, nil
}

func (fs *FS) loadPage(d *dirHandle, after string, base uint64, plus bool) error {
	r, err := fs.c.ReadDir(d.ino, after, dirPage, plus)
	if err != nil {
		return err
	}
	d.page, d.inodes, d.more, d.base, d.plus, d.loaded = r.Entries, r.Inodes, r.More, base, plus, true
	if len(d.page) == 0 {
		d.more = false
	}
	return nil
}
