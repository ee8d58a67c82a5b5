package proto

import (
	"fmt"
	"syscall"

	"tandemfs/internal/wire"
)

// Metadata service operation codes.
const (
	OpLookup uint16 = 1 + iota
	OpGetAttr
	OpSetAttr
	OpCreate
	OpLink
	OpUnlink
	OpRename
	OpReadDir
	OpWriteInline
	OpUninline
	OpCommitWrite
	OpGetXattr
	OpSetXattr
	OpListXattr
	OpRemoveXattr
	OpSetStripe
	OpStatFs
	OpRelease
	OpClusterMap
	OpRegisterServer
	OpHeartbeat
	OpSessionKeepalive
	OpStatus
	OpSync       // make every change so far durable on disk (an application's fsync)
	OpResyncDone // a chain's head finished copying a member: it may serve
	OpTargetFailed
	OpWatch         // wait for namespace changes after an index (see WatchReq)
	OpSetLock       // take or release a file lock (locks.go)
	OpGetLock       // which lock, if any, is in the way of one (F_GETLK)
	OpDirLease      // a lease on a directory's names (lease.go)
	OpFileLease     // a file's attributes with a lease on them (lease.go)
	OpQuotaSet      // set a user's, group's or project's limits (quota.go)
	OpQuotaList     // every quota's usage and limits, and the grace periods (quota.go)
	OpNFSLease      // an NFS gateway head asks for, renews or gives back a service address (nfs.go)
	OpECGen         // a write generation of an erasure-coded file (ec.go)
	OpECStripes     // the recorded stripes of an erasure-coded file (ec.go)
	OpECScrub       // start a parity check of every erasure-coded file (ec.go)
	OpOpenWrite     // a client is about to write a file's data to its targets (opens.go)
	OpConvertBegin  // begin converting a file between copies and erasure coding (convert.go)
	OpConvertCommit // swap a converted file's layout in (convert.go)
	// OpTargetRecovered ends a target's failure that its storage server
	// recovered from without a restart (storage/lostchunks.go).
	OpTargetRecovered
	OpFileLeaseRelease // a client gives back file leases it no longer trusts (lease.go)
)

// Creds are the caller's identity, for permission checks and ownership.
type Creds struct {
	Uid, Gid uint32
	Groups   []uint32
}

func (c *Creds) Encode(e *wire.Enc) {
	e.U32(c.Uid)
	e.U32(c.Gid)
	e.U32s(c.Groups)
}

func (c *Creds) Decode(d *wire.Dec) {
	c.Uid = d.U32()
	c.Gid = d.U32()
	c.Groups = d.U32s(256)
}

// LookupReq asks for the inode named Name in directory Parent.
type LookupReq struct {
	Parent uint64
	Name   string
}

func (r *LookupReq) Encode(e *wire.Enc) { e.U64(r.Parent); e.String(r.Name) }
func (r *LookupReq) Decode(d *wire.Dec) { r.Parent = d.U64(); r.Name = d.String(MaxName) }

// InoReq names one inode (GetAttr, Uninline, Release, ListXattr).
type InoReq struct {
	Ino     uint64
	Session uint64
}

func (r *InoReq) Encode(e *wire.Enc) { e.U64(r.Ino); e.U64(r.Session) }
func (r *InoReq) Decode(d *wire.Dec) { r.Ino = d.U64(); r.Session = d.U64() }

// SetAttr validity bits.
const (
	SetMode uint32 = 1 << iota
	SetUid
	SetGid
	SetSize
	SetAtime
	SetMtime
	SetAtimeNow
	SetMtimeNow
	SetCtime
	// SetProject moves the inode into project Project (project quotas,
	// quota.go); a directory's project is inherited by what is made in it.
	SetProject
)

// SetAttrReq changes the attributes selected by Valid. A size change here
// only changes the metadata; the client trims storage chunks itself.
type SetAttrReq struct {
	Ino   uint64
	Valid uint32
	Mode  uint32
	Uid   uint32
	Gid   uint32
	Size  uint64
	Atime int64
	Mtime int64
	Ctime int64
	Now   int64 // the client's clock, for *Now bits and ctime
	// Session is the caller's: a change to a file ends the file leases
	// of other sessions only (lease.go).
	Session uint64
	Project uint32 // with SetProject
}

