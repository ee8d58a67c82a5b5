package proto

import (
	"fmt"

	"tandemfs/internal/wire"
)

// Storage service operation codes.
const (
	OpChunkWrite uint16 = 100 + iota
	OpChunkRead
	OpChunkTruncate
	OpChunkSync
	OpChunkDelete
	OpChunkList
	OpChunkRepair
	// OpScrubStart (no body) asks a storage server to start a scrub now.
	OpScrubStart
	// OpChunkReadSent reads like OpChunkRead (ChunkReadReq, Off at a
	// block boundary), but the server sends the bytes from the chunk's
	// file without reading them (sendfile) and the reader checks them:
	// the reply is the checksum entries of their blocks as a wire byte
	// string, then the bytes to the end of the frame.
	OpChunkReadSent
)

// Routing says which copy of which chain a request is for. A client sends
// every request to the head of the chain (its first serving member), which
// applies it and forwards it, Forwarded set, to the chain's other members.
// Version is the chain version the sender routed by: a target refuses
// requests whose version differs from the one it knows (the first layer of
// fencing), and a sender that gets ESTALE reloads the cluster map.
type Routing struct {
	Target    uint32 // the target the request is addressed to
	Chain     uint32
	Version   uint32
	Forwarded bool // from the chain's head: apply here only
}

func (r *Routing) Encode(e *wire.Enc) {
	e.U32(r.Target)
	e.U32(r.Chain)
	e.U32(r.Version)
	e.Bool(r.Forwarded)
}

func (r *Routing) Decode(d *wire.Dec) {
	r.Target = d.U32()
	r.Chain = d.U32()
	r.Version = d.U32()
	r.Forwarded = d.Bool()
}

// ChunkRef names one chunk: chunk Index of file Ino, in the copy of its
// chain that Routing addresses.
type ChunkRef struct {
	Routing
	Ino   uint64
	Index uint64
}

func (c *ChunkRef) Encode(e *wire.Enc) { c.Routing.Encode(e); e.U64(c.Ino); e.U64(c.Index) }
func (c *ChunkRef) Decode(d *wire.Dec) {
	c.Routing.Decode(d)
	c.Ino = d.U64()
	c.Index = d.U64()
}

// ChunkWriteReq writes Data at offset Off inside a chunk.
type ChunkWriteReq struct {
	Chunk ChunkRef
	Off   uint32
	Data  []byte
	Sync  bool // fsync before replying (O_SYNC/O_DSYNC writers)
	// Bulk marks a copy of whole chunks (a resync): the target may write
	// it past its page cache (O_DIRECT), since no one reads it soon.
	Bulk bool
	// Sums, if set, are the sender's checksum entries of the blocks Data
	// covers (8 bytes each, storage's sidecar format; Off a block
	// boundary): the target refuses data that matches none of them. A
	// resync sends them with chunk data it did not read itself.
	Sums []byte
}

// MaxSums bounds ChunkWriteReq.Sums: an entry for every block of MaxData.
const MaxSums = MaxData / 4096 * 8

// Flags of a ChunkWriteReq on the wire (one byte; a plain Sync bool
// before Bulk existed).
const (
	writeSync uint8 = 1 << iota
	writeBulk
	writeSums // Sums (wire bytes) follow the flags
)

// Encode writes the request; the data comes last so that senders can
// pass it to the kernel without copying it (see EncodeHead).
func (r *ChunkWriteReq) Encode(e *wire.Enc) {
	r.EncodeHead(e)
	e.B = append(e.B, r.Data...)
}

// EncodeHead writes every field but the data's bytes: what remains to be
// sent after it is exactly r.Data.
func (r *ChunkWriteReq) EncodeHead(e *wire.Enc) { r.EncodeHeadLen(e, len(r.Data)) }

// EncodeHeadLen is EncodeHead for n bytes of data that the sender takes
// from elsewhere than r.Data (a file it sends with sendfile).
func (r *ChunkWriteReq) EncodeHeadLen(e *wire.Enc, n int) {
	r.Chunk.Encode(e)
	e.U32(r.Off)
	var flags uint8
	if r.Sync {
		flags |= writeSync
	}
	if r.Bulk {
		flags |= writeBulk
	}
	if r.Sums != nil {
		flags |= writeSums
	}
	e.U8(flags)
	if r.Sums != nil {
		e.Bytes(r.Sums)
	}
	e.U32(uint32(n))
}

func (r *ChunkWriteReq) Decode(d *wire.Dec) {
	r.Chunk.Decode(d)
	r.Off = d.U32()
	flags := d.U8()
	if flags&^(writeSync|writeBulk|writeSums) != 0 {
		d.Fail(fmt.Errorf("chunk write: unknown flags %#x", flags))
	}
	r.Sync, r.Bulk = flags&writeSync != 0, flags&writeBulk != 0
	if flags&writeSums != 0 {
		r.Sums = d.Bytes(MaxSums)
	}
	r.Data = d.Bytes(MaxData)
}

// ChunkReadReq reads up to Len bytes at Off inside a chunk. The reply's data
// is shorter when the chunk ends earlier (the rest of the file range is a
// hole, which reads as zeros).
type ChunkReadReq struct {
	Chunk ChunkRef
	Off   uint32
	Len   uint32
}

