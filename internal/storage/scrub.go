package storage

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
)

// Scrub. A block is verified whenever a client reads it, but a block no
// one reads (an old result file, or any copy on a follower, which serves
// no reads) can rot unseen until the day it is the last good copy. So,
// like ZFS's scrub and Ceph's deep scrub, every storage server reads back
// every block of every chunk it stores, once per ScrubEvery and at most
// ScrubRate bytes a second, and verifies each against its checksum. A bad
// block is rewritten from a good copy:
//   - on a chain's head, the whole chunk is fetched from a serving member
//     and written over the head's copy under the chunk lock (repairChunk,
//     the same repair a client's read triggers);
//   - on a follower, the head is asked to push its copy of the bad blocks
//     (OpChunkRepair); it does so under the chunk lock, so the push is
//     ordered with every change to the chunk, like a forwarded write;
//   - a chunk of a one-copy chain, or a member that is not serving (its
//     resync copies the chunk anyway), cannot be repaired: the block is
//     counted and logged, and reads of it keep failing with EIO.
//
// Each store (a target's own chunks, and its copy of each replicated
// chain) reports its progress in the heartbeats, which `tandem status`
// shows. The time of the last complete pass is kept in the server's state
// directory, so a server that restarts more often than ScrubEvery still
// scrubs.

// DefaultScrubEvery is the time between the scrubs of `tandem storage`:
// a pass a week, at (by default) most 64 MiB/s per server, which reads a
// 10 TB server in under two days while leaving the disks mostly to the
// clients.
const DefaultScrubEvery = 7 * 24 * time.Hour

// scrubPiece is how much of a chunk is read under one hold of its lock.
const scrubPiece = 256 << 10

type scrubKey struct{ target, chain uint32 }

// scrubs is the progress of the stores' scrubs, for the heartbeats.
type scrubs struct {
	mu sync.Mutex
	by map[scrubKey]*scrubRecord
}

// scrubRecord is one store's scrubs: the pass running (or last started),
// the last complete one, and the blocks repaired since the server started.
type scrubRecord struct {
	running  bool
	pass     proto.ScrubProgress
	done     proto.ScrubProgress
	haveDone bool
	repaired uint64
}

// report is what the heartbeats say of the store: the bad blocks of the
// last complete pass (of the first pass while it runs), the progress of
// the pass running, and every repair since the server started.
func (r *scrubRecord) report(k scrubKey) proto.ScrubProgress {
	src := r.done
	if !r.haveDone {
		src = r.pass
	}
	out := proto.ScrubProgress{Target: k.target, Chain: k.chain, Running: r.running,
		Chunks: src.Chunks, Bytes: src.Bytes, BadBlocks: src.BadBlocks, Unrepaired: src.Unrepaired,
		Repaired: r.repaired, StartedMs: r.pass.StartedMs, LastDoneMs: r.done.LastDoneMs}
	if r.running {
		out.Chunks, out.Bytes, out.Buckets = r.pass.Chunks, r.pass.Bytes, r.pass.Buckets
	}
	return out
}

func (s *scrubs) progress() []proto.ScrubProgress {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]proto.ScrubProgress, 0, len(s.by))
	for k, r := range s.by {
		out = append(out, r.report(k))
	}
	slices.SortFunc(out, func(a, b proto.ScrubProgress) int {
		if a.Target != b.Target {
			return int(a.Target) - int(b.Target)
		}
		return int(a.Chain) - int(b.Chain)
	})
	return out
}

func (s *scrubs) update(k scrubKey, fn func(r *scrubRecord)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.by == nil {
		s.by = map[scrubKey]*scrubRecord{}
	}
	r := s.by[k]
	if r == nil {
		r = &scrubRecord{}
		s.by[k] = r
	}
	fn(r)
}

