// Package fuse mounts a TandemFS client as a Linux file system with
// go-fuse's raw protocol API. FUSE node IDs are TandemFS inode numbers, so
// the adapter keeps no tree in memory: every request names an inode and is
// translated into one client library call.
package fuse

import (
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gofuse "github.com/hanwen/go-fuse/v2/fuse"

	"tandemfs/internal/acl"
	"tandemfs/internal/client"
	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
)

// FS implements gofuse.RawFileSystem over a client.
type FS struct {
	gofuse.RawFileSystem // ENOSYS for what is not implemented
	c                    *client.Client

	kernel  *kernelCache  // the kernel's timeouts and invalidations
	reads   atomic.Uint64 // READ requests, for user.tandem.client
	ioUring func() bool   // whether the kernel's requests come over io_uring
	lookups atomic.Uint64 // LOOKUP requests, for user.tandem.client

	mu      sync.Mutex
	nextFh  uint64
	files   map[uint64]*client.Handle
	dirs    map[uint64]*dirHandle
	lockers map[uint64]map[uint64]struct{} // open file -> owners of POSIX locks taken through it
}

// New returns a file system serving c.
func New(c *client.Client) *FS {
	return &FS{RawFileSystem: gofuse.NewDefaultRawFileSystem(), c: c,
		kernel: newKernelCache(c.Watching),
		files:  map[uint64]*client.Handle{}, dirs: map[uint64]*dirHandle{},
		lockers: map[uint64]map[uint64]struct{}{}}
}

func (fs *FS) String() string { return "tandem" }

func status(err error) gofuse.Status {
	if err == nil {
		return gofuse.OK
	}
	return gofuse.Status(rpc.ErrnoOf(err))
}

func fillAttr(n *proto.Inode, a *gofuse.Attr) {
	a.Ino = n.Ino
	a.Size = n.Size
	a.Blocks = n.Blocks()
	a.Mode = n.Mode
	a.Nlink = n.Nlink
	a.Owner = gofuse.Owner{Uid: n.Uid, Gid: n.Gid}
	a.Rdev = n.Rdev
	a.Atime, a.Atimensec = uint64(n.Atime/1e9), uint32(n.Atime%1e9)
	a.Mtime, a.Mtimensec = uint64(n.Mtime/1e9), uint32(n.Mtime%1e9)
	a.Ctime, a.Ctimensec = uint64(n.Ctime/1e9), uint32(n.Ctime%1e9)
	a.Blksize = 4096
	if n.Mode&syscall.S_IFMT == syscall.S_IFREG && n.Stripe.ChunkSize > 0 {
		a.Blksize = min(n.Stripe.ChunkSize, 1<<20)
	}
}

// fillEntry answers a lookup (or create) of parent/name with n.
func (fs *FS) fillEntry(parent uint64, name string, n *proto.Inode, out *gofuse.EntryOut) {
	out.NodeId = n.Ino
	d := fs.kernel.entryTimeout(parent, name, n.Ino)
	out.SetEntryTimeout(d)
	out.SetAttrTimeout(d)
	fillAttr(n, &out.Attr)
}

func (fs *FS) Lookup(cancel <-chan struct{}, h *gofuse.InHeader, name string, out *gofuse.EntryOut) gofuse.Status {
	fs.lookups.Add(1)
	n, err := fs.c.Lookup(h.NodeId, name)
	if err != nil {
		st := status(err)
		if st == gofuse.ENOENT {
			return fs.negativeEntry(h.NodeId, name, out)
		}
		return st
	}
	fs.c.OverlayAttr(n)
	fs.fillEntry(h.NodeId, name, n, out)
	return gofuse.OK
}

// negativeEntry answers a lookup of a name parent lacks: with a negative
// entry the kernel may keep while a directory lease vouches for the
// absence (kernelcache.go), else with ENOENT, which it does not keep.
func (fs *FS) negativeEntry(parent uint64, name string, out *gofuse.EntryOut) gofuse.Status {
	d := fs.kernel.absentTimeout(parent, name, func() time.Duration { return fs.c.AbsentFor(parent, name) })
	if d <= 0 {
		return gofuse.ENOENT
	}
	*out = gofuse.EntryOut{} // node ID 0: "no such name", for d
	out.SetEntryTimeout(d)
	return gofuse.OK
}

func (fs *FS) Forget(nodeid, nlookup uint64) {}

func (fs *FS) GetAttr(cancel <-chan struct{}, in *gofuse.GetAttrIn, out *gofuse.AttrOut) gofuse.Status {
	n, err := fs.c.GetAttr(in.NodeId)
	if err != nil {
		return status(err)
	}
	fillAttr(n, &out.Attr)
	out.SetTimeout(fs.kernel.attrTimeout(n.Ino))
	return gofuse.OK
}