func (r *ChunkReadReq) Encode(e *wire.Enc) { r.Chunk.Encode(e); e.U32(r.Off); e.U32(r.Len) }
func (r *ChunkReadReq) Decode(d *wire.Dec) {
	r.Chunk.Decode(d)
	r.Off = d.U32()
	r.Len = d.U32()
}

// ChunkTruncateReq cuts or extends a chunk to Size bytes.
type ChunkTruncateReq struct {
	Chunk ChunkRef
	Size  uint32
}

func (r *ChunkTruncateReq) Encode(e *wire.Enc) { r.Chunk.Encode(e); e.U32(r.Size) }
func (r *ChunkTruncateReq) Decode(d *wire.Dec) { r.Chunk.Decode(d); r.Size = d.U32() }

// ChunkSyncReq makes the listed chunks of one file durable on a target.
// No Indexes means every chunk of the file on that target.
type ChunkSyncReq struct {
	Routing
	Ino     uint64
	Indexes []uint64
}

func (r *ChunkSyncReq) Encode(e *wire.Enc) {
	r.Routing.Encode(e)
	e.U64(r.Ino)
	e.U64s(r.Indexes)
}

func (r *ChunkSyncReq) Decode(d *wire.Dec) {
	r.Routing.Decode(d)
	r.Ino = d.U64()
	r.Indexes = d.U64s(MaxList)
}

// ChunkDeleteReq removes every chunk of file Ino whose index is in
// [From, To) (To 0: no upper bound; From 0, To 0: the whole file).
type ChunkDeleteReq struct {
	Routing
	Ino  uint64
	From uint64
	To   uint64
}

func (r *ChunkDeleteReq) Encode(e *wire.Enc) {
	r.Routing.Encode(e)
	e.U64(r.Ino)
	e.U64(r.From)
	e.U64(r.To)
}

func (r *ChunkDeleteReq) Decode(d *wire.Dec) {
	r.Routing.Decode(d)
	r.Ino = d.U64()
	r.From = d.U64()
	r.To = d.U64()
}

// ChunkListReq lists the chunks a target holds for a chain, one bucket
// (Ino mod 256) at a time, in (Ino, Index) order after (AfterIno,
// AfterIndex); Start says to list the bucket from its beginning. The head
// of a chain uses it to resync a member.
type ChunkListReq struct {
	Routing
	Bucket     uint8
	Start      bool
	AfterIno   uint64
	AfterIndex uint64
	Limit      uint32
}

func (r *ChunkListReq) Encode(e *wire.Enc) {
	r.Routing.Encode(e)
	e.U8(r.Bucket)
	e.Bool(r.Start)
	e.U64(r.AfterIno)
	e.U64(r.AfterIndex)
	e.U32(r.Limit)
}

func (r *ChunkListReq) Decode(d *wire.Dec) {
	r.Routing.Decode(d)
	r.Bucket = d.U8()
	r.Start = d.Bool()
	r.AfterIno = d.U64()
	r.AfterIndex = d.U64()
	r.Limit = d.U32()
}

// ChunkStat describes one stored chunk.
type ChunkStat struct {
	Ino, Index uint64
	Size       uint64
	MtimeMs    int64
}

// ChunkListReply is one page of a ChunkListReq; More is set when the
// bucket holds further chunks.
type ChunkListReply struct {
	Chunks []ChunkStat
	More   bool
}

func (r *ChunkListReply) Encode(e *wire.Enc) {
	e.U32(uint32(len(r.Chunks)))
	for _, c := range r.Chunks {
		e.U64(c.Ino)
		e.U64(c.Index)
		e.U64(c.Size)
		e.I64(c.MtimeMs)
	}
	e.Bool(r.More)
}

func (r *ChunkListReply) Decode(d *wire.Dec) {
	r.Chunks = make([]ChunkStat, d.Count(MaxList, 32))
	for i := range r.Chunks {
		c := &r.Chunks[i]
		c.Ino, c.Index, c.Size, c.MtimeMs = d.U64(), d.U64(), d.U64(), d.I64()
	}
	r.More = d.Bool()
}

// ChunkRepairReq asks the head of a chain (Chunk is addressed to it) to
// push its copy of the listed blocks of a chunk to Member, a serving
// follower whose scrub found those blocks bad. The head does it under the
// chunk's lock, so the push is ordered with every change to the chunk.
type ChunkRepairReq struct {
	Chunk  ChunkRef
	Member uint32
	Blocks []uint64 // block numbers within the chunk (offset / 4096)
}

// MaxRepairBlocks bounds the blocks of one repair request (a whole 1 MiB
// chunk is 256 blocks; larger chunks are repaired in several requests).
const MaxRepairBlocks = 4096

func (r *ChunkRepairReq) Encode(e *wire.Enc) {
	r.Chunk.Encode(e)
	e.U32(r.Member)
	e.U64s(r.Blocks)
}

func (r *ChunkRepairReq) Decode(d *wire.Dec) {
	r.Chunk.Decode(d)
	r.Member = d.U32()
	r.Blocks = d.U64s(MaxRepairBlocks)
}
