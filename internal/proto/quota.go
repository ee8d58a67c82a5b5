package proto

import (
	"fmt"

	"tandemfs/internal/wire"
)

// Quotas, as XFS, Lustre and BeeGFS give them: for a user, a group or a
// project (a directory tree), a limit on the bytes of its files (blocks)
// and one on their number (inodes), each soft (exceeded for a grace
// period at most) and hard. Id 0 (root, its group, no project) is never
// limited, as on XFS.

// QuotaKind says whose quota a record is.
type QuotaKind uint8

const (
	QuotaUser QuotaKind = iota
	QuotaGroup
	QuotaProject
	quotaKinds
)

// QuotaKinds are the kinds, in the order reports list them.
var QuotaKinds = []QuotaKind{QuotaUser, QuotaGroup, QuotaProject}

func (k QuotaKind) String() string {
	switch k {
	case QuotaUser:
		return "user"
	case QuotaGroup:
		return "group"
	case QuotaProject:
		return "project"
	}
	return fmt.Sprintf("kind %d", uint8(k))
}

// QuotaLimits are one quota's limits; 0 is no limit.
type QuotaLimits struct {
	BlockSoft, BlockHard uint64 // bytes
	InodeSoft, InodeHard uint64 // files, directories, links, ...
}

// QuotaRecord is one user's, group's or project's usage and limits.
// The grace ends are set when usage first goes over a soft limit and
// cleared when it comes back under it (unix nanoseconds, 0: none).
type QuotaRecord struct {
	Kind   QuotaKind
	ID     uint32
	Bytes  uint64
	Inodes uint64
	QuotaLimits
	BlockGraceEnd, InodeGraceEnd int64
}

func (r *QuotaRecord) Encode(e *wire.Enc) {
	e.U8(uint8(r.Kind))
	e.U32(r.ID)
	e.U64(r.Bytes)
	e.U64(r.Inodes)
	e.U64(r.BlockSoft)
	e.U64(r.BlockHard)
	e.U64(r.InodeSoft)
	e.U64(r.InodeHard)
	e.I64(r.BlockGraceEnd)
	e.I64(r.InodeGraceEnd)
}

func (r *QuotaRecord) Decode(d *wire.Dec) {
	r.Kind = QuotaKind(d.U8())
	r.ID = d.U32()
	r.Bytes, r.Inodes = d.U64(), d.U64()
	r.BlockSoft, r.BlockHard = d.U64(), d.U64()
	r.InodeSoft, r.InodeHard = d.U64(), d.U64()
	r.BlockGraceEnd, r.InodeGraceEnd = d.I64(), d.I64()
	if r.Kind >= quotaKinds {
		d.Fail(fmt.Errorf("quota kind %d unknown", r.Kind))
	}
}

// quotaRecordSize is the encoded size of a QuotaRecord.
const quotaRecordSize = 1 + 4 + 8*8

// OverBlocks reports whether no more bytes may be written to files charged
// to r at time now: at or over the hard limit, or over the soft limit past
// the grace period.
func (r *QuotaRecord) OverBlocks(now int64) bool {
	if r.ID == 0 {
		return false
	}
	return (r.BlockHard > 0 && r.Bytes >= r.BlockHard) ||
		(r.BlockSoft > 0 && r.Bytes > r.BlockSoft && r.BlockGraceEnd != 0 && now >= r.BlockGraceEnd)
}

// RefusesInodes reports whether n more inodes charged to r would exceed
// its limits at time now.
func (r *QuotaRecord) RefusesInodes(n uint64, now int64) bool {
	return r.ID != 0 && n != 0 && exceeds(r.Inodes+n, r.InodeSoft, r.InodeHard, r.InodeGraceEnd, now)
}

// RefusesBytes reports whether n more bytes charged to r would exceed its
// limits at time now.
func (r *QuotaRecord) RefusesBytes(n uint64, now int64) bool {
	return r.ID != 0 && n != 0 && exceeds(r.Bytes+n, r.BlockSoft, r.BlockHard, r.BlockGraceEnd, now)
}

// exceeds reports whether usage after a change breaks the limits soft and
// hard (0: none) at time now: above the hard limit, or above the soft one
// once its grace period, ending at graceEnd, is over.
func exceeds(after, soft, hard uint64, graceEnd, now int64) bool {
	return (hard > 0 && after > hard) || (soft > 0 && after > soft && graceEnd != 0 && now >= graceEnd)
}

// QuotaID names one quota: a user's, a group's or a project's.
type QuotaID struct {
	Kind QuotaKind
	ID   uint32
}

// QuotasOf are the quotas a file owned by uid and gid, in project (0:
// none), is charged to.
func QuotasOf(uid, gid, project uint32) []QuotaID {
	ids := []QuotaID{{QuotaUser, uid}, {QuotaGroup, gid}}
	if project != 0 {
		ids = append(ids, QuotaID{QuotaProject, project})
	}
	return ids
}

// QuotaGrace is how long usage may stay over a soft limit, per kind
// (nanoseconds).
type QuotaGrace struct {
	Block, Inode int64
}

