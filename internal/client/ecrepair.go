package client

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"syscall"

	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
)

// Repairing erasure-coded files: a stripe can lack a shard because its
// target did not answer when the stripe was written (the version records
// which shards were written), because the target's disk was replaced
// (the chunk is gone or short), or, found by verifying, because a shard
// disagrees with the others. The shard is rebuilt from the others, written
// to its target under its version's own chunk index (its bytes are those
// the version always meant), synced, and then recorded in the version.

// ECRepairStats counts what a repair found and did.
type ECRepairStats struct {
	Stripes          int    // recorded stripes checked
	Missing          int    // shards not written, absent or short
	Mismatched       int    // shards that disagreed with the others (verify)
	Rebuilt          int    // shards written back
	RebuiltBytes     uint64 // their bytes
	Unreachable      int    // shards whose target did not answer: left for later
	StripesSkipped   int    // stripes rewritten meanwhile (their new version is whole)
	UnrecoverableErr error  // a stripe with fewer than K good shards, if any
}

// RepairEC checks every recorded stripe of erasure-coded file ino and
// rebuilds its missing shards; with verify it also reads every shard and
// checks parity, rewriting a shard that disagrees with the rest.
func (c *Client) RepairEC(ino uint64, verify bool) (ECRepairStats, error) {
	var stats ECRepairStats
	in, err := c.FreshAttr(ino)
	if err != nil {
		return stats, err
	}
	if in.Mode&syscall.S_IFMT != syscall.S_IFREG || !in.Stripe.EC.On() {
		return stats, rpc.Errorf(syscall.EINVAL, "inode %d is not an erasure-coded file", ino)
	}
	if in.Inline {
		return stats, nil // in the metadata: no shards
	}
	l, err := ecLayoutOf(in)
	if err != nil {
		return stats, err
	}
	stripes, err := c.ecStripesOf(in, 0)
	if err != nil {
		return stats, err
	}
	written := c.writtenGen(in)
	sizes := make([]map[uint64]uint64, l.geo.Shards()) // shard -> chunk index -> size; nil: not listed
	for j := range sizes {
		sizes[j] = c.shardChunkSizes(l, j)
	}
	err = inParallel(len(stripes), &stats, func(i int, stats *ECRepairStats) error {
		stats.Stripes++
		return c.repairStripe(l, stripes[i], sizes, verify, written, stats)
	})
	return stats, err
}

// RepairECStripes is RepairEC for the given stripes of file ino only (the
// metadata service's background repair of stripes written without a
// shard).
func (c *Client) RepairECStripes(ino uint64, stripes []uint64) (ECRepairStats, error) {
	var stats ECRepairStats
	in, err := c.FreshAttr(ino)
	if err != nil {
		return stats, err
	}
	if in.Mode&syscall.S_IFMT != syscall.S_IFREG || !in.Stripe.EC.On() || in.Inline {
		return stats, nil // replaced by a file that holds no such stripes
	}
	l, err := ecLayoutOf(in)
	if err != nil {
		return stats, err
	}
	written := c.writtenGen(in)
	sizes := make([]map[uint64]uint64, l.geo.Shards())
	for j := range sizes {
		sizes[j] = c.shardChunkSizes(l, j)
	}
	err = inParallel(len(stripes), &stats, func(i int, stats *ECRepairStats) error {
		vs, err := c.ecStripesWindow(in, stripes[i], 1)
		if err != nil || len(vs) == 0 {
			return err // none: cut by a truncate meanwhile
		}
		stats.Stripes++
		return c.repairStripe(l, vs[0], sizes, false, written, stats)
	})
	return stats, err
}

// ecRepairParallel is how many stripes of a file one repair works on at
// once: a stripe's repair is a few round trips, a synced write and a
// metadata commit, mostly waiting.
const ecRepairParallel = 8

