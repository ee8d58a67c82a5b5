package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/bits"
	"slices"
	"syscall"
	"time"

	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
)

// ecCommitEvery: a writer commits once this many stripes wait for it, so
// that a long write without fsync or close holds a bounded list (and its
// earlier stripes become readable by others, as their size is).
const ecCommitEvery = 512

// ecMaxRebases bounds how often one commit reads stripes again that other
// writers committed first.
const ecMaxRebases = 8

// needsCommit reports whether enough stripes wait for a commit.
func (es *ecState) needsCommit() bool {
	es.mu.Lock()
	defer es.mu.Unlock()
	return len(es.pending) >= ecCommitEvery
}

// commitECLocked is commitLocked for an erasure-coded file on its shards
// (st.mu held): every stripe image is sent, the shards written since the
// last commit are synced, and then the stripes' versions are committed
// with the size and mtime, read again and rewritten over another
// writer's where that writer committed first.
func (c *Client) commitECLocked(st *fileState, sync bool) error {
	l, err := ecLayoutOf(&st.inode)
	if err != nil {
		return err
	}
	es := st.ec.Load()
	es.mu.Lock()
	images := slices.Clone(es.order)
	es.mu.Unlock()
	for _, s := range images {
		if err := c.flushStripe(st, l, s); err != nil {
			return err
		}
	}
	es.commitMu.Lock() // no stripe is sent while its generation is recorded
	defer es.commitMu.Unlock()
	es.mu.Lock()
	err, es.err = es.err, nil
	es.mu.Unlock()
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		if err := c.syncECShards(st, l.geo.Data); err != nil {
			return err
		}
		r := proto.CommitWriteReq{Ino: st.ino, Size: st.size, Mtime: st.mtime, Written: st.wrote,
			Inline: st.pendingInline, Sync: sync, EC: es.updates(), WroteTargets: st.announced, WroteEC: st.inode.Stripe.EC}
		n, err := c.CommitEC(&r)
		if errnoOf(err) == proto.ErrStripeChanged && attempt < ecMaxRebases {
			if err := c.rebaseEC(st, l); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		st.inode = *n
		st.dirty = false
		st.wrote = 0
		st.pendingInline, st.inlineImage = nil, nil
		es.committed()
		return nil
	}
}

// syncECShards makes the shard chunks written since the last commit
// durable: a version is recorded only with shards that are. A target
// whose sync fails or does not answer (a disk returning EIO, a server
// gone since the write) loses its shards from the waiting versions, as
// if their writes had failed: their stripes are recorded degraded and
// rebuilt by the metadata leader. Where that would leave a stripe fewer
// than K shards (more than M targets gone between its write and the
// sync), the sync waits for them, as a write does, and fails with EIO
// only past the mount's give-up time.
func (c *Client) syncECShards(st *fileState, k int) error {
	es := st.ec.Load()
	es.mu.Lock()
	written := es.written
	es.written = map[chunkKey]struct{}{}
	es.mu.Unlock()
	byChain := map[uint32][]uint64{}
	for key := range written {
		byChain[key.chain] = append(byChain[key.chain], key.index)
	}
	left := slices.Collect(maps.Keys(byChain))
	deadline := time.Now().Add(c.cfg.GiveUp)
	var failed []error
	for {
		left, failed = c.syncShardChains(st.ino, left, byChain)
		if len(left) == 0 || es.readableWithout(left, byChain, k) || (c.cfg.GiveUp > 0 && time.Now().After(deadline)) {
			break
		}
		// A crashed server's shards are in its host's page cache still:
		// synced once it is back.
		select {
		case <-c.stop:
			return rpc.Errorf(syscall.EIO, "file %d: client closed", st.ino)
		case <-time.After(250 * time.Millisecond):
		}
	}
	es.mu.Lock()
	defer es.mu.Unlock()
	for _, ch := range left {
		for _, index := range byChain[ch] {
			es.dropShard(ch, index)
		}
	}
	for _, p := range es.pending {
		if n := bits.OnesCount32(p.version.Shards); n < k {
			return rpc.Errorf(syscall.EIO, "stripe %d of file %d: %d shards durable, %d needed: %v",
				p.version.Stripe, st.ino, n, k, errors.Join(failed...))
		}
	}
	return nil
}

// syncShardChains syncs file ino's chunks at byChain's indexes on each
// of chains, in parallel, and returns the chains whose sync failed, with
// why.
func (c *Client) syncShardChains(ino uint64, chains []uint32, byChain map[uint32][]uint64) (left []uint32, failed []error) {
	errs := make([]error, len(chains))
	each(len(chains), func(i int) error {
		indexes := byChain[chains[i]]
		timeout := ecShardTimeout + time.Duration(len(indexes))*ecSyncPerChunk
		// Asked even if suspect since: it took the shards' writes, and a
		// sync skipped would drop them from their stripes.
		errs[i] = c.shardCallAsking(nil, true, chains[i], timeout, func(ctx context.Context, rt proto.Routing, s *rpc.Client) error {
			r := proto.ChunkSyncReq{Routing: rt, Ino: ino, Indexes: indexes}
			return s.CallContext(ctx, proto.OpChunkSync, r.Encode, nil)
		})
		return nil
	})
	for i, ch := range chains {
		if errs[i] != nil {
			left = append(left, ch)
			failed = append(failed, fmt.Errorf("shards on chain %d: %w", ch, errs[i]))
		}
	}
	return left, failed
}