func (fs *FS) SetAttr(cancel <-chan struct{}, in *gofuse.SetAttrIn, out *gofuse.AttrOut) gofuse.Status {
	r := proto.SetAttrReq{Ino: in.NodeId}
	v := in.Valid
	if v&gofuse.FATTR_MODE != 0 {
		r.Valid |= proto.SetMode
		r.Mode = in.Mode
	}
	if v&gofuse.FATTR_UID != 0 {
		r.Valid |= proto.SetUid
		r.Uid = in.Uid
	}
	if v&gofuse.FATTR_GID != 0 {
		r.Valid |= proto.SetGid
		r.Gid = in.Gid
	}
	if v&gofuse.FATTR_SIZE != 0 {
		r.Valid |= proto.SetSize
		r.Size = in.Size
	}
	if v&gofuse.FATTR_ATIME_NOW != 0 {
		r.Valid |= proto.SetAtimeNow
	} else if v&gofuse.FATTR_ATIME != 0 {
		r.Valid |= proto.SetAtime
		r.Atime = int64(in.Atime)*1e9 + int64(in.Atimensec)
	}
	if v&gofuse.FATTR_MTIME_NOW != 0 {
		r.Valid |= proto.SetMtimeNow
	} else if v&gofuse.FATTR_MTIME != 0 {
		r.Valid |= proto.SetMtime
		r.Mtime = int64(in.Mtime)*1e9 + int64(in.Mtimensec)
	}
	if v&gofuse.FATTR_CTIME != 0 {
		r.Valid |= proto.SetCtime
		r.Ctime = int64(in.Ctime)*1e9 + int64(in.Ctimensec)
	}
	if v&gofuse.FATTR_KILL_SUIDGID != 0 && r.Valid&proto.SetMode == 0 {
		if cur, err := fs.c.GetAttr(in.NodeId); err == nil {
			if m := acl.KillSuidGid(cur.Mode); m != cur.Mode {
				r.Valid |= proto.SetMode
				r.Mode = m
			}
		}
	}
	n, err := fs.c.SetAttr(&r)
	if err != nil {
		return status(err)
	}
	fillAttr(n, &out.Attr)
	out.SetTimeout(fs.kernel.attrTimeout(n.Ino))
	return gofuse.OK
}

func creds(h *gofuse.InHeader) proto.Creds { return proto.Creds{Uid: h.Uid, Gid: h.Gid} }

// create makes parent/name. The kernel leaves the umask to the file
// system (CAP_DONT_MASK): the metadata service applies it, or instead
// the directory's default ACL.
func (fs *FS) create(h *gofuse.InHeader, parent uint64, name string, mode, umask, rdev uint32, target string, out *gofuse.EntryOut) (*proto.Inode, gofuse.Status) {
	n, err := fs.c.Create(&proto.CreateReq{Parent: parent, Name: name, Mode: mode, Umask: umask, Rdev: rdev, Target: target, Creds: creds(h)})
	if err != nil {
		return nil, status(err)
	}
	fs.fillEntry(parent, name, n, out)
	return n, gofuse.OK
}

func (fs *FS) Mknod(cancel <-chan struct{}, in *gofuse.MknodIn, name string, out *gofuse.EntryOut) gofuse.Status {
	_, st := fs.create(&in.InHeader, in.NodeId, name, in.Mode, in.Umask, in.Rdev, "", out)
	return st
}

func (fs *FS) Mkdir(cancel <-chan struct{}, in *gofuse.MkdirIn, name string, out *gofuse.EntryOut) gofuse.Status {
	_, st := fs.create(&in.InHeader, in.NodeId, name, syscall.S_IFDIR|(in.Mode&07777), in.Umask, 0, "", out)
	return st
}

func (fs *FS) Symlink(cancel <-chan struct{}, h *gofuse.InHeader, target, name string, out *gofuse.EntryOut) gofuse.Status {
	_, st := fs.create(h, h.NodeId, name, syscall.S_IFLNK|0o777, 0, 0, target, out)
	return st
}

func (fs *FS) Readlink(cancel <-chan struct{}, h *gofuse.InHeader) ([]byte, gofuse.Status) {
	n, err := fs.c.GetAttr(h.NodeId)
	if err != nil {
		return nil, status(err)
	}
	if n.Mode&syscall.S_IFMT != syscall.S_IFLNK {
		return nil, gofuse.EINVAL
	}
	return []byte(n.Target), gofuse.OK
}