// scrubLoop runs a pass whenever one is due or asked for, until the
// service stops.
func (s *Service) scrubLoop() {
	defer s.wg.Done()
	select { // target IDs come with the first registration
	case <-s.reg:
	case <-s.stop:
		return
	}
	last := s.lastScrub()
	if last.IsZero() && s.cfg.ScrubEvery > 0 {
		last = time.Now() // a new server: its first pass one period from now
		s.saveLastScrub(last)
	}
	for {
		var due <-chan time.Time
		var timer *time.Timer
		if s.cfg.ScrubEvery > 0 {
			timer = time.NewTimer(time.Until(last.Add(s.cfg.ScrubEvery)))
			due = timer.C
		}
		select {
		case <-s.stop:
			return
		case <-due:
		case <-s.scrubNow:
			s.logf("storage: scrub started on request")
		}
		if timer != nil {
			timer.Stop()
		}
		if !s.scrubPass() {
			return // stopped part way
		}
		last = time.Now()
		s.saveLastScrub(last)
	}
}

// kickScrub asks for a pass now; one already asked for and not yet
// started covers this request too.
func (s *Service) kickScrub() {
	select {
	case s.scrubNow <- struct{}{}:
	default:
	}
}

// scrubPass scrubs every store of every target; false if the service
// stopped before it ended.
func (s *Service) scrubPass() bool {
	p := pacer{rate: float64(s.cfg.ScrubRate), start: time.Now(), stop: s.stop}
	for id, tg := range *s.byID.Load() {
		if err := s.failed.get(id); err != nil {
			s.logf("storage: scrub skips target %d: %v", id, err)
			continue // its disk failed: it is out of its chains
		}
		if !s.scrubStore(scrubKey{id, id}, tg, &p) {
			return false
		}
		chains, err := s.chainStoreIDs(tg)
		if err != nil {
			s.logf("storage: scrub of target %d: %v", id, err)
		}
		for _, chain := range chains {
			st, err := s.chainStore(tg, chain)
			if err != nil {
				s.logf("storage: scrub of target %d: %v", id, err)
				continue
			}
			if !s.scrubStore(scrubKey{id, chain}, st, &p) {
				return false
			}
		}
	}
	s.logf("storage: scrub pass done in %v (%d MiB read)", time.Since(p.start).Round(time.Millisecond), p.done>>20)
	return true
}

// scrubStore reads back every chunk of one store and repairs what it can;
// false if the service stopped part way.
func (s *Service) scrubStore(k scrubKey, st *Target, p *pacer) bool {
	s.scrubs.update(k, func(r *scrubRecord) {
		r.running = true
		r.pass = proto.ScrubProgress{StartedMs: time.Now().UnixMilli()}
	})
	for b := 0; b < buckets; b++ {
		start, afterIno, afterIdx := true, uint64(0), uint64(0)
		for {
			chunks, more, err := st.ListBucket(uint8(b), start, afterIno, afterIdx, 256)
			if err != nil {
				s.logf("storage: scrub of target %d, chain %d: %v", k.target, k.chain, err)
				break
			}
			for _, c := range chunks {
				if !s.scrubChunk(k, st, c.Ino, c.Index, p) {
					return false
				}
			}
			if !more || len(chunks) == 0 {
				break
			}
			last := chunks[len(chunks)-1]
			start, afterIno, afterIdx = false, last.Ino, last.Index
		}
		s.scrubs.update(k, func(r *scrubRecord) { r.pass.Buckets = uint32(b + 1) })
	}
	s.scrubs.update(k, func(r *scrubRecord) {
		r.running = false
		r.pass.LastDoneMs = time.Now().UnixMilli()
		r.done, r.haveDone = r.pass, true
	})
	return true
}

// buckets is how many buckets a store's chunks are listed in (ListBucket).
const buckets = 256

