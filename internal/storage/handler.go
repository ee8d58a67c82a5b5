package storage

import (
	"encoding/binary"
	"slices"
	"syscall"

	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
	"tandemfs/internal/wire"
)

// errNoTarget answers requests for a target this server does not hold.
const errNoTarget = syscall.ENODEV

// handle serves one storage request. Replies carry no payload, except
// OpChunkRead's: the bytes read as a wire byte string (Enc.Bytes), shorter
// than asked where the chunk ends.
func (s *Service) handle(op uint16, d *wire.Dec, e *wire.Enc) error {
	switch op {
	case proto.OpChunkWrite:
		var r proto.ChunkWriteReq
		r.Decode(d)
		tg, err := s.decoded(d, r.Chunk.Target)
		if err != nil {
			return err
		}
		// ChainVersion is checked once chains replicate.
		if err := tg.Write(r.Chunk.Ino, r.Chunk.Index, int64(r.Off), r.Data); err != nil {
			return err
		}
		if r.Sync {
			idx := [1]uint64{r.Chunk.Index}
			return tg.Sync(r.Chunk.Ino, idx[:])
		}
		return nil

	case proto.OpChunkRead:
		var r proto.ChunkReadReq
		r.Decode(d)
		tg, err := s.decoded(d, r.Chunk.Target)
		if err != nil {
			return err
		}
		if r.Len > proto.MaxData {
			return rpc.Errorf(syscall.EINVAL, "read of %d bytes exceeds the limit of %d", r.Len, proto.MaxData)
		}
		// Read straight into the reply buffer behind the length.
		start := len(e.B)
		e.B = slices.Grow(e.B, 4+int(r.Len))[:start+4+int(r.Len)]
		n, err := tg.Read(r.Chunk.Ino, r.Chunk.Index, e.B[start+4:], int64(r.Off))
		if err != nil {
			e.B = e.B[:start]
			return err
		}
		binary.LittleEndian.PutUint32(e.B[start:], uint32(n))
		e.B = e.B[:start+4+n]
		return nil

	case proto.OpChunkTruncate:
		var r proto.ChunkTruncateReq
		r.Decode(d)
		tg, err := s.decoded(d, r.Chunk.Target)
		if err != nil {
			return err
		}
		return tg.Truncate(r.Chunk.Ino, r.Chunk.Index, int64(r.Size))

	case proto.OpChunkSync:
		var r proto.ChunkSyncReq
		r.Decode(d)
		tg, err := s.decoded(d, r.Target)
		if err != nil {
			return err
		}
		return tg.Sync(r.Ino, r.Indexes)

	case proto.OpChunkDelete:
		var r proto.ChunkDeleteReq
		r.Decode(d)
		tg, err := s.decoded(d, r.Target)
		if err != nil {
			return err
		}
		return tg.Delete(r.Ino, r.From)
	}
	return rpc.Errorf(syscall.ENOSYS, "storage server: unknown operation %d", op)
}

// decoded rejects a request that did not decode exactly (answered with
// EBADMSG) and otherwise looks up its target.
func (s *Service) decoded(d *wire.Dec, target uint32) (*Target, error) {
	if err := d.Finish(); err != nil {
		return nil, rpc.BadRequest(err)
	}
	return s.target(target)
}
