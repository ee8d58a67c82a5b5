package storage

import (
	"context"
	"encoding/binary"
	"errors"
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
// than asked where the chunk ends; and OpChunkList's.
func (s *Service) handle(op uint16, d *wire.Dec, e *wire.Enc) error {
	switch op {
	case proto.OpChunkWrite:
		var r proto.ChunkWriteReq
		r.Decode(d)
		return s.serve(d, &r.Chunk.Routing, func(st *Target, c proto.Chain) error { return s.write(st, c, &r) })
	case proto.OpChunkRead:
		var r proto.ChunkReadReq
		r.Decode(d)
		return s.serveRead(d, &r,
			func(st *Target, c proto.Chain) error { return s.read(st, &r, e) },
			func(st *Target, c proto.Chain) error { return s.readRepairing(st, c, &r, e) })
	case proto.OpChunkReadSent:
		var r proto.ChunkReadReq
		r.Decode(d)
		sent := func(st *Target, c proto.Chain) error { return s.readSent(st, &r, e) }
		return s.serveRead(d, &r, sent, sent)
	case proto.OpChunkTruncate:
		var r proto.ChunkTruncateReq
		r.Decode(d)
		return s.serve(d, &r.Chunk.Routing, func(st *Target, c proto.Chain) error {
			return s.onChain(&r.Chunk.Routing, c, chunkChange(r.Chunk.Ino, r.Chunk.Index), func() func() { return s.lockChunk(c.ID, r.Chunk.Ino, r.Chunk.Index) },
				func() error { return st.Truncate(r.Chunk.Ino, r.Chunk.Index, int64(r.Size)) },
				func(ctx context.Context, p *rpc.Client, to proto.Routing) error {
					f := r
					f.Chunk.Routing = to
					return p.CallContext(ctx, proto.OpChunkTruncate, f.Encode, nil)
				})
		})
	case proto.OpChunkSync:
		var r proto.ChunkSyncReq
		r.Decode(d)
		return s.serve(d, &r.Routing, func(st *Target, c proto.Chain) error {
			return s.onChain(&r.Routing, c, change{}, noLock,
				func() error { return st.Sync(r.Ino, r.Indexes) },
				func(ctx context.Context, p *rpc.Client, to proto.Routing) error {
					f := r
					f.Routing = to
					return p.CallContext(ctx, proto.OpChunkSync, f.Encode, nil)
				})
		})
	case proto.OpChunkDelete:
		var r proto.ChunkDeleteReq
		r.Decode(d)
		return s.serve(d, &r.Routing, func(st *Target, c proto.Chain) error {
			return s.onChain(&r.Routing, c, deleteChange(r.Ino, r.From, r.To), func() func() { return s.lockIno(c.ID, r.Ino) },
				func() error { return st.DeleteRange(r.Ino, r.From, r.To) },
				func(ctx context.Context, p *rpc.Client, to proto.Routing) error {
					f := r
					f.Routing = to
					return p.CallContext(ctx, proto.OpChunkDelete, f.Encode, nil)
				})
		})
	case proto.OpScrubStart:
		if err := d.Finish(); err != nil {
			return rpc.BadRequest(err)
		}
		s.kickScrub()
		return nil
	case proto.OpChunkRepair:
		var r proto.ChunkRepairReq
		r.Decode(d)
		return s.serve(d, &r.Chunk.Routing, func(st *Target, c proto.Chain) error { return s.pushRepair(st, c, &r) })
	case proto.OpChunkList:
		var r proto.ChunkListReq
		r.Decode(d)
		return s.serve(d, &r.Routing, func(st *Target, _ proto.Chain) error {
			limit := int(min(max(r.Limit, 1), 4096))
			chunks, more, err := st.ListBucket(r.Bucket, r.Start, r.AfterIno, r.AfterIndex, limit)
			if err == nil {
				(&proto.ChunkListReply{Chunks: chunks, More: more}).Encode(e)
			}
			return err
		})
	}
	return rpc.Errorf(syscall.ENOSYS, "storage server: unknown operation %d", op)
}

// serve rejects a request that did not decode exactly (answered with
// EBADMSG), admits it (see admit) and runs fn on the store it addresses.
func (s *Service) serve(d *wire.Dec, rt *proto.Routing, fn func(*Target, proto.Chain) error) error {
	if err := d.Finish(); err != nil {
		return rpc.BadRequest(err)
	}
	st, c, err := s.admit(rt)
	if err != nil {
		return err
	}
	return fn(st, c)
}

func (s *Service) write(st *Target, c proto.Chain, r *proto.ChunkWriteReq) error {
	ref := &r.Chunk
	// A resync's copies and a member's copy of a client's write are kept
	// for durability, not for readers (reads go to the head): where large
	// writes cannot be dropped behind (dropbehind.go), their large aligned
	// pieces bypass the page cache (direct.go).
	uncached := r.Bulk || ref.Routing.Forwarded
	if !r.Bulk {
		// A client's write, taken as a head or forwarded by the head of
		// another chain: either way it takes this server's disk and CPU
		// from a resync it runs (share.go).
		s.share.pace(len(r.Data))
		s.large.note(len(r.Data))
	}
	return s.onChain(&ref.Routing, c, chunkChange(ref.Ino, ref.Index), func() func() { return s.lockChunk(c.ID, ref.Ino, ref.Index) },
		func() error {
			var err error
			switch off := int64(r.Off); {
			case r.Sums != nil:
				err = st.WriteChecked(ref.Ino, ref.Index, off, r.Data, r.Sums, uncached)
			case uncached:
				err = st.WriteUncached(ref.Ino, ref.Index, off, r.Data)
			default:
				err = st.Write(ref.Ino, ref.Index, off, r.Data)
			}
			if err != nil {
				return err
			}
			if !r.Bulk {
				st.wrote(len(r.Data)) // a resync makes its copies durable itself
			}
			if r.Sync {
				idx := [1]uint64{ref.Index}
				return st.Sync(ref.Ino, idx[:])
			}
			return nil
		},
		func(ctx context.Context, p *rpc.Client, to proto.Routing) error {
			f := *r
			f.Chunk.Routing = to
			return p.CallDataContext(ctx, proto.OpChunkWrite, f.EncodeHead, f.Data, nil)
		})
}

// serveRead serves a read request r: a client's read first leaves a
// running resync its share of the disk; then alone reads on a chain of
// one copy, and replicated on a chain of several, under the disk guard
// that fails the target over on a disk error.
func (s *Service) serveRead(d *wire.Dec, r *proto.ChunkReadReq, alone, replicated func(*Target, proto.Chain) error) error {
	return s.serve(d, &r.Chunk.Routing, func(st *Target, c proto.Chain) error {
		if !r.Chunk.Forwarded {
			s.share.pace(int(min(r.Len, proto.MaxData)))
		}
		if len(c.Targets) == 1 {
			return s.guardAlone(r.Chunk.Target, func() error { return alone(st, c) })
		}
		return s.guardDisk(r.Chunk.Target, func() error { return replicated(st, c) })
	})
}

// readSent answers OpChunkReadSent: the checksum entries, then the bytes
// as a file tail the rpc server sends with sendfile (wire.FileTail).
func (s *Service) readSent(st *Target, r *proto.ChunkReadReq, e *wire.Enc) error {
	if r.Len > proto.MaxData || r.Off%BlockSize != 0 || r.Len%BlockSize != 0 {
		return rpc.Errorf(syscall.EINVAL, "sent read of %d bytes at %d: must be whole blocks, at most %d bytes", r.Len, r.Off, proto.MaxData)
	}
	eb := getBuf(proto.MaxSums)
	defer putBuf(eb)
	fd, n, sums, err := st.OpenPiece(r.Chunk.Ino, r.Chunk.Index, int64(r.Off), int(r.Len), (*eb)[:0])
	if errors.Is(err, errNoSendfile) {
		return rpc.Errorf(syscall.EOPNOTSUPP, "%v", err)
	}
	if err != nil {
		return err
	}
	e.Bytes(sums)
	if n > 0 {
		e.Tail = &wire.FileTail{FD: fd, Off: int64(r.Off), N: n}
	}
	return nil
}

// read reads straight into the reply buffer behind the length.
func (s *Service) read(st *Target, r *proto.ChunkReadReq, e *wire.Enc) error {
	if r.Len > proto.MaxData {
		return rpc.Errorf(syscall.EINVAL, "read of %d bytes exceeds the limit of %d", r.Len, proto.MaxData)
	}
	start := len(e.B)
	e.B = slices.Grow(e.B, 4+int(r.Len))[:start+4+int(r.Len)]
	n, err := st.Read(r.Chunk.Ino, r.Chunk.Index, e.B[start+4:], int64(r.Off))
	if err != nil {
		e.B = e.B[:start]
		return err
	}
	binary.LittleEndian.PutUint32(e.B[start:], uint32(n))
	e.B = e.B[:start+4+n]
	return nil
}