// scrubChunk verifies one chunk and repairs its bad blocks; false if the
// service stopped.
func (s *Service) scrubChunk(k scrubKey, st *Target, ino, idx uint64, p *pacer) bool {
	bad, n, err := st.VerifyChunk(ino, idx, p.wait)
	s.scrubs.update(k, func(r *scrubRecord) {
		r.pass.Chunks++
		r.pass.Bytes += uint64(n)
		r.pass.BadBlocks += uint64(len(bad))
	})
	if errors.Is(err, errStopped) {
		return false
	}
	if err != nil {
		s.logf("storage: scrub of chunk %d/%d on target %d: %v", ino, idx, k.target, err)
	}
	if len(bad) == 0 {
		return true
	}
	s.logf("storage: scrub found %d bad block(s) in chunk %d/%d on target %d (chain %d): blocks %v",
		len(bad), ino, idx, k.target, k.chain, bad)
	err = s.repairScrubbed(k, st, ino, idx, bad)
	if err == nil {
		// Read the blocks back: only a copy that now verifies counts
		// as repaired.
		still, _, verr := st.VerifyChunk(ino, idx, nil)
		if verr != nil {
			err = verr
		} else if len(still) > 0 {
			err = fmt.Errorf("blocks %v still bad after the repair", still)
		}
	}
	s.scrubs.update(k, func(r *scrubRecord) {
		if err == nil {
			r.repaired += uint64(len(bad))
		} else {
			r.pass.Unrepaired += uint64(len(bad))
		}
	})
	if err != nil {
		s.logf("storage: chunk %d/%d on target %d (chain %d) keeps %d bad block(s): %v", ino, idx, k.target, k.chain, len(bad), err)
	} else {
		s.logf("storage: scrub repaired %d block(s) of chunk %d/%d on target %d (chain %d)", len(bad), ino, idx, k.target, k.chain)
	}
	return true
}

// repairScrubbed rewrites the bad blocks of a chunk from a good copy.
func (s *Service) repairScrubbed(k scrubKey, st *Target, ino, idx uint64, bad []uint64) error {
	if k.chain == k.target {
		return errors.New("the chain has one copy: no good copy to repair from")
	}
	v := s.cs.view.Load()
	if v == nil {
		return errors.New("no cluster map yet")
	}
	c, ok := v.chains[k.chain]
	if !ok {
		return fmt.Errorf("chain %d is not in the cluster map", k.chain)
	}
	if state, ok := c.State(k.target); !ok || state != proto.MemberServing {
		return fmt.Errorf("target %d is not a serving member of chain %d: its resync will copy the chunk", k.target, k.chain)
	}
	head, ok := c.Head()
	if !ok {
		return fmt.Errorf("chain %d has no head", k.chain)
	}
	ref := proto.ChunkRef{Routing: proto.Routing{Target: head, Chain: c.ID, Version: c.Version}, Ino: ino, Index: idx}
	if head == k.target {
		return s.repairChunk(st, c, &ref)
	}
	addr := v.addrs[head]
	if addr == "" {
		return fmt.Errorf("no address for head target %d", head)
	}
	ctx := s.cs.epochs.Context(c.ID, c.Version)
	for len(bad) > 0 {
		n := min(len(bad), proto.MaxRepairBlocks)
		req := proto.ChunkRepairReq{Chunk: ref, Member: k.target, Blocks: bad[:n]}
		if err := s.peer(addr).CallContext(ctx, proto.OpChunkRepair, req.Encode, nil); err != nil {
			return fmt.Errorf("head target %d: %w", head, err)
		}
		bad = bad[n:]
	}
	return nil
}

