package client

import (
	"cmp"
	"context"
	"errors"
	"math/bits"
	"slices"
	"sync"
	"syscall"
	"time"

	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
)

// Writing erasure-coded files (docs/architecture.md, "Erasure coding").
// Writes go into an image of their stripe in memory; a stripe whose last
// byte is written, or any stripe at a flush, fsync or close, is encoded
// and its K+M shards are sent straight to their targets in parallel,
// under this client's write generation (never over a recorded version).
// A commit makes the shards durable and then records the new versions
// with the size; a stripe another writer committed first is read again
// and this client's bytes written over it.

// ecMaxImages bounds the stripes of one file held in memory: a new one
// past it sends the oldest first. ecMaxSending bounds the stripes of one
// file being sent in the background: a writer past it waits, so that a
// writer faster than the targets holds at most that many in memory.
const (
	ecMaxImages  = 4
	ecMaxSending = 4
)

// ecState is an open erasure-coded file's stripes in this client.
type ecState struct {
	// commitMu: flushes hold it shared, a commit exclusively, so that no
	// shard is written under a generation while the commit records it.
	commitMu sync.RWMutex
	genMu    sync.Mutex // one ECGen call at a time

	mu      sync.Mutex
	gen     uint32                   // for the next flushes; 0: ask for one
	chains  []uint32                 // the layout as of gen: where its shards go
	images  map[uint64]*ecImage      // stripes being written
	order   []uint64                 // images, oldest first
	busy    map[uint64]chan struct{} // stripes being loaded or sent
	pending map[uint64]*ecPending    // sent, not yet committed
	written map[chunkKey]struct{}    // shard chunks to sync before the commit
	err     error                    // of a flush in the background, for the commit
	sending chan struct{}            // a slot per background flush (ecMaxSending)

	recorded   map[uint64]proto.ECStripe // the metadata service's versions ...
	windows    map[uint64]bool           // ... of these windows of stripes ...
	recordedAt uint64                    // ... as of this inode version
}

// ecWindow is how many stripes one listing of recorded versions fetches.
const ecWindow = 256

// ecImage is a stripe being written: its bytes, how many of them it
// holds, the version it was read from and the ranges this client wrote.
type ecImage struct {
	buf   []byte
	valid uint64
	base  proto.ECStripe
	dirty [][2]uint64
}

// ecPending is a stripe sent under a generation and not yet committed.
type ecPending struct {
	version proto.ECStripe
	base    proto.ECStripe
	dirty   [][2]uint64
}

func newECState() *ecState {
	return &ecState{images: map[uint64]*ecImage{}, busy: map[uint64]chan struct{}{}, sending: make(chan struct{}, ecMaxSending),
		pending: map[uint64]*ecPending{}, written: map[chunkKey]struct{}{},
		recorded: map[uint64]proto.ECStripe{}, windows: map[uint64]bool{}}
}

// unrecorded gives what this client holds of stripe s that the metadata
// service does not: an image (copied into dst at off: filled) or a
// version sent and not yet committed (ok).
func (es *ecState) unrecorded(s, off uint64, dst []byte) (v proto.ECStripe, ok, filled bool) {
	es.mu.Lock()
	defer es.mu.Unlock()
	if img := es.images[s]; img != nil {
		n := copy(dst, img.buf[min(off, img.valid):img.valid])
		clear(dst[n:])
		return proto.ECStripe{}, false, true
	}
	if p := es.pending[s]; p != nil {
		return p.version, true, false
	}
	return proto.ECStripe{}, false, false
}

// recordedStripe is the metadata service's version of stripe s, from a
// cache of windows of stripes kept while the inode's version stays.
func (es *ecState) recordedStripe(c *Client, in *proto.Inode, s uint64) (proto.ECStripe, bool, error) {
	w := s / ecWindow
	es.mu.Lock()
	if es.recordedAt != in.Version {
		es.recorded, es.windows, es.recordedAt = map[uint64]proto.ECStripe{}, map[uint64]bool{}, in.Version
	}
	if es.windows[w] {
		v, ok := es.recorded[s]
		es.mu.Unlock()
		return v, ok, nil
	}
	es.mu.Unlock()
	ss, err := c.ecStripesWindow(in, w*ecWindow, ecWindow)
	if err != nil {
		return proto.ECStripe{}, false, err
	}
	es.mu.Lock()
	defer es.mu.Unlock()
	if es.recordedAt == in.Version {
		for _, v := range ss {
			es.recorded[v.Stripe] = v
		}
		es.windows[w] = true
	}
	for _, v := range ss {
		if v.Stripe == s {
			return v, true, nil
		}
	}
	return proto.ECStripe{}, false, nil
}