func (fs *FS) Unlink(cancel <-chan struct{}, h *gofuse.InHeader, name string) gofuse.Status {
	return status(fs.c.Unlink(h.NodeId, name, false))
}

func (fs *FS) Rmdir(cancel <-chan struct{}, h *gofuse.InHeader, name string) gofuse.Status {
	return status(fs.c.Unlink(h.NodeId, name, true))
}

// Linux renameat2 flags.
const (
	renameNoReplace = 1
	renameExchange  = 2
	renameWhiteout  = 4
)

func (fs *FS) Rename(cancel <-chan struct{}, in *gofuse.RenameIn, oldName, newName string) gofuse.Status {
	if in.Flags&renameWhiteout != 0 {
		return gofuse.EINVAL
	}
	var flags uint32
	if in.Flags&renameNoReplace != 0 {
		flags |= proto.RenameNoReplace
	}
	if in.Flags&renameExchange != 0 {
		flags |= proto.RenameExchange
	}
	return status(fs.c.Rename(in.NodeId, oldName, in.Newdir, newName, flags))
}

func (fs *FS) Link(cancel <-chan struct{}, in *gofuse.LinkIn, name string, out *gofuse.EntryOut) gofuse.Status {
	n, err := fs.c.Link(in.Oldnodeid, in.NodeId, name)
	if err != nil {
		return status(err)
	}
	fs.c.OverlayAttr(n)
	fs.fillEntry(in.NodeId, name, n, out)
	return gofuse.OK
}

// Access answers access(2) as the kernel would, ACLs included
// (acl.Permits; the kernel normally checks itself, as the file system is
// mounted with default_permissions, and does not ask).
func (fs *FS) Access(cancel <-chan struct{}, in *gofuse.AccessIn) gofuse.Status {
	n, err := fs.c.GetAttr(in.NodeId)
	if err != nil {
		return status(err)
	}
	f := &acl.File{Mode: n.Mode, UID: n.Uid, GID: n.Gid}
	if v, err := fs.c.GetXattr(in.NodeId, acl.XattrAccess); err == nil {
		if f.AccessACL, err = acl.Parse(v); err != nil {
			return gofuse.EIO
		}
	}
	if !acl.Permits(f, &acl.Caller{UID: in.Uid, GIDs: []uint32{in.Gid}}, uint16(in.Mask&7)) {
		return gofuse.EACCES
	}
	return gofuse.OK
}

func (fs *FS) StatFs(cancel <-chan struct{}, h *gofuse.InHeader, out *gofuse.StatfsOut) gofuse.Status {
	r, err := fs.c.StatFs()
	if err != nil {
		return status(err)
	}
	const bs = 4096
	out.Bsize, out.Frsize, out.NameLen = bs, bs, proto.MaxName
	out.Blocks = r.TotalBytes / bs
	out.Bfree = r.FreeBytes / bs
	out.Bavail = out.Bfree
	out.Files = r.Inodes + 1<<32
	out.Ffree = 1 << 32
	return gofuse.OK
}

// Virtual extended attributes: `tandem stripe` reads and sets striping
// through them, so it needs nothing but a path on the mount.
const (
	XattrStripe = "user.tandem.stripe" // get/set on a directory: {"chunk_size":..,"count":..}
	XattrLayout = "user.tandem.layout" // get: the pattern and, for a file, where it lives
	XattrClient = "user.tandem.client" // get, on any path: this client's caches and counters
	// XattrProject is the project (project quotas) a file or directory
	// is charged to, in decimal; root may set it, `tandem quota project`
	// does for a whole tree.
	XattrProject = "user.tandem.project"
)

// ClientStats is the JSON of user.tandem.client: what the client serving
// the mount holds, so that an administrator can see its caches at work.
type ClientStats struct {
	Session          uint64 `json:"session"`
	Watching         bool   `json:"watching"`
	MetaCalls        uint64 `json:"meta_calls"`
	FileLeases       int    `json:"file_leases"`
	DirLeases        int    `json:"dir_leases"`
	BlockCacheBytes  int64  `json:"block_cache_bytes"`
	BlockCacheHits   uint64 `json:"block_cache_hits"`
	BlockCacheMisses uint64 `json:"block_cache_misses"`
	// OpensKeptPages counts the opens after which the kernel answered
	// reads from the pages it already held (client/kernelpages.go).
	OpensKeptPages uint64 `json:"opens_kept_pages"`
	// Reads counts the reads the kernel asked this client for.
	Reads uint64 `json:"reads"`
	// Lookups counts the names the kernel asked this client to look up
	// (those it keeps, found or missing, it does not ask again).
	Lookups uint64 `json:"lookups"`
	// Transport is how the kernel's requests arrive: "io_uring" or
	// "/dev/fuse" (uring.go).
	Transport string `json:"transport"`
}