func (r *SetAttrReq) Encode(e *wire.Enc) {
	e.U64(r.Ino)
	e.U32(r.Valid)
	e.U32(r.Mode)
	e.U32(r.Uid)
	e.U32(r.Gid)
	e.U64(r.Size)
	e.I64(r.Atime)
	e.I64(r.Mtime)
	e.I64(r.Ctime)
	e.I64(r.Now)
	e.U64(r.Session)
	e.U32(r.Project)
}

func (r *SetAttrReq) Decode(d *wire.Dec) {
	r.Ino = d.U64()
	r.Valid = d.U32()
	r.Mode = d.U32()
	r.Uid = d.U32()
	r.Gid = d.U32()
	r.Size = d.U64()
	r.Atime = d.I64()
	r.Mtime = d.I64()
	r.Ctime = d.I64()
	r.Now = d.I64()
	r.Session = optionalSession(d)
	if len(d.Rest()) >= 4 { // older requests and log entries have none
		r.Project = d.U32()
	}
}

// CreateReq makes a file, directory, symlink, device or fifo (by Mode's
// type bits). Mode already has the umask applied.
type CreateReq struct {
	Parent uint64
	Name   string
	Mode   uint32
	Rdev   uint32
	Target string // symlinks only
	Creds  Creds
	Now    int64
	// Session is the client's (for its directory leases, lease.go);
	// requests of older clients, and older log entries, have none.
	Session uint64
	// Umask is the creating process's umask. The metadata service applies
	// it to Mode unless the directory has a default ACL, which replaces
	// it (POSIX ACLs). Callers that applied it themselves send 0.
	Umask uint32
}

func (r *CreateReq) Encode(e *wire.Enc) {
	e.U64(r.Parent)
	e.String(r.Name)
	e.U32(r.Mode)
	e.U32(r.Rdev)
	e.String(r.Target)
	r.Creds.Encode(e)
	e.I64(r.Now)
	e.U64(r.Session)
	e.U32(r.Umask)
}

func (r *CreateReq) Decode(d *wire.Dec) {
	r.Parent = d.U64()
	r.Name = d.String(MaxName)
	r.Mode = d.U32()
	r.Rdev = d.U32()
	r.Target = d.String(MaxSymlink)
	r.Creds.Decode(d)
	r.Now = d.I64()
	r.Session = optionalSession(d)
	if len(d.Rest()) >= 4 { // older requests and log entries have none
		r.Umask = d.U32() & 0o777
	}
}

// LinkReq adds the name NewName in NewParent for inode Ino.
type LinkReq struct {
	Ino       uint64
	NewParent uint64
	NewName   string
	Now       int64
	Session   uint64 // as in CreateReq
}

func (r *LinkReq) Encode(e *wire.Enc) {
	e.U64(r.Ino)
	e.U64(r.NewParent)
	e.String(r.NewName)
	e.I64(r.Now)
	e.U64(r.Session)
}

func (r *LinkReq) Decode(d *wire.Dec) {
	r.Ino = d.U64()
	r.NewParent = d.U64()
	r.NewName = d.String(MaxName)
	r.Now = d.I64()
	r.Session = optionalSession(d)
}

// UnlinkReq removes a name (Dir: rmdir semantics). When the inode's last
// link goes and the client still has it open (Session != 0 and Open), the
// inode is kept as an orphan until that session releases it.
type UnlinkReq struct {
	Parent  uint64
	Name    string
	Dir     bool
	Open    bool
	Session uint64
	Now     int64
}

func (r *UnlinkReq) Encode(e *wire.Enc) {
	e.U64(r.Parent)
	e.String(r.Name)
	e.Bool(r.Dir)
	e.Bool(r.Open)
	e.U64(r.Session)
	e.I64(r.Now)
}