// inParallel runs repair(i) for i in [0, n), ecRepairParallel at a time,
// each with stats of its own added to total; it stops at the first error.
func inParallel(n int, total *ECRepairStats, repair func(i int, stats *ECRepairStats) error) error {
	var mu sync.Mutex
	next := 0
	var first error
	each(min(n, ecRepairParallel), func(int) error {
		for {
			mu.Lock()
			i := next
			next++
			stop := i >= n || first != nil
			mu.Unlock()
			if stop {
				return nil
			}
			var st ECRepairStats
			err := repair(i, &st)
			mu.Lock()
			total.add(&st)
			if err != nil && first == nil {
				first = err
			}
			mu.Unlock()
		}
	})
	return first
}

// add adds o's counts to s.
func (s *ECRepairStats) add(o *ECRepairStats) {
	s.Stripes += o.Stripes
	s.Missing += o.Missing
	s.Mismatched += o.Mismatched
	s.Rebuilt += o.Rebuilt
	s.RebuiltBytes += o.RebuiltBytes
	s.Unreachable += o.Unreachable
	s.StripesSkipped += o.StripesSkipped
	if s.UnrecoverableErr == nil {
		s.UnrecoverableErr = o.UnrecoverableErr
	}
}

// errLayoutMoved: a shard of the file moved while it was being repaired.
var errLayoutMoved = errors.New("a shard of the file moved to another target meanwhile")

// writtenGen returns, once asked, a generation taken before any shard is
// rebuilt, and checks that in's layout is still the file's then: it tells
// the metadata service that the rebuilt shards went to the layout as of
// that generation (a shard that moved later is dropped; ecevacuate.go).
func (c *Client) writtenGen(in *proto.Inode) func() (uint32, error) {
	var mu sync.Mutex // stripes are repaired in parallel
	var gen uint32
	var err error
	return func() (uint32, error) {
		mu.Lock()
		defer mu.Unlock()
		if gen != 0 || err != nil {
			return gen, err
		}
		if gen, err = c.ECGen(in.Ino); err != nil {
			return 0, err
		}
		now, err2 := c.ecLayoutNow(in.Ino)
		if err2 != nil {
			err = err2
		} else if !slices.Equal(now, in.Chains) {
			err = errLayoutMoved
		}
		return gen, err
	}
}

// shardChunkSizes lists the sizes of file l.ino's chunks on shard j's
// target; nil if the target does not answer.
func (c *Client) shardChunkSizes(l *ecLayout, j int) map[uint64]uint64 {
	out := map[uint64]uint64{}
	after := proto.ChunkStat{Ino: l.ino - 1, Index: math.MaxUint64}
	for {
		var reply proto.ChunkListReply
		err := c.shardCall(l.chains[j], func(ctx context.Context, rt proto.Routing, s *rpc.Client) error {
			r := proto.ChunkListReq{Routing: rt, Bucket: uint8(l.ino % 256), AfterIno: after.Ino, AfterIndex: after.Index, Limit: 4096}
			return s.CallContext(ctx, proto.OpChunkList, r.Encode, decodeInto(&reply))
		})
		if err != nil {
			return nil
		}
		for _, ch := range reply.Chunks {
			if ch.Ino != l.ino {
				return out
			}
			out[ch.Index] = ch.Size
		}
		if !reply.More || len(reply.Chunks) == 0 {
			return out
		}
		after = reply.Chunks[len(reply.Chunks)-1]
	}
}