// forgetRecorded drops the cached versions.
func (es *ecState) forgetRecorded() {
	es.mu.Lock()
	es.recorded, es.windows = map[uint64]proto.ECStripe{}, map[uint64]bool{}
	es.mu.Unlock()
}

// writeEC writes data at off of erasure-coded file st into the images of
// its stripes; with wait, the stripes touched are sent before it returns
// (O_DIRECT, O_SYNC). Full stripes are sent in the background.
func (c *Client) writeEC(st *fileState, in *proto.Inode, off uint64, data []byte, wait bool) error {
	l, err := ecLayoutOf(in)
	if err != nil {
		return err
	}
	es := st.ec.Load()
	stripeBytes := l.geo.StripeBytes()
	var touched []uint64
	for pos := uint64(0); pos < uint64(len(data)); {
		s := l.geo.Stripe(off + pos)
		a := off + pos - l.geo.StripeStart(s)
		b := min(stripeBytes, a+uint64(len(data))-pos)
		if err := c.writeImage(st, in, l, s, a, data[pos:pos+b-a]); err != nil {
			return err
		}
		touched = append(touched, s)
		if b == stripeBytes && !wait {
			c.flushInBackground(st, l, s)
		}
		pos += b - a
	}
	if wait {
		for _, s := range touched {
			if err := c.flushStripe(st, l, s); err != nil {
				return err
			}
		}
	}
	es.mu.Lock()
	var old []uint64
	if extra := len(es.order) - ecMaxImages; extra > 0 {
		old = slices.Clone(es.order[:extra])
	}
	es.mu.Unlock()
	for _, s := range old {
		c.flushInBackground(st, l, s)
	}
	return nil
}

// writeImage copies src into stripe s's image at a (from the stripe's
// start), reading the stripe first if the write keeps some of its bytes.
func (c *Client) writeImage(st *fileState, in *proto.Inode, l *ecLayout, s, a uint64, src []byte) error {
	es := st.ec.Load()
	b := a + uint64(len(src))
	es.mu.Lock()
	for {
		if img := es.images[s]; img != nil {
			copy(img.buf[a:b], src)
			img.valid = max(img.valid, b)
			img.dirty = addRange(img.dirty, a, b)
			es.mu.Unlock()
			return nil
		}
		if ch := es.busy[s]; ch != nil {
			es.mu.Unlock()
			<-ch
			es.mu.Lock()
			continue
		}
		ch := make(chan struct{})
		es.busy[s] = ch
		es.mu.Unlock()
		img, err := c.loadImage(st, in, l, s, a, b)
		es.mu.Lock()
		delete(es.busy, s)
		close(ch)
		if err != nil {
			es.mu.Unlock()
			return err
		}
		es.images[s] = img
		es.order = append(es.order, s)
	}
}

// loadImage makes the image of stripe s for a write of [a, b): this
// client's version not yet committed, the recorded one, or zeros. Bytes
// the write replaces whole are not read.
func (c *Client) loadImage(st *fileState, in *proto.Inode, l *ecLayout, s, a, b uint64) (*ecImage, error) {
	es := st.ec.Load()
	img := &ecImage{buf: make([]byte, l.geo.StripeBytes())}
	es.mu.Lock()
	p := es.pending[s]
	es.mu.Unlock()
	var from proto.ECStripe
	if p != nil {
		img.base, img.dirty, from = p.base, slices.Clone(p.dirty), p.version
	} else {
		v, found, err := es.recordedStripe(c, in, s)
		if err != nil {
			return nil, err
		}
		if found {
			img.base, from = v, v
		}
	}
	img.valid = uint64(from.Length)
	if from.Gen == 0 || (a == 0 && b >= img.valid) {
		return img, nil // nothing the write keeps
	}
	if err := c.readVersionWaiting(l, from, 0, img.buf[:img.valid]); err != nil {
		return nil, err
	}
	return img, nil
}

// flushInBackground sends stripe s in the background, once one of the
// file's ecMaxSending slots is free (the caller waits for it); an error
// waits for the commit.
func (c *Client) flushInBackground(st *fileState, l *ecLayout, s uint64) {
	es := st.ec.Load()
	es.sending <- struct{}{}
	go func() {
		defer func() { <-es.sending }()
		if err := c.flushStripe(st, l, s); err != nil {
			es.mu.Lock()
			if es.err == nil {
				es.err = err
			}
			es.mu.Unlock()
		}
	}()
}