// DefaultQuotaGrace is the grace period a kind has until one is set: 7
// days, as XFS's and ext4's.
const DefaultQuotaGrace = int64(7 * 24 * 3600 * 1e9)

// QuotaSetReq sets the limits of one quota (those Set names) and, if
// nonzero, the grace periods of its kind.
type QuotaSetReq struct {
	Kind QuotaKind
	ID   uint32
	Set  uint8 // QuotaSet* bits: which limits to change
	QuotaLimits
	Grace QuotaGrace // 0: unchanged
}

// QuotaSetReq.Set bits.
const (
	QuotaSetBlockSoft uint8 = 1 << iota
	QuotaSetBlockHard
	QuotaSetInodeSoft
	QuotaSetInodeHard
)

func (r *QuotaSetReq) Encode(e *wire.Enc) {
	e.U8(uint8(r.Kind))
	e.U32(r.ID)
	e.U8(r.Set)
	e.U64(r.BlockSoft)
	e.U64(r.BlockHard)
	e.U64(r.InodeSoft)
	e.U64(r.InodeHard)
	e.I64(r.Grace.Block)
	e.I64(r.Grace.Inode)
}

func (r *QuotaSetReq) Decode(d *wire.Dec) {
	r.Kind = QuotaKind(d.U8())
	r.ID = d.U32()
	r.Set = d.U8()
	r.BlockSoft, r.BlockHard = d.U64(), d.U64()
	r.InodeSoft, r.InodeHard = d.U64(), d.U64()
	r.Grace.Block, r.Grace.Inode = d.I64(), d.I64()
	if r.Kind >= quotaKinds {
		d.Fail(fmt.Errorf("quota kind %d unknown", r.Kind))
	}
}

// QuotaListReq asks for the quotas of one kind and id (All false), or
// of every id (All true), optionally only those with a limit (Limited).
// A listing comes in pages of at most QuotaPage records: the next page
// starts after the last record of the one before (After, a key made by
// QuotaRecord.Key); the reply says whether there is More.
type QuotaListReq struct {
	Kind    QuotaKind
	ID      uint32
	All     bool
	AnyKind bool // every kind (with All)
	Limited bool
	After   []byte // with All: list past this key (empty: from the start)
}

// QuotaPage is the most records one QuotaListReply carries: 65,536
// records of 69 bytes fit a frame with room to spare.
const QuotaPage = 1 << 16

func (r *QuotaListReq) Encode(e *wire.Enc) {
	e.U8(uint8(r.Kind))
	e.U32(r.ID)
	e.Bool(r.All)
	e.Bool(r.AnyKind)
	e.Bool(r.Limited)
	e.Bytes(r.After)
}

func (r *QuotaListReq) Decode(d *wire.Dec) {
	r.Kind = QuotaKind(d.U8())
	r.ID = d.U32()
	r.All, r.AnyKind, r.Limited = d.Bool(), d.Bool(), d.Bool()
	r.After = append([]byte(nil), d.Bytes(16)...)
}

// Key is where r sorts in a listing (QuotaListReq.After).
func (r *QuotaRecord) Key() []byte {
	return []byte{byte(r.Kind), byte(r.ID >> 24), byte(r.ID >> 16), byte(r.ID >> 8), byte(r.ID)}
}

// QuotaListReply is the records asked for, the grace periods of each
// kind, the leader's clock when it answered (for grace periods), and
// whether the listing goes on past this page.
type QuotaListReply struct {
	Records []QuotaRecord
	Grace   [3]QuotaGrace
	Now     int64
	More    bool
}

func (r *QuotaListReply) Encode(e *wire.Enc) {
	e.U32(uint32(len(r.Records)))
	for i := range r.Records {
		r.Records[i].Encode(e)
	}
	for _, g := range r.Grace {
		e.I64(g.Block)
		e.I64(g.Inode)
	}
	e.I64(r.Now)
	e.Bool(r.More)
}

func (r *QuotaListReply) Decode(d *wire.Dec) {
	r.Records = make([]QuotaRecord, d.Count(QuotaPage, quotaRecordSize))
	for i := range r.Records {
		r.Records[i].Decode(d)
	}
	for i := range r.Grace {
		r.Grace[i].Block, r.Grace[i].Inode = d.I64(), d.I64()
	}
	r.Now = d.I64()
	r.More = d.Bool()
}

// ListQuotas runs a listing page by page with call, which sends one
// request and decodes its reply, and returns every record in one reply.
func ListQuotas(r QuotaListReq, call func(*QuotaListReq, *QuotaListReply) error) (*QuotaListReply, error) {
	var all QuotaListReply
	for {
		var page QuotaListReply
		if err := call(&r, &page); err != nil {
			return nil, err
		}
		all.Records = append(all.Records, page.Records...)
		all.Grace, all.Now = page.Grace, page.Now
		if !page.More || len(page.Records) == 0 {
			return &all, nil
		}
		r.After = page.Records[len(page.Records)-1].Key()
	}
}