// readableWithout reports whether every waiting stripe keeps at least k
// shards with those at byChain's indexes on chains dropped.
func (es *ecState) readableWithout(chains []uint32, byChain map[uint32][]uint64, k int) bool {
	es.mu.Lock()
	defer es.mu.Unlock()
	left := map[uint64]uint32{}
	for s, p := range es.pending {
		left[s] = p.version.Shards
	}
	for _, ch := range chains {
		for _, index := range byChain[ch] {
			p := es.pending[index&0xffffffff]
			if p == nil || uint64(p.version.Gen) != index>>32 {
				continue
			}
			left[index&0xffffffff] &^= shardMask(es.chains, ch)
		}
	}
	for _, shards := range left {
		if bits.OnesCount32(shards) < k {
			return false
		}
	}
	return true
}

// ecSyncPerChunk is what a shard sync's time limit grows by for each
// chunk it makes durable: a 1 MiB cell at 20 MB/s.
const ecSyncPerChunk = 50 * time.Millisecond

// dropShard takes the shard at chunk index on chain out of the version
// waiting for its stripe (es.mu held).
func (es *ecState) dropShard(chain uint32, index uint64) {
	p := es.pending[index&0xffffffff]
	if p == nil || uint64(p.version.Gen) != index>>32 {
		return
	}
	p.version.Shards &^= shardMask(es.chains, chain)
}

// shardMask is the shard bits of a stripe version that layout chains
// puts on chain.
func shardMask(chains []uint32, chain uint32) uint32 {
	var m uint32
	for j, c := range chains {
		if c == chain {
			m |= 1 << j
		}
	}
	return m
}

// updates lists the stripes waiting for a commit.
func (es *ecState) updates() []proto.ECStripeUpdate {
	es.mu.Lock()
	defer es.mu.Unlock()
	us := make([]proto.ECStripeUpdate, 0, len(es.pending))
	for _, p := range es.pending {
		us = append(us, proto.ECStripeUpdate{ECStripe: p.version, Base: p.base.Gen, BaseLength: p.base.Length})
	}
	slices.SortFunc(us, func(a, b proto.ECStripeUpdate) int { return cmp.Compare(a.Stripe, b.Stripe) })
	return us
}

// committed forgets the stripes just recorded, and the generation they
// were written under: the next write takes a new one, so that it never
// writes over a recorded version.
func (es *ecState) committed() {
	es.mu.Lock()
	defer es.mu.Unlock()
	es.pending = map[uint64]*ecPending{}
	es.gen, es.chains = 0, nil
	es.recorded, es.windows = map[uint64]proto.ECStripe{}, map[uint64]bool{}
}

// rebaseEC rewrites each waiting stripe that another writer (or a
// truncate) changed since this client read it: the recorded version with
// this client's written ranges over it, under the same generation (its
// chunks are this client's own until committed).
func (c *Client) rebaseEC(st *fileState, l *ecLayout) error {
	es := st.ec.Load()
	es.mu.Lock()
	pending := make(map[uint64]ecPending, len(es.pending))
	for s, p := range es.pending {
		pending[s] = *p
	}
	es.mu.Unlock()
	for s, p := range pending {
		ss, err := c.ecStripesWindow(&st.inode, s, 1) // st.mu held
		if err != nil {
			return err
		}
		var now proto.ECStripe
		if len(ss) == 1 {
			now = ss[0]
		}
		if now.Gen == p.base.Gen && now.Length == p.base.Length {
			continue
		}
		img := &ecImage{buf: make([]byte, l.geo.StripeBytes()), base: now, dirty: p.dirty, valid: uint64(now.Length)}
		if now.Gen != 0 {
			if err := c.readVersionWaiting(l, now, 0, img.buf[:now.Length]); err != nil {
				return err
			}
		}
		for _, r := range p.dirty {
			if err := c.readVersionWaiting(l, p.version, r[0], img.buf[r[0]:r[1]]); err != nil {
				return err
			}
			img.valid = max(img.valid, r[1])
		}
		if err := c.sendImage(st, l, s, img); err != nil {
			return err
		}
	}
	return nil
}

// uninlineEC writes an erasure-coded file's inline bytes n.InlineData as
// its first stripe, syncs its shards, and moves the file out of the
// metadata with the stripe recorded in the same command. st.mu is held.
func (c *Client) uninlineEC(st *fileState, n *proto.Inode) (*proto.Inode, error) {
	if st.ec.Load() == nil { // a file not open here (a truncate's)
		st.ec.Store(newECState())
	}
	es := st.ec.Load()
	es.commitMu.Lock()
	defer es.commitMu.Unlock()
	r := proto.UninlineReq{Ino: st.ino, Session: c.session}
	if len(n.InlineData) > 0 {
		l, err := ecLayoutOf(n)
		if err != nil {
			return nil, err
		}
		img := &ecImage{buf: make([]byte, l.geo.StripeBytes()), valid: uint64(len(n.InlineData))}
		copy(img.buf, n.InlineData)
		img.dirty = addRange(nil, 0, img.valid)
		if err := c.sendImage(st, l, 0, img); err != nil {
			return nil, err
		}
		if err := c.syncECShards(st, l.geo.Data); err != nil {
			return nil, err
		}
		es.mu.Lock()
		p := es.pending[0]
		delete(es.pending, 0)
		es.mu.Unlock()
		r.EC = []proto.ECStripeUpdate{{ECStripe: p.version}}
	}
	np, err := c.inodeCall(proto.OpUninline, r.Encode)
	if err == nil && len(r.EC) > 0 {
		es.committed()
	}
	return np, err
}