func (fs *FS) clientStats() ([]byte, error) {
	bc := fs.c.BlockCacheStats()
	transport := "/dev/fuse"
	if fs.ioUring != nil && fs.ioUring() {
		transport = "io_uring"
	}
	return json.Marshal(ClientStats{Transport: transport, Session: fs.c.Session(), Watching: fs.c.Watching(), MetaCalls: fs.c.MetaCalls(),
		FileLeases: fs.c.FileLeases(), DirLeases: fs.c.DirLeases(),
		BlockCacheBytes: bc.Bytes, BlockCacheHits: bc.Hits, BlockCacheMisses: bc.Misses,
		OpensKeptPages: fs.c.OpensKeptPages(), Reads: fs.reads.Load(), Lookups: fs.lookups.Load()})
}

// Layout is the JSON of user.tandem.layout.
type Layout struct {
	ChunkSize uint32   `json:"chunk_size"`
	Count     uint32   `json:"count"`
	Replicas  uint32   `json:"replicas"`
	Inline    bool     `json:"inline"`
	Chains    []uint32 `json:"chains,omitempty"`
	Targets   []uint32 `json:"targets"`
	// Copies shows, per chain, its members and their states.
	Copies []ChainLayout `json:"copies,omitempty"`
	// For a directory: how many stripes and copies a new file in it
	// gets from the chains that exist now (Count and Replicas are what
	// was asked for; the metadata service gives no more than exists).
	NewFileCount    uint32 `json:"new_file_count,omitempty"`
	NewFileReplicas uint32 `json:"new_file_replicas,omitempty"`
	// Servers counts, for a directory, the servers with targets: the
	// failure domains erasure-coded files can spread their shards over.
	Servers int `json:"servers,omitempty"`
	// Racks counts, for a directory, the racks with targets (a server
	// without a rack label is a rack of its own).
	Racks int `json:"racks,omitempty"`
	// EC is a file's erasure coding, or the one a directory gives new
	// files; absent when they are copied.
	EC *ECLayout `json:"ec,omitempty"`
}

// ECLayout is an erasure-coded layout: K data and M parity shards per
// stripe and, for a file, where each shard lives.
type ECLayout struct {
	Data          int           `json:"data"`
	Parity        int           `json:"parity"`
	FailureDomain string        `json:"failure_domain"`
	Shards        []ShardLayout `json:"shards,omitempty"`
}

// ShardLayout is where shard Shard of every stripe of a file lives.
type ShardLayout struct {
	Shard  int    `json:"shard"`
	Kind   string `json:"kind"` // "data" or "parity"
	Target uint32 `json:"target"`
	Server uint32 `json:"server"`
	Addr   string `json:"addr"`
	Rack   string `json:"rack,omitempty"`
}

// ChainLayout is one chain of a file's layout.
type ChainLayout struct {
	Chain   uint32   `json:"chain"`
	Version uint32   `json:"version"`
	Targets []uint32 `json:"targets"`
	States  []string `json:"states"`
}

// newFileStripes is how many chains, of how many copies, a new file with
// pattern s gets from the chains in m, by the metadata service's rule
// (meta.pickChains, proto.ReplicasFor): no more chains than exist.
func newFileStripes(m proto.ClusterMap, s proto.Stripe) (count, replicas uint32) {
	byReplicas := map[uint32]uint32{}
	for _, c := range m.Chains {
		byReplicas[uint32(len(c.Targets))]++
	}
	r := proto.ReplicasFor(s.Replicas, func(r uint32) bool { return byReplicas[r] > 0 })
	count = byReplicas[r]
	if s.Count > 0 && s.Count < count {
		count = s.Count
	}
	return count, r
}