func (r *UnlinkReq) Decode(d *wire.Dec) {
	r.Parent = d.U64()
	r.Name = d.String(MaxName)
	r.Dir = d.Bool()
	r.Open = d.Bool()
	r.Session = d.U64()
	r.Now = d.I64()
}

// UnlinkReply says which inode lost a link, whether it is gone, and what
// the directory looks like now.
type UnlinkReply struct {
	Ino     uint64
	Removed bool
	Parent  Inode
}

func (r *UnlinkReply) Encode(e *wire.Enc) { e.U64(r.Ino); e.Bool(r.Removed); r.Parent.Encode(e) }
func (r *UnlinkReply) Decode(d *wire.Dec) {
	r.Ino = d.U64()
	r.Removed = d.Bool()
	r.Parent.Decode(d)
}

// EntryReply answers create and link: the inode, and its directory after
// the change (so clients can refresh both without asking again).
type EntryReply struct {
	Inode  Inode
	Parent Inode
}

func (r *EntryReply) Encode(e *wire.Enc) { r.Inode.Encode(e); r.Parent.Encode(e) }
func (r *EntryReply) Decode(d *wire.Dec) { r.Inode.Decode(d); r.Parent.Decode(d) }

// RenameReply gives both directories after a rename, the inode that was
// moved, and the inode a replacing rename unlinked (0 if none).
type RenameReply struct {
	OldParent Inode
	NewParent Inode
	Moved     uint64
	Replaced  uint64
}

func (r *RenameReply) Encode(e *wire.Enc) {
	r.OldParent.Encode(e)
	r.NewParent.Encode(e)
	e.U64(r.Moved)
	e.U64(r.Replaced)
}

func (r *RenameReply) Decode(d *wire.Dec) {
	r.OldParent.Decode(d)
	r.NewParent.Decode(d)
	r.Moved = d.U64()
	r.Replaced = d.U64()
}

// Rename flags, as in renameat2(2).
const (
	RenameNoReplace uint32 = 1
	RenameExchange  uint32 = 2
)

// RenameReq moves OldParent/OldName to NewParent/NewName atomically.
type RenameReq struct {
	OldParent uint64
	OldName   string
	NewParent uint64
	NewName   string
	Flags     uint32
	Open      bool // the client has the replaced inode open
	Session   uint64
	Now       int64
}

func (r *RenameReq) Encode(e *wire.Enc) {
	e.U64(r.OldParent)
	e.String(r.OldName)
	e.U64(r.NewParent)
	e.String(r.NewName)
	e.U32(r.Flags)
	e.Bool(r.Open)
	e.U64(r.Session)
	e.I64(r.Now)
}

func (r *RenameReq) Decode(d *wire.Dec) {
	r.OldParent = d.U64()
	r.OldName = d.String(MaxName)
	r.NewParent = d.U64()
	r.NewName = d.String(MaxName)
	r.Flags = d.U32()
	r.Open = d.Bool()
	r.Session = d.U64()
	r.Now = d.I64()
}

// ReadDirReq lists up to Limit entries of directory Ino whose names sort
// after After. With Plus, the reply carries each entry's inode too.
type ReadDirReq struct {
	Ino   uint64
	After string
	Limit uint32
	Plus  bool
}

func (r *ReadDirReq) Encode(e *wire.Enc) {
	e.U64(r.Ino)
	e.String(r.After)
	e.U32(r.Limit)
	e.Bool(r.Plus)
}

func (r *ReadDirReq) Decode(d *wire.Dec) {
	r.Ino = d.U64()
	r.After = d.String(MaxName)
	r.Limit = d.U32()
	r.Plus = d.Bool()
}

// ReadDirReply holds entries in name order; Inodes is parallel to Entries
// when the request had Plus. More is false at the end of the directory.
type ReadDirReply struct {
	Entries []DirEntry
	Inodes  []Inode
	More    bool
}

func (r *ReadDirReply) Encode(e *wire.Enc) {
	e.U32(uint32(len(r.Entries)))
	for i := range r.Entries {
		e.String(r.Entries[i].Name)
		e.U64(r.Entries[i].Ino)
		e.U32(r.Entries[i].Mode)
	}
	e.U32(uint32(len(r.Inodes)))
	for i := range r.Inodes {
		r.Inodes[i].Encode(e)
	}
	e.Bool(r.More)
}

