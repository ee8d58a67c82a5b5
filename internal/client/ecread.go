package client

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"tandemfs/internal/ec"
	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
)

// Reading erasure-coded files (docs/architecture.md, "Erasure coding"): a
// read takes the stripe versions the metadata service recorded (or this
// client's own, not yet committed) and reads only the data shards it
// needs. A shard that is missing from its version, unreachable, slow,
// short or fails its checksums is rebuilt from K others at the same
// offset.

// ecShardGiveUp is how long a shard call retries answers that say the
// cluster map moved, and ecShardTimeout how long one call may take: a
// server that hangs or is gone costs a read about that once, not the
// client's whole give-up time (ecshard.go).
const (
	ecShardGiveUp  = 2 * time.Second
	ecShardTimeout = 2 * time.Second
)

// ecLayout is what reading and writing shards of one file needs.
type ecLayout struct {
	ino    uint64
	geo    ec.Geometry
	codec  *ec.Codec
	chains []uint32
}

func ecLayoutOf(in *proto.Inode) (*ecLayout, error) {
	p := in.Stripe.EC
	if len(in.Chains) != p.Shards() || in.Stripe.ChunkSize == 0 {
		return nil, rpc.Errorf(syscall.EIO, "erasure-coded file %d has %d chains for %d+%d shards", in.Ino, len(in.Chains), p.Data, p.Parity)
	}
	scheme := ec.Scheme{Data: int(p.Data), Parity: int(p.Parity)}
	codec, err := ec.CodecFor(scheme)
	if err != nil {
		return nil, rpc.Errorf(syscall.EIO, "file %d: %v", in.Ino, err)
	}
	return &ecLayout{ino: in.Ino, geo: ec.Geometry{Scheme: scheme, Cell: uint64(in.Stripe.ChunkSize)},
		codec: codec, chains: in.Chains}, nil
}

// Why a shard was not read.
var (
	errShardMissing = errors.New("the shard was not written in this version")
	errShardShort   = errors.New("the shard's chunk is shorter than its version says")
)

// readShard reads dst from shard j of version v at offset off inside the
// shard. Past the shard's length it reads zeros without asking.
// A target that did not answer lately is not asked (errShardSkipped).
func (c *Client) readShard(l *ecLayout, v proto.ECStripe, j int, off uint64, dst []byte) error {
	return c.readShardUnless(nil, false, l, v, j, off, dst)
}

// readShardUnless is readShard that stops when beaten ends and, with
// askSuspect, asks a target that did not answer lately too.
func (c *Client) readShardUnless(beaten context.Context, askSuspect bool, l *ecLayout, v proto.ECStripe, j int, off uint64, dst []byte) error {
	have := l.geo.ShardLen(j, uint64(v.Encoded))
	clear(dst)
	if off >= have {
		return nil
	}
	want := dst[:min(uint64(len(dst)), have-off)]
	if v.Shards&(1<<j) == 0 {
		return errShardMissing
	}
	start := time.Now()
	err := c.shardCallAsking(beaten, askSuspect, l.chains[j], ecShardTimeout, func(ctx context.Context, rt proto.Routing, s *rpc.Client) error {
		got, err := readChunk(ctx, rt, s, l.ino, proto.ECChunkIndex(v.Gen, v.Stripe), uint32(off), want)
		if err == nil && got < len(want) {
			return errShardShort
		}
		return err
	})
	if err == nil {
		c.shardReads.add(time.Since(start))
	}
	return err
}

// readVersion fills dst with the stripe's bytes at off (from the stripe's
// start) as version v holds them, rebuilding what a data shard cannot
// give from the others. Past v.Length they are zeros.
func (c *Client) readVersion(l *ecLayout, v proto.ECStripe, off uint64, dst []byte) error {
	pieces := l.geo.Split(l.geo.StripeStart(v.Stripe)+off, uint64(len(dst)))
	err := each(len(pieces), func(i int) error {
		p := pieces[i]
		return c.readPiece(l, v, p.Shard, p.Off, dst[p.Pos:p.Pos+p.N])
	})
	if cut := uint64(v.Length); err == nil && off+uint64(len(dst)) > cut {
		clear(dst[max(cut, off)-off:]) // a truncate cut the stripe there
	}
	return err
}

