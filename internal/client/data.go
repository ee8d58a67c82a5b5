package client

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"time"

	"tandemfs/internal/chunksum"
	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
)

// piece is the part of an I/O that falls into one chunk.
type piece struct {
	chain uint32
	index uint64 // chunk index within the file
	off   uint32 // offset within the chunk
	pos   uint64 // offset of the piece within the caller's buffer
	n     uint32
}

// splitRange cuts [off, off+n) of a file into per-chunk pieces. Chunk i
// lives on chain i mod len(Chains).
func splitRange(in *proto.Inode, off, n uint64) []piece {
	cs := uint64(in.Stripe.ChunkSize)
	nc := uint64(len(in.Chains))
	var out []piece
	for pos := uint64(0); pos < n; {
		idx := (off + pos) / cs
		within := (off + pos) % cs
		take := min(cs-within, n-pos)
		out = append(out, piece{chain: in.Chains[idx%nc], index: idx, off: uint32(within), pos: pos, n: uint32(take)})
		pos += take
	}
	return out
}

// parallel runs fn for each piece, concurrently when there are several,
// and returns the first error.
func parallel(ps []piece, fn func(p piece) error) error {
	if len(ps) == 1 {
		return fn(ps[0])
	}
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	for i := range ps {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			errs[i] = fn(ps[i])
		}(i)
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (c *Client) checkLayout(in *proto.Inode) error {
	if len(in.Chains) == 0 || in.Stripe.ChunkSize == 0 {
		return rpc.Errorf(syscall.EIO, "file %d has no layout", in.Ino)
	}
	return nil
}

// storageCall sends one chunk request to the head of a chain, retrying
// (with a fresh cluster map) while the target is unreachable.
func (c *Client) storageCall(chain uint32, call func(ctx context.Context, rt proto.Routing, s *rpc.Client) error) error {
	err := c.retry("storage", func() error {
		rt, s, err := c.route(chain)
		if err != nil {
			c.refreshMap()
			return &rpc.NetError{Addr: "chain", Err: err}
		}
		slow := time.AfterFunc(time.Second, func() { c.slowCalls.Add(1) })
		err = call(c.epochs.Context(rt.Chain, rt.Version), rt, s)
		if !slow.Stop() {
			c.slowCalls.Add(-1)
		}
		if rpc.IsNetError(err) || errors.Is(err, syscall.ESTALE) || errors.Is(err, syscall.EAGAIN) {
			// The chain changed (failover, resync) or is changing:
			// route by a fresh map.
			c.refreshMap()
		}
		return err
	})
	if err != nil {
		// Applications see only an errno: say here what went wrong.
		c.cfg.Logf("storage: chain %d: %v", chain, err)
	}
	return err
}

func (c *Client) writePieces(in *proto.Inode, off uint64, data []byte, sync bool) error {
	return c.writePieceList(in, splitRange(in, off, uint64(len(data))), data, sync)
}

// writePieceList writes pieces (of data, split from its offset) to their
// chunks.
func (c *Client) writePieceList(in *proto.Inode, pieces []piece, data []byte, sync bool) error {
	if err := c.checkLayout(in); err != nil {
		return err
	}
	return parallel(pieces, func(p piece) error {
		return c.storageCall(p.chain, func(ctx context.Context, rt proto.Routing, s *rpc.Client) error {
			r := proto.ChunkWriteReq{
				Chunk: proto.ChunkRef{Routing: rt, Ino: in.Ino, Index: p.index},
				Off:   p.off, Data: data[p.pos : p.pos+uint64(p.n)], Sync: sync,
			}
			return s.CallDataContext(ctx, proto.OpChunkWrite, r.EncodeHead, r.Data, nil)
		})
	})
}

// readPieces fills buf from the file's chunks; missing chunks and ranges
// past a chunk's end are holes and read as zeros.
// With a disk cache (diskcache.go) it answers from there when it may, and
// keeps what the servers sent.
func (c *Client) readPieces(in *proto.Inode, off uint64, buf []byte) error {
	key, cached := c.diskKey(in)
	if cached && c.disk.Get(key, off, buf) {
		return nil
	}
	err := c.readPiecesOf(in, off, buf)
	if errnoOf(err) == proto.ErrLayoutChanged {
		return c.readConverted(in, off, buf)
	}
	if err == nil && cached {
		if again, ok := c.diskKey(in); ok && again == key {
			c.disk.Put(key, off, buf)
		}
	}
	return err
}

// readPiecesOf is readPieces with in's layout only.
func (c *Client) readPiecesOf(in *proto.Inode, off uint64, buf []byte) error {
	if err := c.checkLayout(in); err != nil {
		return err
	}
	if in.Stripe.EC.On() {
		return c.readEC(in, off, buf)
	}
	return parallel(splitRange(in, off, uint64(len(buf))), func(p piece) error {
		dst := buf[p.pos : p.pos+uint64(p.n)]
		return c.storageCall(p.chain, func(ctx context.Context, rt proto.Routing, s *rpc.Client) error {
			got, err := readChunk(ctx, rt, s, in.Ino, p.index, p.off, dst)
			if err == nil {
				clear(dst[got:]) // past the chunk's end: a hole
			}
			return err
		})
	})
}

// readChunk reads dst from chunk index of file ino at off, with
// OpChunkReadSent where it may; it returns the bytes the chunk had there.
func readChunk(ctx context.Context, rt proto.Routing, s *rpc.Client, ino, index uint64, off uint32, dst []byte) (int, error) {
	r := proto.ChunkReadReq{Chunk: proto.ChunkRef{Routing: rt, Ino: ino, Index: index}, Off: off, Len: uint32(len(dst))}
	got, err := 0, errNotSent
	if sentReadable(piece{off: off, n: uint32(len(dst))}) {
		got, err = readSent(ctx, s, &r, dst)
	}
	if err == errNotSent {
		got, err = s.CallReadContext(ctx, proto.OpChunkRead, r.Encode, dst)
	}
	return got, err
}

// Large reads of whole blocks ask the server to send the bytes from the
// chunk's file with sendfile, together with the checksum entries of
// their blocks, and check them here (OpChunkReadSent): the server then
// neither copies the bytes out of its page cache nor into its socket,
// which was most of its CPU in a sequential read (docs/benchmarks.md).
// Where the bytes do not match, a write changed them while they were
// sent, or they were damaged on the disk or the way: the piece is read
// again with OpChunkRead, which the server checks and, in a chain of
// several copies, repairs from another copy.
const sentReadMin = 64 << 10

// errNotSent says a piece is to be read with OpChunkRead instead.
var errNotSent = errors.New("read the piece with OpChunkRead")

// sentReadable reports whether piece p may be read with OpChunkReadSent.
func sentReadable(p piece) bool {
	return p.n >= sentReadMin && p.off%chunksum.BlockSize == 0 && p.n%chunksum.BlockSize == 0 && p.n <= proto.MaxData
}

// readSent reads r into dst with OpChunkReadSent and checks the bytes; it
// returns errNotSent where they must be read again with OpChunkRead.
func readSent(ctx context.Context, s *rpc.Client, r *proto.ChunkReadReq, dst []byte) (int, error) {
	sums := make([]byte, int(r.Len)/chunksum.BlockSize*chunksum.EntrySize)
	nh, n, err := s.CallReadTail(ctx, proto.OpChunkReadSent, r.Encode, sums, dst)
	var re *rpc.Error
	switch {
	case errors.As(err, &re) && (re.Errno == syscall.EOPNOTSUPP || re.Errno == syscall.ENOSYS):
		return 0, errNotSent // a file system or a server that cannot send
	case rpc.IsNetError(err):
		// Also what a disk error while the bytes were sent looks like:
		// the server could only cut the reply short. The checked read
		// meets the error where the server's disk-failure handling sees
		// it; a server that is gone fails it as quickly.
		return 0, errNotSent
	case err != nil:
		return 0, err
	}
	if nh != (n+chunksum.BlockSize-1)/chunksum.BlockSize*chunksum.EntrySize || chunksum.Check(sums[:nh], dst[:n]) >= 0 {
		sentReadMismatches.Inc()
		return 0, errNotSent
	}
	return n, nil
}

// syncChunks fsyncs the given chunks on their targets, one request per
// chain, all chains in parallel.
func (c *Client) syncChunks(ino uint64, written map[chunkKey]struct{}) error {
	byChain := map[uint32][]uint64{}
	for k := range written {
		byChain[k.chain] = append(byChain[k.chain], k.index)
	}
	var ps []piece
	for chain := range byChain {
		ps = append(ps, piece{chain: chain})
	}
	return parallel(ps, func(p piece) error {
		return c.storageCall(p.chain, func(ctx context.Context, rt proto.Routing, s *rpc.Client) error {
			r := proto.ChunkSyncReq{Routing: rt, Ino: ino, Indexes: byChain[p.chain]}
			return s.CallContext(ctx, proto.OpChunkSync, r.Encode, nil)
		})
	})
}

// trimChunks deletes every chunk past size and cuts the last one.
func (c *Client) trimChunks(in *proto.Inode, size uint64) error {
	cs := uint64(in.Stripe.ChunkSize)
	from := (size + cs - 1) / cs // first chunk wholly past the end
	ps := make([]piece, 0, len(in.Chains))
	for _, ch := range in.Chains {
		ps = append(ps, piece{chain: ch})
	}
	err := parallel(ps, func(p piece) error {
		return c.storageCall(p.chain, func(ctx context.Context, rt proto.Routing, s *rpc.Client) error {
			r := proto.ChunkDeleteReq{Routing: rt, Ino: in.Ino, From: from}
			return s.CallContext(ctx, proto.OpChunkDelete, r.Encode, nil)
		})
	})
	if err != nil || size%cs == 0 {
		return err
	}
	last := size / cs
	chain := in.Chains[last%uint64(len(in.Chains))]
	return c.storageCall(chain, func(ctx context.Context, rt proto.Routing, s *rpc.Client) error {
		r := proto.ChunkTruncateReq{Chunk: proto.ChunkRef{Routing: rt, Ino: in.Ino, Index: last}, Size: uint32(size % cs)}
		return s.CallContext(ctx, proto.OpChunkTruncate, r.Encode, nil)
	})
}

// rangeSet tracks byte ranges of write-behind requests in flight, so that
// overlapping writes and reads wait for them (keeping write order and
// read-your-writes), and bounds how much one file buffers.
type rangeSet struct {
	mu     sync.Mutex
	cond   *sync.Cond
	ranges [][2]uint64
	bytes  uint64
}

// maxInflightBytes bounds one file's write-behind. Each byte in flight
// holds a buffer in the client and, while it is received, in a storage
// server's connection; 8 MiB keeps four 1 MiB requests in flight per
// chain of a default stripe. Measured (2026-11-27, fresh one-machine
// clusters, alternated): the first 256 MiB written after start-up ran at
// 202-213 MB/s against 143-168 with 32 MiB, whose buffers the processes
// first had to fault in (storage servers peaked at 62-64 MiB of memory
// against 104-113); writes of 1 GiB on a warmed-up cluster ran the same
// (236-273 against 234-323 MB/s, one and two jobs).
const maxInflightBytes = 8 << 20

func (s *rangeSet) init() { s.cond = sync.NewCond(&s.mu) }

func (s *rangeSet) overlaps(lo, hi uint64) bool {
	for _, r := range s.ranges {
		if lo < r[1] && r[0] < hi {
			return true
		}
	}
	return false
}

// overlapsAny reports whether a range in flight overlaps [lo, hi).
func (s *rangeSet) overlapsAny(lo, hi uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.overlaps(lo, hi)
}

func (s *rangeSet) add(lo, hi uint64) {
	s.mu.Lock()
	for s.overlaps(lo, hi) || (s.bytes > 0 && s.bytes+(hi-lo) > maxInflightBytes) {
		s.cond.Wait()
	}
	s.ranges = append(s.ranges, [2]uint64{lo, hi})
	s.bytes += hi - lo
	s.mu.Unlock()
}

func (s *rangeSet) done(lo, hi uint64) {
	s.mu.Lock()
	for i, r := range s.ranges {
		if r[0] == lo && r[1] == hi {
			s.ranges = append(s.ranges[:i], s.ranges[i+1:]...)
			break
		}
	}
	s.bytes -= hi - lo
	s.cond.Broadcast()
	s.mu.Unlock()
}

func (s *rangeSet) waitOverlap(lo, hi uint64) {
	s.mu.Lock()
	for s.overlaps(lo, hi) {
		s.cond.Wait()
	}
	s.mu.Unlock()
}

func (s *rangeSet) waitAll() {
	s.mu.Lock()
	for len(s.ranges) > 0 {
		s.cond.Wait()
	}
	s.mu.Unlock()
}