// pushRepair serves OpChunkRepair on the head: under the chunk lock, it
// reads its own copy of each listed block (verified) and writes it to the
// member as a forwarded write, then has the member fsync the chunk.
func (s *Service) pushRepair(st *Target, c proto.Chain, r *proto.ChunkRepairReq) error {
	if len(c.Targets) < 2 {
		return rpc.Errorf(syscall.EINVAL, "chain %d has one copy", c.ID)
	}
	ino, idx := r.Chunk.Ino, r.Chunk.Index
	unlock := s.lockChunk(c.ID, ino, idx)
	defer unlock()
	v := s.cs.view.Load()
	cur, ok := v.chains[c.ID]
	if !ok || cur.Version != r.Chunk.Version {
		return rpc.Errorf(syscall.ESTALE, "chain %d changed while the repair request waited", c.ID)
	}
	if state, ok := cur.State(r.Member); !ok || state != proto.MemberServing || r.Member == r.Chunk.Target {
		return rpc.Errorf(syscall.EINVAL, "target %d is not a serving follower in chain %d", r.Member, c.ID)
	}
	addr := v.addrs[r.Member]
	if addr == "" {
		return rpc.Errorf(syscall.EAGAIN, "no address for target %d", r.Member)
	}
	ctx := s.cs.epochs.Context(c.ID, c.Version)
	peer := s.peer(addr)
	to := proto.Routing{Target: r.Member, Chain: c.ID, Version: c.Version, Forwarded: true}
	buf := make([]byte, BlockSize)
	for _, b := range r.Blocks {
		n, err := st.Read(ino, idx, buf, int64(b)*BlockSize)
		if err != nil {
			return rpc.Errorf(syscall.EIO, "the head's copy of block %d of chunk %d/%d cannot be read either: %v", b, ino, idx, err)
		}
		if n == 0 {
			return rpc.Errorf(syscall.EIO, "the head's copy of chunk %d/%d ends before block %d", ino, idx, b)
		}
		w := proto.ChunkWriteReq{Chunk: proto.ChunkRef{Routing: to, Ino: ino, Index: idx}, Off: uint32(b * BlockSize), Data: buf[:n]}
		if err := peer.CallDataContext(ctx, proto.OpChunkWrite, w.EncodeHead, w.Data, nil); err != nil {
			return err
		}
	}
	sync := proto.ChunkSyncReq{Routing: to, Ino: ino, Indexes: []uint64{idx}}
	if err := peer.CallContext(ctx, proto.OpChunkSync, sync.Encode, nil); err != nil {
		return err
	}
	s.logf("storage: pushed %d block(s) of chunk %d/%d of chain %d to target %d", len(r.Blocks), ino, idx, c.ID, r.Member)
	return nil
}

// errStopped ends a scrub when the service stops.
var errStopped = errors.New("stopped")

// pacer holds a scrub to its byte rate (none if rate is 0).
type pacer struct {
	rate  float64 // bytes a second
	start time.Time
	done  int64
	stop  <-chan struct{}
}

// wait accounts n bytes read and sleeps until the rate allows more.
func (p *pacer) wait(n int) error {
	p.done += int64(n)
	if p.rate <= 0 {
		select {
		case <-p.stop:
			return errStopped
		default:
			return nil
		}
	}
	due := p.start.Add(time.Duration(float64(p.done) / p.rate * float64(time.Second)))
	select {
	case <-p.stop:
		return errStopped
	case <-time.After(time.Until(due)):
		return nil
	}
}

// scrubState is the file that remembers the last complete pass.
const scrubState = "scrub.json"

func (s *Service) stateDir() string {
	if s.cfg.StateDir != "" {
		return s.cfg.StateDir
	}
	return s.targets[0].Dir()
}

func (s *Service) lastScrub() time.Time {
	b, err := ReadFile(s.cfg.FS, filepath.Join(s.stateDir(), scrubState))
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			s.logf("storage: %v", err)
		}
		return time.Time{}
	}
	var st struct {
		LastDoneMs int64 `json:"last_done_ms"`
	}
	if err := json.Unmarshal(b, &st); err != nil || st.LastDoneMs <= 0 {
		s.logf("storage: %s: not a scrub state, starting the schedule afresh", filepath.Join(s.stateDir(), scrubState))
		return time.Time{}
	}
	return time.UnixMilli(st.LastDoneMs)
}

func (s *Service) saveLastScrub(t time.Time) {
	b, _ := json.Marshal(map[string]int64{"last_done_ms": t.UnixMilli()})
	if err := WriteFileAtomic(s.cfg.FS, filepath.Join(s.stateDir(), scrubState), b); err != nil {
		s.logf("storage: recording the scrub schedule: %v", err)
	}
}