// rebuildPiece fills dst with shard j's bytes at off from the other
// shards' bytes at the same offset: a degraded read. It asks all the
// others and decodes from the first K to answer, so one more slow target
// does not hold it up; the later answers land in buffers no one reads.
// Targets that did not answer lately are asked only if K cannot be had
// without them.
func (c *Client) rebuildPiece(l *ecLayout, v proto.ECStripe, j int, off uint64, dst []byte) error {
	n := len(dst)
	shards := make([][]byte, l.geo.Shards())
	var ask []int
	have := 0
	for i := range shards {
		if i == j {
			continue
		}
		if off >= l.geo.ShardLen(i, uint64(v.Encoded)) {
			shards[i] = make([]byte, n) // zeros, by the shard's length: nothing to read
			have++
			continue
		}
		ask = append(ask, i)
	}
	skipped, errs := c.gatherShards(l, v, off, n, shards, ask, &have, false)
	if have < l.geo.Data && len(skipped) > 0 {
		_, more := c.gatherShards(l, v, off, n, shards, skipped, &have, true)
		errs = append(errs, more...)
	}
	if err := l.codec.ReconstructData(shards, n); err != nil {
		return rpc.Errorf(syscall.EIO, "stripe %d of file %d: %v (%v)", v.Stripe, l.ino, err, errors.Join(errs...))
	}
	copy(dst, shards[j])
	ecDegradedReads.Inc()
	return nil
}

// gatherShards reads the shards in ask, n bytes each at off, in parallel
// into shards until *have reaches K. It returns those not asked, their
// targets being suspect, and the others' errors.
func (c *Client) gatherShards(l *ecLayout, v proto.ECStripe, off uint64, n int, shards [][]byte, ask []int, have *int, askSuspect bool) (skipped []int, errs []error) {
	type answer struct {
		i   int
		b   []byte
		err error
	}
	answers := make(chan answer, len(ask))
	for _, i := range ask {
		go func() {
			b := make([]byte, n)
			answers <- answer{i, b, c.readShardUnless(nil, askSuspect, l, v, i, off, b)}
		}()
	}
	for left := len(ask); left > 0 && *have < l.geo.Data; left-- {
		a := <-answers
		switch {
		case a.err == nil:
			shards[a.i] = a.b
			*have++
		case errors.Is(a.err, errShardSkipped):
			skipped = append(skipped, a.i)
		default:
			errs = append(errs, a.err)
		}
	}
	return skipped, errs
}

// readPiece fills dst with shard j's bytes at off. A shard read that
// fails is rebuilt from the others; one that has not answered after
// hedgeDelay is raced by a rebuild, and the first to finish gives the
// bytes (a hedged read: a slow disk or a hung server costs a read that
// delay, not ecShardTimeout). A shard the rebuild beat is suspect.
func (c *Client) readPiece(l *ecLayout, v proto.ECStripe, j int, off uint64, dst []byte) error {
	beaten, beat := context.WithCancel(context.Background())
	defer beat()
	primary := make(chan error, 1)
	go func() { primary <- c.readShardUnless(beaten, false, l, v, j, off, dst) }()
	hedge := time.NewTimer(c.hedgeDelay())
	defer hedge.Stop()
	select {
	case err := <-primary:
		if err == nil {
			return nil
		}
		rerr := c.rebuildPiece(l, v, j, off, dst)
		if rerr != nil && errors.Is(err, errShardSkipped) &&
			c.readShardUnless(nil, true, l, v, j, off, dst) == nil {
			return nil // too few others: the shard's own target after all
		}
		return rerr
	case <-hedge.C:
	}
	ecHedgedReads.Inc()
	rebuilt := make([]byte, len(dst))
	second := make(chan error, 1)
	go func() { second <- c.rebuildPiece(l, v, j, off, rebuilt) }()
	select {
	case err := <-primary:
		if err == nil {
			return nil // the rebuild goes on into its own buffer
		}
		if err = <-second; err == nil {
			copy(dst, rebuilt)
		}
		return err
	case err := <-second:
		if err != nil {
			return <-primary
		}
		beat()
		<-primary // ended: it writes into dst no more
		copy(dst, rebuilt)
		ecHedgeWins.Inc()
		// K others answered first: the target is skipped for a while,
		// as one that did not answer (a hung server would otherwise
		// hold each write to it for ecShardTimeout).
		c.unanswered.mark(l.chains[j])
		return nil
	}
}

// Hedged reads wait for a shard four times as long as shard reads took
// of late, but at least ecHedgeMin (a busy disk's ordinary wait is not
// worth K reads) and at most ecHedgeMax.
const (
	ecHedgeMin = 30 * time.Millisecond
	ecHedgeMax = 500 * time.Millisecond
)

// Before any shard read was timed (a new mount, whose first reads also
// dial the servers) a read waits ecHedgeMax.
func (c *Client) hedgeDelay() time.Duration {
	avg := c.shardReads.get()
	if avg == 0 {
		return ecHedgeMax
	}
	return min(max(4*avg, ecHedgeMin), ecHedgeMax)
}

