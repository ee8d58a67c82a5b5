package storage

import (
	"errors"
	"fmt"
	"syscall"

	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
	"tandemfs/internal/wire"
)

// Repair of a bad block on a replicated chain. A block whose bytes match
// neither checksum (bit rot, a sector the disk garbled) is not a reason
// to take the whole target out of its chains, and a resync would not fix
// it (the chunk keeps its size and age). Instead the head, on reading
// such a block, fetches the whole chunk from a serving member, which
// verifies every block it sends, and writes it back over its own copy
// under the chunk lock, so no change can slip in between; then it serves
// the read from the repaired copy. Only if no member can be reached does
// the head fall back to treating the error as a failing disk (guardDisk);
// if every copy is bad, the reader gets EIO and the targets stay in.

// errNoGoodCopy: every member that answered holds the block bad too.
var errNoGoodCopy = errors.New("no member holds a good copy")

// readRepairing serves a read on a replicated chain, repairing the
// head's copy of a bad block from another member (see above). A
// forwarded read (another head repairing) reports a bad block of this
// copy as an answer, so this server does not fail its target for it.
func (s *Service) readRepairing(st *Target, c proto.Chain, r *proto.ChunkReadReq, e *wire.Enc) error {
	err := s.read(st, r, e)
	var bad *ChecksumError
	if !errors.As(err, &bad) {
		return err
	}
	if r.Chunk.Forwarded {
		return rpc.Errorf(syscall.EIO, "target %d: %v", r.Chunk.Target, bad)
	}
	switch rerr := s.repairChunk(st, c, &r.Chunk); {
	case rerr == nil:
		return s.read(st, r, e)
	case errors.Is(rerr, errNoGoodCopy):
		s.logf("storage: chunk %d/%d of chain %d is bad on every copy: %v", r.Chunk.Ino, r.Chunk.Index, c.ID, rerr)
		return rpc.Errorf(syscall.EIO, "chain %d: %v, and %v", c.ID, bad, rerr)
	default:
		s.logf("storage: could not repair chunk %d/%d of chain %d from another member: %v", r.Chunk.Ino, r.Chunk.Index, c.ID, rerr)
		return err // a disk error: guardDisk decides
	}
}

// repairChunk copies chunk ref over this head's copy from the first
// serving member that holds it whole.
func (s *Service) repairChunk(st *Target, c proto.Chain, ref *proto.ChunkRef) error {
	unlock := s.lockChunk(c.ID, ref.Ino, ref.Index)
	defer unlock()
	v := s.cs.view.Load()
	if v == nil {
		return fmt.Errorf("no cluster map yet")
	}
	var errs []error
	badCopies := 0
	for i, m := range c.Targets {
		if m == ref.Target || c.States[i] != proto.MemberServing {
			continue
		}
		data, err := s.fetchChunk(v, c, m, ref.Ino, ref.Index)
		if err != nil {
			if errors.Is(err, syscall.EIO) && !rpc.IsNetError(err) {
				badCopies++
			}
			errs = append(errs, fmt.Errorf("target %d: %w", m, err))
			continue
		}
		if err := s.rewriteChunk(st, ref.Ino, ref.Index, data); err != nil {
			return err
		}
		s.logf("storage: repaired chunk %d/%d of chain %d on target %d from target %d (%d bytes)",
			ref.Ino, ref.Index, c.ID, ref.Target, m, len(data))
		return nil
	}
	if len(errs) == 0 {
		return fmt.Errorf("no other serving member")
	}
	if badCopies == len(errs) {
		return fmt.Errorf("%w: %v", errNoGoodCopy, errors.Join(errs...))
	}
	return errors.Join(errs...)
}

// fetchChunk reads the whole of chunk ino/idx from member m.
func (s *Service) fetchChunk(v *chainView, c proto.Chain, m uint32, ino, idx uint64) ([]byte, error) {
	addr := v.addrs[m]
	if addr == "" {
		return nil, fmt.Errorf("no address for target %d", m)
	}
	ctx := s.cs.epochs.Context(c.ID, c.Version)
	peer := s.peer(addr)
	to := proto.Routing{Target: m, Chain: c.ID, Version: c.Version, Forwarded: true}
	var data []byte
	for off := uint64(0); off < MaxChunkSize; {
		buf := make([]byte, proto.MaxData)
		r := proto.ChunkReadReq{Chunk: proto.ChunkRef{Routing: to, Ino: ino, Index: idx}, Off: uint32(off), Len: uint32(len(buf))}
		n, err := peer.CallReadContext(ctx, proto.OpChunkRead, r.Encode, buf)
		if err != nil {
			return nil, err
		}
		data = append(data, buf[:n]...)
		if n < len(buf) {
			break
		}
		off += uint64(n)
	}
	return data, nil
}

// rewriteChunk replaces this server's copy of ino/idx with data, durably.
func (s *Service) rewriteChunk(st *Target, ino, idx uint64, data []byte) error {
	if err := st.Truncate(ino, idx, 0); err != nil {
		return err
	}
	if len(data) > 0 {
		if err := st.Write(ino, idx, 0, data); err != nil {
			return err
		}
	}
	return st.Sync(ino, []uint64{idx})
}