// flushStripe sends stripe s's image, if it has one, as a version under
// this client's write generation.
func (c *Client) flushStripe(st *fileState, l *ecLayout, s uint64) error {
	es := st.ec.Load()
	es.commitMu.RLock()
	defer es.commitMu.RUnlock()
	es.mu.Lock()
	for es.busy[s] != nil {
		ch := es.busy[s]
		es.mu.Unlock()
		<-ch
		es.mu.Lock()
	}
	img := es.images[s]
	if img == nil {
		es.mu.Unlock()
		return nil
	}
	delete(es.images, s)
	es.order = slices.DeleteFunc(es.order, func(x uint64) bool { return x == s })
	ch := make(chan struct{})
	es.busy[s] = ch
	es.mu.Unlock()
	err := c.sendImage(st, l, s, img)
	es.mu.Lock()
	delete(es.busy, s)
	close(ch)
	es.mu.Unlock()
	return err
}

// writeGen is the generation to write under, asked for when there is
// none, and the layout as of then: the layout is read after the
// generation is handed out, so that a shard moved off a retired target
// before it goes to its new target (and one moved after is known to the
// metadata service as written to the old one; meta/ecevacuate.go).
func (c *Client) writeGen(st *fileState) (uint32, []uint32, error) {
	es := st.ec.Load()
	es.genMu.Lock()
	defer es.genMu.Unlock()
	es.mu.Lock()
	gen, chains := es.gen, es.chains
	es.mu.Unlock()
	if gen != 0 {
		return gen, chains, nil
	}
	gen, err := c.ECGen(st.ino)
	if err != nil {
		return 0, nil, err
	}
	chains, err = c.ecLayoutNow(st.ino)
	if err != nil {
		return 0, nil, err
	}
	es.mu.Lock()
	es.gen, es.chains = gen, chains
	es.mu.Unlock()
	return gen, chains, nil
}

// sendImage encodes img and writes its K+M shards in parallel. A shard
// whose target does not answer (ecshard.go) is left out of the version
// (its stripe is degraded until repaired).
func (c *Client) sendImage(st *fileState, l *ecLayout, s uint64, img *ecImage) error {
	gen, chains, err := c.writeGen(st)
	if err != nil {
		return err
	}
	if len(chains) != len(l.chains) {
		return rpc.Errorf(syscall.EIO, "file %d: a layout of %d chains for %d shards", l.ino, len(chains), len(l.chains))
	}
	k := l.geo.Data
	shards := make([][]byte, l.geo.Shards())
	for j := 0; j < k; j++ {
		start := uint64(j) * l.geo.Cell
		shards[j] = img.buf[start : start+l.geo.ShardLen(j, img.valid)]
	}
	parity, err := l.codec.Encode(shards[:k], int(l.geo.ShardLen(k, img.valid)))
	if err != nil {
		return rpc.Errorf(syscall.EIO, "file %d: %v", l.ino, err)
	}
	copy(shards[k:], parity)
	index := proto.ECChunkIndex(gen, s)
	wrote, err := c.writeShards(l, index, chains, shards)
	if err != nil {
		return err
	}
	es := st.ec.Load()
	es.mu.Lock()
	defer es.mu.Unlock()
	es.pending[s] = &ecPending{version: proto.ECStripe{Stripe: s, Gen: gen, Shards: wrote, Length: uint32(img.valid), Encoded: uint32(img.valid)},
		base: img.base, dirty: img.dirty}
	for j := range shards {
		if wrote&(1<<j) != 0 && len(shards[j]) > 0 {
			es.written[chunkKey{chains[j], index}] = struct{}{}
		}
	}
	return nil
}

