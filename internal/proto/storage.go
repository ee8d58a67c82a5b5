package proto

import "tandemfs/internal/wire"

// Storage service operation codes.
const (
	OpChunkWrite uint16 = 100 + iota
	OpChunkRead
	OpChunkTruncate
	OpChunkSync
	OpChunkDelete
)

// ChunkRef names one chunk: chunk Index of file Ino on target Target.
type ChunkRef struct {
	Target uint32
	Ino    uint64
	Index  uint64
}

func (c *ChunkRef) Encode(e *wire.Enc) { e.U32(c.Target); e.U64(c.Ino); e.U64(c.Index) }
func (c *ChunkRef) Decode(d *wire.Dec) {
	c.Target = d.U32()
	c.Ino = d.U64()
	c.Index = d.U64()
}

// ChunkWriteReq writes Data at offset Off inside a chunk. ChainVersion is
// the chain version the writer routed by; stale versions are refused once
// chains have replicas.
type ChunkWriteReq struct {
	Chunk        ChunkRef
	Off          uint32
	Data         []byte
	ChainVersion uint32
	Sync         bool // fsync before replying (O_SYNC/O_DSYNC writers)
}

// Encode writes the request; the data comes last so that senders can
// pass it to the kernel without copying it (see EncodeHead).
func (r *ChunkWriteReq) Encode(e *wire.Enc) {
	r.EncodeHead(e)
	e.B = append(e.B, r.Data...)
}

// EncodeHead writes every field but the data's bytes: what remains to be
// sent after it is exactly r.Data.
func (r *ChunkWriteReq) EncodeHead(e *wire.Enc) {
	r.Chunk.Encode(e)
	e.U32(r.Off)
	e.U32(r.ChainVersion)
	e.Bool(r.Sync)
	e.U32(uint32(len(r.Data)))
}

func (r *ChunkWriteReq) Decode(d *wire.Dec) {
	r.Chunk.Decode(d)
	r.Off = d.U32()
	r.ChainVersion = d.U32()
	r.Sync = d.Bool()
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
	Target  uint32
	Ino     uint64
	Indexes []uint64
}

func (r *ChunkSyncReq) Encode(e *wire.Enc) {
	e.U32(r.Target)
	e.U64(r.Ino)
	e.U32(uint32(len(r.Indexes)))
	for _, i := range r.Indexes {
		e.U64(i)
	}
}

func (r *ChunkSyncReq) Decode(d *wire.Dec) {
	r.Target = d.U32()
	r.Ino = d.U64()
	r.Indexes = make([]uint64, d.Count(MaxList, 8))
	for i := range r.Indexes {
		r.Indexes[i] = d.U64()
	}
}

// ChunkDeleteReq removes every chunk of file Ino on Target whose index is
// at least From (From 0: the whole file).
type ChunkDeleteReq struct {
	Target uint32
	Ino    uint64
	From   uint64
}

func (r *ChunkDeleteReq) Encode(e *wire.Enc) { e.U32(r.Target); e.U64(r.Ino); e.U64(r.From) }
func (r *ChunkDeleteReq) Decode(d *wire.Dec) {
	r.Target = d.U32()
	r.Ino = d.U64()
	r.From = d.U64()
}