func (r *ReadDirReply) Decode(d *wire.Dec) {
	n := d.Count(MaxList, 16)
	r.Entries = make([]DirEntry, n)
	for i := range r.Entries {
		r.Entries[i].Name = d.String(MaxName)
		r.Entries[i].Ino = d.U64()
		r.Entries[i].Mode = d.U32()
	}
	n = d.Count(MaxList, 64)
	r.Inodes = make([]Inode, n)
	for i := range r.Inodes {
		r.Inodes[i].Decode(d)
	}
	r.More = d.Bool()
}

// WriteInlineReq writes Data at Off into an inline file, or with Truncate
// first sets the inline content to exactly Data.
type WriteInlineReq struct {
	Ino      uint64
	Off      uint64
	Data     []byte
	Truncate bool
	Now      int64
	Session  uint64 // as in SetAttrReq
}

func (r *WriteInlineReq) Encode(e *wire.Enc) {
	e.U64(r.Ino)
	e.U64(r.Off)
	e.Bytes(r.Data)
	e.Bool(r.Truncate)
	e.I64(r.Now)
	e.U64(r.Session)
}

func (r *WriteInlineReq) Decode(d *wire.Dec) {
	r.Ino = d.U64()
	r.Off = d.U64()
	r.Data = d.Bytes(MaxInline)
	r.Truncate = d.Bool()
	r.Now = d.I64()
	r.Session = optionalSession(d)
}

// UninlineReq moves an inline file to storage targets in two steps: with
// AssignOnly the file gets chains (if it has none) and stays inline; the
// client then writes the inline bytes to those chains and sends the request
// again without AssignOnly, which drops the inline copy.
type UninlineReq struct {
	Ino        uint64
	AssignOnly bool
	Session    uint64 // as in SetAttrReq
	// EC records the stripes an erasure-coded file's inline bytes were
	// written to, with the move (ec.go).
	EC []ECStripeUpdate
}

func (r *UninlineReq) Encode(e *wire.Enc) {
	e.U64(r.Ino)
	e.Bool(r.AssignOnly)
	e.U64(r.Session)
	encodeECUpdates(e, r.EC)
}

func (r *UninlineReq) Decode(d *wire.Dec) {
	r.Ino, r.AssignOnly = d.U64(), d.Bool()
	r.Session = optionalSession(d)
	if len(d.Rest()) > 0 {
		r.EC = decodeECUpdates(d)
	}
}

// CommitWriteReq records that data up to Size was written to targets at
// time Mtime: the file grows to Size if smaller, and mtime/ctime move.
// Written is how many bytes the client wrote since its last commit (see
// Inode.Written). Inline carries the writes a client buffered to an inline
// file since its last commit, applied in order before the size: one call
// for all of them (the error ErrNotInline means the file is no longer
// inline).
// Sync makes the commit, and every change before it, durable on the
// metadata service's disk before the reply (as OpSync): an fsync in one
// call.
type CommitWriteReq struct {
	Ino     uint64
	Size    uint64
	Mtime   int64
	Written uint64
	Session uint64 // as in SetAttrReq
	Inline  []InlineWrite
	Sync    bool
	// EC commits new versions of stripes of an erasure-coded file with
	// the size, all or none of them (ec.go).
	EC []ECStripeUpdate
	// WroteTargets says the writer wrote the file's targets in the
	// layout of erasure-coding pattern WroteEC (zero: copies). If a
	// conversion gave the file another pattern since, the commit fails
	// with ErrLayoutChanged: those writes went to the replaced layout.
	// (A converted file has no writer; one cut off from the metadata
	// service past the session timeout no longer counts as one.)
	WroteTargets bool
	WroteEC      ECPattern
}

// ErrNotInline is the errno of a write into an inline file that another
// client has moved to its chains meanwhile ("wrong medium"): the writer
// reloads the inode and writes to the chunks. Unlike EAGAIN it is not
// retried as it stands.
const ErrNotInline = syscall.EMEDIUMTYPE

