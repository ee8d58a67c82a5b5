// Package proto defines the messages TandemFS services exchange: the
// operation codes, the request and reply structures, and their binary
// encoding (package wire). Metadata operations go to the metadata service,
// chunk operations to storage services.
package proto

import "tandemfs/internal/wire"

// Limits enforced by decoders, so a forged length is refused early.
const (
	MaxName      = 255      // bytes in one directory entry name (NAME_MAX)
	MaxSymlink   = 4095     // bytes in a symlink target (PATH_MAX-1)
	MaxXattrName = 255      // XATTR_NAME_MAX
	MaxXattrVal  = 64 << 10 // XATTR_SIZE_MAX
	MaxInline    = 64 << 10 // largest configurable inline file
	MaxData      = 4 << 20  // bytes in one chunk read or write
	MaxList      = 1 << 16  // entries in one list reply
	MaxChains    = 4096     // chains in one layout
)

// RootIno is the inode number of the root directory (FUSE's root node id).
const RootIno = 1

// Attr is what stat(2) shows of an inode.
type Attr struct {
	Ino   uint64
	Mode  uint32 // file type bits (S_IFMT) and permissions
	Nlink uint32
	Uid   uint32
	Gid   uint32
	Rdev  uint32
	Size  uint64
	Atime int64 // nanoseconds since the Unix epoch
	Mtime int64
	Ctime int64
}

func (a *Attr) Encode(e *wire.Enc) {
	e.U64(a.Ino)
	e.U32(a.Mode)
	e.U32(a.Nlink)
	e.U32(a.Uid)
	e.U32(a.Gid)
	e.U32(a.Rdev)
	e.U64(a.Size)
	e.I64(a.Atime)
	e.I64(a.Mtime)
	e.I64(a.Ctime)
}

func (a *Attr) Decode(d *wire.Dec) {
	a.Ino = d.U64()
	a.Mode = d.U32()
	a.Nlink = d.U32()
	a.Uid = d.U32()
	a.Gid = d.U32()
	a.Rdev = d.U32()
	a.Size = d.U64()
	a.Atime = d.I64()
	a.Mtime = d.I64()
	a.Ctime = d.I64()
}

// Stripe is a striping pattern: files are cut into ChunkSize pieces and
// chunk i is stored on the i mod Count'th chain of the file's layout.
type Stripe struct {
	ChunkSize uint32
	Count     uint32
	// Replicas is the number of targets per chain (1 for now).
	Replicas uint32
	// EC, when set, erasure codes files instead of copying them
	// (internal/ec): stripes of EC.Data cells of ChunkSize and EC.Parity
	// parity shards, shard j of every stripe on the file's j'th chain, a
	// chain of one target, each in a failure domain of its own. Count and
	// Replicas do not apply to such a file.
	EC ECPattern
}

// ECPattern is an erasure-coding scheme and the failure domain its shards
// are spread over. The zero value is no erasure coding.
type ECPattern struct {
	Data   uint8 // K
	Parity uint8 // M
	Domain uint8 // DomainServer or DomainRack
}

// Failure domains of erasure-coded shards.
const (
	DomainServer uint8 = 0
	DomainRack   uint8 = 1
)

// On reports whether the pattern erasure codes.
func (p ECPattern) On() bool { return p.Data > 0 }

// Shards is K+M.
func (p ECPattern) Shards() int { return int(p.Data) + int(p.Parity) }

// Encode and Decode are kept apart from Stripe's: the pattern follows
// the older fields at the end of the messages and records that carry it.
func (p *ECPattern) Encode(e *wire.Enc) { e.U8(p.Data); e.U8(p.Parity); e.U8(p.Domain) }
func (p *ECPattern) Decode(d *wire.Dec) { p.Data, p.Parity, p.Domain = d.U8(), d.U8(), d.U8() }

// DecodeOptional decodes a pattern if the message has one (messages and
// log entries written before erasure coding end before it).
func (p *ECPattern) DecodeOptional(d *wire.Dec) {
	if len(d.Rest()) >= 3 {
		p.Decode(d)
	}
}

func (s *Stripe) Encode(e *wire.Enc) {
	e.U32(s.ChunkSize)
	e.U32(s.Count)
	e.U32(s.Replicas)
}

func (s *Stripe) Decode(d *wire.Dec) {
	s.ChunkSize = d.U32()
	s.Count = d.U32()
	s.Replicas = d.U32()
}

// Inode is an inode record as clients see it.
type Inode struct {
	Attr
	// Stripe is the pattern of a file's layout, or the pattern a directory
	// gives new files (zero: inherit the parent's).
	Stripe Stripe
	// Chains are the chains holding a regular file's chunks.
	Chains []uint32
	// Inline is true while a regular file's bytes live in the inode
	// (InlineData) instead of on storage targets.
	Inline     bool
	InlineData []byte
	// Target is a symlink's target.
	Target string
	// Version is the metadata log index of the inode's last change: a
	// client cache holding an older version is out of date (see WatchReq).
	Version uint64
	// Written bounds the bytes of a regular file's data on its chains:
	// every byte written counts (a rewrite again), never more than the
	// size, and a truncate below it lowers it. Holes never count, so a
	// sparse file shows the blocks it uses (Blocks).
	Written uint64
	// Project is the project (a directory tree, as XFS project quotas)
	// the inode is charged to; 0 is none. New entries take their
	// directory's.
	Project uint32
}

// UsedBytes is what the inode is charged for in quotas: a regular file's
// bytes as Blocks counts them, unrounded; nothing for other types.
func (n *Inode) UsedBytes() uint64 {
	if n.Mode&0o170000 != 0o100000 {
		return 0
	}
	if !n.Inline && n.Written < n.Size {
		return n.Written
	}
	return n.Size
}

// Blocks is the file's disk usage in 512-byte blocks, as stat reports
// it: a file on targets counts the bytes written (Written), one inline
// in the metadata its size.
func (n *Inode) Blocks() uint64 {
	used := n.Size
	if !n.Inline && n.Mode&0o170000 == 0o100000 && n.Written < used {
		used = n.Written
	}
	return (used + 511) / 512
}

func (n *Inode) Encode(e *wire.Enc) {
	n.EncodeBody(e)
	e.U64(n.Version)
	e.U64(n.Written)
	e.U32(n.Project)
	n.Stripe.EC.Encode(e)
}

func (n *Inode) Decode(d *wire.Dec) {
	n.DecodeBody(d)
	n.Version = d.U64()
	n.Written = d.U64()
	n.Project = d.U32()
	n.Stripe.EC.Decode(d)
}

// EncodeBody encodes every field but Version, Written, Project and the
// erasure-coding pattern (which the metadata store keeps after the body
// in its inode records).
func (n *Inode) EncodeBody(e *wire.Enc) {
	n.Attr.Encode(e)
	n.Stripe.Encode(e)
	e.U32s(n.Chains)
	e.Bool(n.Inline)
	e.Bytes(n.InlineData)
	e.String(n.Target)
}

// DecodeBody decodes what EncodeBody encoded.
func (n *Inode) DecodeBody(d *wire.Dec) {
	n.Attr.Decode(d)
	n.Stripe.Decode(d)
	n.Chains = d.U32s(MaxChains)
	n.Inline = d.Bool()
	n.InlineData = append([]byte(nil), d.Bytes(MaxInline)...)
	n.Target = d.String(MaxSymlink)
}

// DirEntry is one name in a directory listing.
type DirEntry struct {
	Name string
	Ino  uint64
	Mode uint32 // file type bits only
}