func (fs *FS) layout(ino uint64) ([]byte, error) {
	n, err := fs.c.GetAttr(ino)
	if err != nil {
		return nil, err
	}
	l := Layout{ChunkSize: n.Stripe.ChunkSize, Count: n.Stripe.Count, Replicas: n.Stripe.Replicas,
		Inline: n.Inline, Targets: []uint32{}}
	if n.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		m := fs.c.ClusterMap()
		l.NewFileCount, l.NewFileReplicas = newFileStripes(m, n.Stripe)
		l.Servers, l.Racks = domainsWithTargets(m)
	}
	if n.Stripe.EC.On() {
		l.EC = ecLayout(fs.c.ClusterMap(), n)
		l.Count, l.Replicas, l.NewFileCount, l.NewFileReplicas = 0, 0, 0, 0
		return json.Marshal(l)
	}
	if n.Mode&syscall.S_IFMT == syscall.S_IFREG && !n.Inline {
		l.Chains = n.Chains
		l.Count = uint32(len(n.Chains))
		m := fs.c.ClusterMap()
		for _, id := range n.Chains {
			for _, ch := range m.Chains {
				if ch.ID != id {
					continue
				}
				l.Targets = append(l.Targets, ch.Targets...)
				cl := ChainLayout{Chain: id, Version: ch.Version, Targets: ch.Targets}
				for _, t := range ch.Targets {
					st, _ := ch.State(t)
					cl.States = append(cl.States, proto.MemberStateName(st))
				}
				l.Copies = append(l.Copies, cl)
			}
		}
	}
	return json.Marshal(l)
}

func (fs *FS) GetXAttr(cancel <-chan struct{}, h *gofuse.InHeader, attr string, dest []byte) (uint32, gofuse.Status) {
	var v []byte
	var err error
	switch attr {
	case XattrStripe, XattrLayout:
		v, err = fs.layout(h.NodeId)
	case XattrClient:
		v, err = fs.clientStats()
	case XattrProject:
		var n *proto.Inode
		if n, err = fs.c.GetAttr(h.NodeId); err == nil {
			v = []byte(strconv.FormatUint(uint64(n.Project), 10))
		}
	default:
		v, err = fs.c.GetXattr(h.NodeId, attr)
	}
	if err != nil {
		return 0, status(err)
	}
	if len(dest) < len(v) {
		return uint32(len(v)), gofuse.ERANGE
	}
	return uint32(copy(dest, v)), gofuse.OK
}

func (fs *FS) ListXAttr(cancel <-chan struct{}, h *gofuse.InHeader, dest []byte) (uint32, gofuse.Status) {
	names, err := fs.c.ListXattr(h.NodeId)
	if err != nil {
		return 0, status(err)
	}
	var b []byte
	for _, n := range names {
		b = append(append(b, n...), 0)
	}
	if len(dest) < len(b) {
		return uint32(len(b)), gofuse.ERANGE
	}
	return uint32(copy(dest, b)), gofuse.OK
}

func (fs *FS) SetXAttr(cancel <-chan struct{}, in *gofuse.SetXAttrIn, attr string, data []byte) gofuse.Status {
	if attr == XattrProject {
		return fs.setProject(&in.InHeader, data)
	}
	if attr == XattrStripe {
		var s struct {
			ChunkSize     uint32 `json:"chunk_size"`
			Count         uint32 `json:"count"`
			Replicas      uint32 `json:"replicas"`
			EC            string `json:"ec"` // "K+M"
			FailureDomain string `json:"failure_domain"`
		}
		if err := json.Unmarshal(data, &s); err != nil {
			return gofuse.EINVAL
		}
		p, err := ecPattern(s.EC, s.FailureDomain)
		if err != nil {
			return gofuse.EINVAL
		}
		return status(fs.c.SetStripe(in.NodeId, proto.Stripe{ChunkSize: s.ChunkSize, Count: s.Count, Replicas: s.Replicas, EC: p}))
	}
	if strings.HasPrefix(attr, "user.tandem.") {
		return gofuse.EPERM
	}
	var flags uint32
	if in.Flags&1 != 0 { // XATTR_CREATE
		flags |= proto.XattrCreate
	}
	if in.Flags&2 != 0 { // XATTR_REPLACE
		flags |= proto.XattrReplace
	}
	if in.SetXAttrFlags&gofuse.SETXATTR_ACL_KILL_SGID != 0 {
		flags |= proto.XattrKillSgid
	}
	return status(fs.c.SetXattr(in.NodeId, attr, data, flags))
}

func (fs *FS) RemoveXAttr(cancel <-chan struct{}, h *gofuse.InHeader, attr string) gofuse.Status {
	return status(fs.c.RemoveXattr(h.NodeId, attr))
}

// setProject moves an inode into a project, for root only (as XFS's
// project ids are set by the administrator).
func (fs *FS) setProject(h *gofuse.InHeader, data []byte) gofuse.Status {
	if h.Uid != 0 {
		return gofuse.EPERM
	}
	id, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 32)
	if err != nil {
		return gofuse.EINVAL
	}
	_, err = fs.c.SetAttr(&proto.SetAttrReq{Ino: h.NodeId, Valid: proto.SetProject, Project: uint32(id)})
	return status(err)
}