// InlineWrite is one write into an inline file: Data at Off.
type InlineWrite struct {
	Off  uint64
	Data []byte
}

// maxInlineWrites bounds the writes one commit carries.
const maxInlineWrites = MaxInline

func (r *CommitWriteReq) Encode(e *wire.Enc) {
	e.U64(r.Ino)
	e.U64(r.Size)
	e.I64(r.Mtime)
	e.U64(r.Written)
	e.U64(r.Session)
	e.U32(uint32(len(r.Inline)))
	for _, w := range r.Inline {
		e.U64(w.Off)
		e.Bytes(w.Data)
	}
	e.Bool(r.Sync)
	encodeECUpdates(e, r.EC)
	e.Bool(r.WroteTargets)
	r.WroteEC.Encode(e)
}

func (r *CommitWriteReq) Decode(d *wire.Dec) {
	r.Ino, r.Size, r.Mtime, r.Written = d.U64(), d.U64(), d.I64(), d.U64()
	r.Session = optionalSession(d)
	if len(d.Rest()) == 0 {
		return
	}
	n := d.Count(maxInlineWrites, 12)
	if n > 0 {
		r.Inline = make([]InlineWrite, 0, n)
	}
	total := 0
	for range n {
		w := InlineWrite{Off: d.U64(), Data: d.Bytes(MaxInline)}
		if total += len(w.Data); total > MaxInline {
			d.Fail(fmt.Errorf("inline writes of more than %d bytes", MaxInline))
			return
		}
		r.Inline = append(r.Inline, w)
	}
	if len(d.Rest()) > 0 {
		r.Sync = d.Bool()
	}
	if len(d.Rest()) > 0 {
		r.EC = decodeECUpdates(d)
	}
	if len(d.Rest()) > 0 {
		r.WroteTargets = d.Bool()
		r.WroteEC.Decode(d)
	}
}

// Xattr flags, as in setxattr(2).
const (
	XattrCreate  uint32 = 1
	XattrReplace uint32 = 2
	// XattrKillSgid: setting system.posix_acl_access also clears the
	// set-group-ID bit (the caller is not in the file's group).
	XattrKillSgid uint32 = 4
)

// XattrReq addresses one extended attribute (get, set, remove).
type XattrReq struct {
	Ino     uint64
	Name    string
	Value   []byte
	Flags   uint32
	Now     int64
	Session uint64 // as in SetAttrReq
}

func (r *XattrReq) Encode(e *wire.Enc) {
	e.U64(r.Ino)
	e.String(r.Name)
	e.Bytes(r.Value)
	e.U32(r.Flags)
	e.I64(r.Now)
	e.U64(r.Session)
}

func (r *XattrReq) Decode(d *wire.Dec) {
	r.Ino = d.U64()
	r.Name = d.String(MaxXattrName)
	r.Value = d.Bytes(MaxXattrVal)
	r.Flags = d.U32()
	r.Now = d.I64()
	r.Session = optionalSession(d)
}

// SetStripeReq sets the pattern new files in directory Ino will get.
type SetStripeReq struct {
	Ino    uint64
	Stripe Stripe
}

func (r *SetStripeReq) Encode(e *wire.Enc) {
	e.U64(r.Ino)
	r.Stripe.Encode(e)
	r.Stripe.EC.Encode(e)
}

func (r *SetStripeReq) Decode(d *wire.Dec) {
	r.Ino = d.U64()
	r.Stripe.Decode(d)
	r.Stripe.EC.DecodeOptional(d)
}

// StatFsReply is the file system's capacity, summed over targets.
type StatFsReply struct {
	TotalBytes uint64
	FreeBytes  uint64
	Inodes     uint64
}

func (r *StatFsReply) Encode(e *wire.Enc) { e.U64(r.TotalBytes); e.U64(r.FreeBytes); e.U64(r.Inodes) }
func (r *StatFsReply) Decode(d *wire.Dec) {
	r.TotalBytes = d.U64()
	r.FreeBytes = d.U64()
	r.Inodes = d.U64()
}