// latencyAverage is a moving average of durations (weight 1/8; the first
// taken whole), safe for concurrent use; a lost update only blurs it.
// Zero: nothing timed yet.
type latencyAverage struct{ ns atomic.Int64 }

func (a *latencyAverage) add(d time.Duration) {
	old := a.ns.Load()
	if old == 0 {
		a.ns.Store(max(int64(d), 1))
		return
	}
	a.ns.Store(old + (int64(d)-old)/8)
}

func (a *latencyAverage) get() time.Duration { return time.Duration(a.ns.Load()) }

// readEC fills buf from erasure-coded file in at off: this client's
// stripes not yet committed, else the recorded versions, else zeros (a
// hole). A stripe with fewer than K readable shards is read again until
// the client's give-up time, then fails with EIO.
func (c *Client) readEC(in *proto.Inode, off uint64, buf []byte) error {
	l, err := ecLayoutOf(in)
	if err != nil {
		return err
	}
	st := c.lookupState(in.Ino)
	stripeBytes := l.geo.StripeBytes()
	for pos := uint64(0); pos < uint64(len(buf)); {
		s := l.geo.Stripe(off + pos)
		within := off + pos - l.geo.StripeStart(s)
		take := min(stripeBytes-within, uint64(len(buf))-pos)
		dst := buf[pos : pos+take]
		if err := c.readStripe(st, in, l, s, within, dst); err != nil {
			return err
		}
		pos += take
	}
	return nil
}

// readStripe reads dst at off within stripe s.
func (c *Client) readStripe(st *fileState, in *proto.Inode, l *ecLayout, s, off uint64, dst []byte) error {
	var es *ecState
	if st != nil {
		es = st.ec.Load()
	}
	deadline := time.Now().Add(c.cfg.GiveUp)
	for {
		v, found, err := c.stripeVersion(es, in, s, off, dst)
		if err != nil || !found {
			return err
		}
		err = c.readVersion(l, v, off, dst)
		if err == nil || (c.cfg.GiveUp > 0 && time.Now().After(deadline)) {
			return err
		}
		if es != nil {
			es.forgetRecorded() // a version read meanwhile may have moved on
		}
		select {
		case <-c.stop:
			return rpc.Errorf(syscall.EIO, "file %d: client closed", in.Ino)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// readVersionWaiting is readVersion for a writer's read-modify-write:
// with fewer than K shards answering it tries again, as readStripe does,
// until the mount's give-up time has passed.
func (c *Client) readVersionWaiting(l *ecLayout, v proto.ECStripe, off uint64, dst []byte) error {
	deadline := time.Now().Add(c.cfg.GiveUp)
	for {
		err := c.readVersion(l, v, off, dst)
		if err == nil || (c.cfg.GiveUp > 0 && time.Now().After(deadline)) {
			return err
		}
		select {
		case <-c.stop:
			return rpc.Errorf(syscall.EIO, "file %d: client closed", l.ino)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// stripeVersion is the version of stripe s to read: found is false when
// dst was filled already (from a stripe being written) or s is a hole.
func (c *Client) stripeVersion(es *ecState, in *proto.Inode, s, off uint64, dst []byte) (proto.ECStripe, bool, error) {
	if es != nil {
		if v, ok, filled := es.unrecorded(s, off, dst); filled {
			return v, false, nil
		} else if ok {
			return v, true, nil
		}
		v, found, err := es.recordedStripe(c, in, s)
		if err == nil && !found {
			clear(dst) // a hole
		}
		return v, found, err
	}
	ss, err := c.ecStripesWindow(in, s, 1)
	if err != nil || len(ss) == 0 {
		clear(dst)
		return proto.ECStripe{}, false, err
	}
	return ss[0], true, nil
}

// ecStripesWindow lists the recorded stripes of file in in [from,
// from+count): proto.ErrLayoutChanged if in's layout is no longer the
// file's.
func (c *Client) ecStripesWindow(in *proto.Inode, from uint64, count uint32) ([]proto.ECStripe, error) {
	var reply proto.ECStripesReply
	r := proto.ECStripesReq{Ino: in.Ino, From: from, Count: count, Stripe: in.Stripe}
	if err := c.metaCall(proto.OpECStripes, r.Encode, decodeInto(&reply)); err != nil {
		return nil, err
	}
	var out []proto.ECStripe
	for _, s := range reply.Stripes {
		if s.Stripe < from+uint64(count) {
			out = append(out, s)
		}
	}
	return out, nil
}

// each runs fn(0..n-1), concurrently when n > 1, and returns their errors.
func each(n int, fn func(i int) error) error {
	if n == 1 {
		return fn(0)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