// repairStripe checks version v of a stripe and rebuilds what it lacks.
func (c *Client) repairStripe(l *ecLayout, v proto.ECStripe, sizes []map[uint64]uint64, verify bool, written func() (uint32, error), stats *ECRepairStats) error {
	index := proto.ECChunkIndex(v.Gen, v.Stripe)
	var bad uint32 // shards to rebuild
	for j := range sizes {
		want := l.geo.ShardLen(j, uint64(v.Encoded))
		switch {
		case want == 0:
		case sizes[j] == nil:
			stats.Unreachable++
		case v.Shards&(1<<j) == 0 || sizes[j][index] < want:
			bad |= 1 << j
			stats.Missing++
		}
	}
	if verify && bad == 0 {
		j, err := c.disagreeingShard(l, v)
		if err != nil {
			return err
		}
		if j >= 0 {
			bad |= 1 << j
			stats.Mismatched++
		}
	}
	if bad == 0 {
		return nil
	}
	gen, err := written()
	if errors.Is(err, errLayoutMoved) {
		stats.StripesSkipped++
		return nil
	}
	if err != nil {
		return err
	}
	// The stripe's bytes as encoded (a truncate may have cut it since),
	// from the shards that are good.
	good := v
	good.Shards &^= bad
	good.Length = v.Encoded
	data := make([]byte, v.Encoded)
	if err := c.readVersion(l, good, 0, data); err != nil {
		stats.UnrecoverableErr = err
		return nil
	}
	k := l.geo.Data
	shards := make([][]byte, l.geo.Shards())
	for j := 0; j < k; j++ {
		start := uint64(j) * l.geo.Cell
		shards[j] = data[min(start, uint64(len(data))):min(start+l.geo.ShardLen(j, uint64(v.Encoded)), uint64(len(data)))]
	}
	parity, err := l.codec.Encode(shards[:k], int(l.geo.ShardLen(k, uint64(v.Encoded))))
	if err != nil {
		return err
	}
	copy(shards[k:], parity)
	fixed := v
	for j := range shards {
		if bad&(1<<j) == 0 {
			continue
		}
		err := c.shardCall(l.chains[j], func(ctx context.Context, rt proto.Routing, s *rpc.Client) error {
			r := proto.ChunkWriteReq{Chunk: proto.ChunkRef{Routing: rt, Ino: l.ino, Index: index}, Data: shards[j], Sync: true}
			return s.CallDataContext(ctx, proto.OpChunkWrite, r.EncodeHead, r.Data, nil)
		})
		if err != nil {
			stats.Unreachable++
			continue
		}
		fixed.Shards |= 1 << j
		stats.Rebuilt++
		stats.RebuiltBytes += uint64(len(shards[j]))
	}
	if fixed.Shards == v.Shards {
		return nil
	}
	_, err = c.CommitEC(&proto.CommitWriteReq{Ino: l.ino,
		EC: []proto.ECStripeUpdate{{ECStripe: fixed, Base: v.Gen, BaseLength: v.Length, Written: gen}}})
	if errnoOf(err) == proto.ErrStripeChanged {
		stats.StripesSkipped++
		return nil
	}
	return err
}

// disagreeingShard reads every shard of version v and checks parity; if
// it does not hold, it finds the one shard that, rebuilt from the others,
// makes it hold (-1: all agree). With one parity shard any shard rebuilt
// from the others makes it hold, so the wrong one cannot be told: that,
// like more than one wrong shard, is an error and nothing is rewritten.
func (c *Client) disagreeingShard(l *ecLayout, v proto.ECStripe) (int, error) {
	n := l.geo.ShardLen(l.geo.Data, uint64(v.Encoded)) // the longest shard
	shards := make([][]byte, l.geo.Shards())
	for j := range shards {
		shards[j] = make([]byte, n)
		if err := c.readShard(l, v, j, 0, shards[j]); err != nil {
			return -1, nil // a shard that cannot be read is the missing-shard check's
		}
	}
	if ok, err := l.codec.Verify(shards, int(n)); err != nil || ok {
		return -1, err
	}
	culprit := -1
	for j := range shards {
		trial := make([][]byte, len(shards))
		copy(trial, shards)
		trial[j] = nil
		if j >= l.geo.Data {
			// A parity shard: rebuild it by encoding the data.
			parity, err := l.codec.Encode(trial[:l.geo.Data], int(n))
			if err != nil {
				return -1, err
			}
			trial[j] = parity[j-l.geo.Data]
		} else if err := l.codec.ReconstructData(trial, int(n)); err != nil {
			return -1, err
		}
		if ok, _ := l.codec.Verify(trial, int(n)); ok {
			if culprit >= 0 {
				return -1, rpc.Errorf(syscall.EIO, "stripe %d of file %d: its shards disagree, and %d+%d cannot tell which is wrong", v.Stripe, l.ino, l.geo.Data, l.geo.Parity)
			}
			culprit = j
		}
	}
	if culprit < 0 {
		return -1, rpc.Errorf(syscall.EIO, "stripe %d of file %d: its shards disagree in more than one place", v.Stripe, l.ino)
	}
	return culprit, nil
}