// writeShards writes the shards at chunk index on their chains and
// returns the bitmap of those written. With fewer than K written the
// stripe could not be read back: the shards not written are tried again,
// as a replicated write waits for its chain, until K are or the mount's
// give-up time has passed (then EIO). The first try skips targets that
// did not answer lately; the next ones ask them too.
func (c *Client) writeShards(l *ecLayout, index uint64, chains []uint32, shards [][]byte) (uint32, error) {
	var mu sync.Mutex
	var wrote uint32
	errs := make([]error, len(shards))
	deadline := time.Now().Add(c.cfg.GiveUp)
	for try := 0; ; try++ {
		c.sendShards(l, index, chains, shards, try > 0, &mu, &wrote, errs)
		k := l.geo.Data
		if bits.OnesCount32(wrote) >= k {
			return wrote, nil
		}
		if try == 0 && slices.ContainsFunc(errs, func(err error) bool { return errors.Is(err, errShardSkipped) }) {
			continue // too few without the suspects: ask them at once
		}
		if c.cfg.GiveUp > 0 && time.Now().After(deadline) {
			return 0, rpc.Errorf(syscall.EIO, "stripe %d of file %d: %d of %d shards written, %d needed: %v",
				index&0xffffffff, l.ino, bits.OnesCount32(wrote), len(shards), k, errors.Join(errs...))
		}
		select {
		case <-c.stop:
			return 0, rpc.Errorf(syscall.EIO, "file %d: client closed", l.ino)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// sendShards writes the shards not in *wrote yet, in parallel, and adds
// those written to *wrote (under mu); with askSuspect it writes to
// targets that did not answer lately too. It waits for every one, but once
// K+1 are written it gives the others a grace of four times the recent
// shard writes (1 s to ecShardTimeout) and then ends them: a hung or slow
// target costs a stripe that grace, and its shard is left out of the
// version (recorded degraded, and repaired); the target is then skipped
// for a while, as one that did not answer. K+1, not K: an acknowledged
// stripe still survives the loss of another server while it waits for
// its repair; and a floor of a second, because on a loaded host healthy
// shards take hundreds of milliseconds and every cut spends redundancy.
func (c *Client) sendShards(l *ecLayout, index uint64, chains []uint32, shards [][]byte, askSuspect bool, mu *sync.Mutex, wrote *uint32, errs []error) {
	beaten, beat := context.WithCancel(context.Background())
	defer beat()
	done := make(chan int, len(shards))
	pending := 0
	for j := range shards {
		mu.Lock()
		skip := *wrote&(1<<j) != 0
		mu.Unlock()
		if skip {
			continue
		}
		pending++
		go func() {
			start := time.Now()
			errs[j] = nil
			if len(shards[j]) > 0 {
				errs[j] = c.shardCallAsking(beaten, askSuspect, chains[j], ecShardTimeout, func(ctx context.Context, rt proto.Routing, srv *rpc.Client) error {
					r := proto.ChunkWriteReq{Chunk: proto.ChunkRef{Routing: rt, Ino: l.ino, Index: index}, Data: shards[j]}
					return srv.CallDataContext(ctx, proto.OpChunkWrite, r.EncodeHead, r.Data, nil)
				})
			}
			if errs[j] == nil {
				c.shardWrites.add(time.Since(start))
				mu.Lock()
				*wrote |= 1 << j
				mu.Unlock()
			}
			done <- j
		}()
	}
	var grace <-chan time.Time
	left := map[int]bool{}
	for j := range shards {
		left[j] = true
	}
	for pending > 0 {
		select {
		case j := <-done:
			pending--
			delete(left, j)
			mu.Lock()
			enough := bits.OnesCount32(*wrote) >= l.geo.Data+1
			mu.Unlock()
			if enough && grace == nil && pending > 0 {
				grace = time.After(c.writeGrace())
			}
		case <-grace:
			beat()
			for ; pending > 0; pending-- {
				<-done // ended: they send from shards no more
			}
			for j := range left {
				if len(shards[j]) > 0 && *wrote&(1<<j) == 0 {
					c.unanswered.mark(chains[j])
				}
			}
			return
		}
	}
}

// writeGrace is how long a stripe's write waits for its last shards once
// K are written.
func (c *Client) writeGrace() time.Duration {
	avg := c.shardWrites.get()
	if avg == 0 {
		return ecShardTimeout // nothing timed yet
	}
	return min(max(4*avg, time.Second), ecShardTimeout)
}

// addRange adds [a, b) to a sorted list of disjoint ranges, merging.
func addRange(rs [][2]uint64, a, b uint64) [][2]uint64 {
	out := make([][2]uint64, 0, len(rs)+1)
	for _, r := range rs {
		switch {
		case r[1] < a || r[0] > b:
			out = append(out, r)
		default:
			a, b = min(a, r[0]), max(b, r[1])
		}
	}
	out = append(out, [2]uint64{a, b})
	slices.SortFunc(out, func(x, y [2]uint64) int { return cmp.Compare(x[0], y[0]) })
	return out
}
