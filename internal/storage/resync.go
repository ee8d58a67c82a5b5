package storage

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
	"tandemfs/internal/wire"
)

// Resync, run by the head of a chain for each syncing member. The member
// already takes every new change (it is a follower); the head walks both
// copies bucket by bucket and copies each chunk the member lacks or holds
// at another size, each chunk of its dirty set for the member (what
// changed here while the member was out, see dirty.go), and deletes chunks
// the head no longer has. Without a usable dirty set (this head restarted,
// the member came back without having been seen offline) it copies instead
// every chunk that changed on the head since the member fell out of date
// (with a margin for changes in flight when it failed and for clock
// differences). Each chunk is copied under the head's chunk lock, so no
// change to it can slip between the copy and the forwarded changes; the
// copied chunks are fsynced on the member in large batches. When the walk
// completes the head reports to the metadata leader, which makes the
// member serving if the chain has not changed meanwhile.

// resyncMargin widens the window of chunks a resync copies: changes in
// flight when the member failed, changes it acknowledged but lost with its
// page cache, and clocks that differ between the metadata leader (which
// timed the failure) and this server.
const resyncMargin = time.Minute

// resyncPiece is the size of the pieces a chunk is copied in.
const resyncPiece = 1 << 20

type resyncJob struct {
	mu       sync.Mutex
	progress proto.ResyncProgress
	durable  time.Duration // spent waiting for the member to make copies durable
}

// resyncs tracks the resyncs this server runs as a head.
type resyncs struct {
	mu      sync.Mutex
	running map[[2]uint32]*resyncJob // by {chain, member}
	// done is the chain version of each resync completed: the map shows
	// the member syncing until the leader's change arrives, and that
	// must not start the same resync again.
	done map[[2]uint32]uint32
}

func (r *resyncs) progress() []proto.ResyncProgress {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []proto.ResyncProgress
	for _, j := range r.running {
		j.mu.Lock()
		out = append(out, j.progress)
		j.mu.Unlock()
	}
	return out
}

// resyncLoop starts a resync for every syncing member of a chain this
// server heads.
func (s *Service) resyncLoop() {
	defer s.wg.Done()
	tick := time.NewTicker(s.cfg.HeartbeatInterval)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		v := s.cs.view.Load()
		if v == nil || time.Now().After(s.cs.leaseUntil.Load()) {
			continue
		}
		for _, c := range v.chains {
			s.startResyncs(c)
		}
	}
}

func (s *Service) startResyncs(c proto.Chain) {
	head, ok := c.Head()
	if len(c.Targets) < 2 || !ok {
		return
	}
	tg, err := s.target(head)
	if err != nil {
		return // another server heads it
	}
	for i, m := range c.Targets {
		if c.States[i] != proto.MemberSyncing {
			continue
		}
		key := [2]uint32{c.ID, m}
		s.resyncs.mu.Lock()
		_, busy := s.resyncs.running[key]
		busy = busy || s.resyncs.done[key] == c.Version
		job := &resyncJob{progress: proto.ResyncProgress{Chain: c.ID, Target: m, StartedMs: time.Now().UnixMilli()}}
		if !busy {
			s.resyncs.running[key] = job
		}
		s.resyncs.mu.Unlock()
		if busy {
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() {
				s.resyncs.mu.Lock()
				delete(s.resyncs.running, key)
				s.resyncs.mu.Unlock()
			}()
			start := time.Now()
			if err := s.resync(tg, c, i, job); err != nil {
				s.logf("storage: resync of target %d in chain %d stopped: %v", m, c.ID, err)
				return
			}
			s.resyncs.mu.Lock()
			s.resyncs.done[key] = c.Version
			s.resyncs.mu.Unlock()
			p := job.snapshot()
			job.mu.Lock()
			durable := job.durable
			job.mu.Unlock()
			s.logf("storage: resync of target %d in chain %d done in %v: %d chunks examined, %d copied (%d bytes); %v of it making the copies durable",
				m, c.ID, time.Since(start).Round(time.Millisecond), p.Chunks, p.Copied, p.Bytes, durable.Round(time.Millisecond))
		}()
	}
}

func (j *resyncJob) snapshot() proto.ResyncProgress {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.progress
}

func (j *resyncJob) update(fn func(p *proto.ResyncProgress)) {
	j.mu.Lock()
	fn(&j.progress)
	j.mu.Unlock()
}

// resyncRun is one resync: chain c as of its version, member index mi.
type resyncRun struct {
	s     *Service
	c     proto.Chain
	store *Target
	peer  *rpc.Client
	to    proto.Routing
	since int64 // unix ms: chunks changed after it are copied (without dirty)
	// dirty is what the member missed (see dirty.go), nil if unknown.
	dirty *changeSet
	job   *resyncJob
}

func (s *Service) resync(head *Target, c proto.Chain, mi int, job *resyncJob) error {
	store, err := s.chainStore(head, c.ID)
	if err != nil {
		return err
	}
	member := c.Targets[mi]
	addr := s.cs.view.Load().addrs[member]
	if addr == "" {
		return fmt.Errorf("no address for target %d", member)
	}
	r := &resyncRun{
		s: s, c: c, store: store, peer: s.peer(addr), job: job,
		to:    proto.Routing{Target: member, Chain: c.ID, Version: c.Version, Forwarded: true},
		since: c.SinceMs[mi] - resyncMargin.Milliseconds(),
	}
	if c.SinceMs[mi] == 0 {
		r.since = math.MinInt64 // unknown: copy everything
	}
	// Every change admitted under an older version of the chain is
	// applied and recorded after the barrier; the tracker must have seen
	// the version being resynced.
	s.changeBarrier(c)
	if v := s.cs.view.Load(); v != nil {
		s.observeMap(v)
	}
	set, why, busy := s.dirty.snapshot(c, member)
	for busy {
		if err := r.current(); err != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
		set, why, busy = s.dirty.snapshot(c, member)
	}
	if why == "" {
		r.dirty = &set
		s.logf("storage: resync of target %d in chain %d: copying the %d chunks (and deleted ranges) changed while it was out, and any missing or of another size",
			member, c.ID, set.n)
	} else {
		s.logf("storage: resync of target %d in chain %d: comparing every chunk, since this server does not know what it missed (%s)", member, c.ID, why)
	}
	if err := r.walk(); err != nil {
		return err
	}
	done := proto.ResyncDoneReq{Chain: c.ID, Target: member, Version: c.Version}
	if _, err := s.callMeta(proto.OpResyncDone, done.Encode, nil); err != nil {
		return fmt.Errorf("reporting completion: %w", explainErr(err))
	}
	return nil
}

func explainErr(err error) error { return errors.New(explainMetaErr(err)) }

// current fails once the chain moved on from the version being resynced
// or the service stops.
func (r *resyncRun) current() error {
	select {
	case <-r.s.stop:
		return errors.New("storage server stopping")
	default:
	}
	if c, ok := r.s.cs.view.Load().chains[r.c.ID]; !ok || c.Version != r.c.Version {
		return fmt.Errorf("chain %d changed (version %d)", r.c.ID, c.Version)
	}
	return nil
}

// walk compares the copies bucket by bucket and has the chunks that
// differ copied by resyncWorkers workers while it lists the next buckets;
// copied chunks are made durable on the member in large batches (see
// syncer), all of them before walk returns, so before OpResyncDone.
func (r *resyncRun) walk() error {
	defer r.s.share.begin()() // clients' I/O leaves the copy its share
	var (
		mu       sync.Mutex
		firstErr error
		failed   = make(chan struct{})
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if firstErr == nil {
			firstErr = err
			close(failed)
		}
	}
	todo := make(chan copyItem, resyncWorkers)
	toSync := make(chan chunkKey, resyncWorkers)
	var workers, syncer sync.WaitGroup
	syncer.Add(1)
	go func() {
		defer syncer.Done()
		if err := r.syncer(toSync); err != nil {
			fail(err)
		}
	}()
	for range resyncWorkers {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for it := range todo {
				select {
				case <-failed:
					continue // drain
				default:
				}
				k := it.key
				n, kept, err := r.copyChunk(it)
				if err != nil {
					fail(err)
					continue
				}
				r.job.update(func(p *proto.ResyncProgress) {
					p.Chunks++
					p.Copied++
					p.Bytes += uint64(n)
				})
				if kept {
					toSync <- k
				}
			}
		}()
	}
walk:
	for b := range Buckets {
		if err := r.bucket(uint8(b), todo, failed); err != nil {
			fail(fmt.Errorf("bucket %d: %w", b, err))
			break
		}
		select {
		case <-failed:
			break walk
		default:
		}
		r.job.update(func(p *proto.ResyncProgress) { p.Buckets = uint32(b + 1) })
	}
	close(todo)
	workers.Wait()
	close(toSync)
	syncer.Wait()
	return firstErr
}

// copyItem is a chunk to copy, and the member's copy as listed.
type copyItem struct {
	key        chunkKey
	memberHas  bool
	memberSize uint32
}

// bucket compares the chunks of bucket b on both copies and queues those
// to copy on todo; it stops early when failed is closed.
func (r *resyncRun) bucket(b uint8, todo chan<- copyItem, failed <-chan struct{}) error {
	if err := r.current(); err != nil {
		return err
	}
	mine, _, err := r.store.ListBucket(b, true, 0, 0, math.MaxInt)
	if err != nil {
		return err
	}
	theirs, err := r.memberList(b)
	if err != nil {
		return err
	}
	queue := func(it copyItem) error {
		select {
		case todo <- it:
			return nil
		case <-failed:
			return errors.New("stopped")
		}
	}
	i, j := 0, 0
	for i < len(mine) || j < len(theirs) {
		var it copyItem
		copyIt := true
		switch {
		case j == len(theirs) || (i < len(mine) && less(mine[i], theirs[j])):
			it.key = chunkKey{mine[i].Ino, mine[i].Index}
			i++
		case i == len(mine) || less(theirs[j], mine[i]):
			it = copyItem{chunkKey{theirs[j].Ino, theirs[j].Index}, true, uint32(theirs[j].Size)}
			j++
		default: // on both
			it = copyItem{chunkKey{mine[i].Ino, mine[i].Index}, true, uint32(theirs[j].Size)}
			copyIt = mine[i].Size != theirs[j].Size || r.changed(mine[i])
			i, j = i+1, j+1
		}
		if !copyIt {
			r.job.update(func(p *proto.ResyncProgress) { p.Chunks++ })
			continue
		}
		if err := queue(it); err != nil {
			return nil // the caller reports the error that stopped it
		}
	}
	return nil
}

// changed reports whether the head's chunk st may differ from the
// member's copy of the same size.
func (r *resyncRun) changed(st proto.ChunkStat) bool {
	if r.dirty != nil {
		return r.dirty.has(chunkKey{st.Ino, st.Index})
	}
	return st.MtimeMs >= r.since
}

// resyncWorkers is how many chunks a resync copies at once: enough to keep
// the network and both disks busy while one chunk waits on another.
const resyncWorkers = 4

// resyncSyncBatch is how many copied chunks a resync makes durable on the
// member at once: about a GiB of 1 MiB chunks, most of which the member's
// kernel has written back by then. Each fsync makes the member's file
// system commit its journal, which stalls the copy's own writes
// meanwhile: syncing per chunk, per bucket or per 256 chunks made a
// resync up to twice as slow as syncing once at the end.
const resyncSyncBatch = 1024

// syncer makes the chunks received on toSync durable on the member, in
// batches of resyncSyncBatch and the rest when toSync is closed.
func (r *resyncRun) syncer(toSync <-chan chunkKey) error {
	var firstErr error
	batch := map[uint64][]uint64{}
	n := 0
	flush := func() {
		if n > 0 && firstErr == nil {
			t0 := time.Now()
			firstErr = r.syncMember(batch)
			r.job.mu.Lock()
			r.job.durable += time.Since(t0)
			r.job.mu.Unlock()
		}
		clear(batch)
		n = 0
	}
	for k := range toSync {
		batch[k.ino] = append(batch[k.ino], k.idx)
		if n++; n >= resyncSyncBatch {
			flush()
		}
	}
	flush()
	return firstErr
}

func less(a, b proto.ChunkStat) bool {
	return a.Ino < b.Ino || (a.Ino == b.Ino && a.Index < b.Index)
}

// memberList lists the member's chunks in bucket b.
func (r *resyncRun) memberList(b uint8) ([]proto.ChunkStat, error) {
	var out []proto.ChunkStat
	req := proto.ChunkListReq{Routing: r.to, Bucket: b, Start: true, Limit: 4096}
	for {
		var rep proto.ChunkListReply
		if err := r.peer.Call(proto.OpChunkList, req.Encode, func(d *wire.Dec) error { rep.Decode(d); return d.Err() }); err != nil {
			return nil, fmt.Errorf("listing target %d: %w", r.to.Target, err)
		}
		out = append(out, rep.Chunks...)
		if !rep.More || len(rep.Chunks) == 0 {
			return out, nil
		}
		last := rep.Chunks[len(rep.Chunks)-1]
		req.Start, req.AfterIno, req.AfterIndex = false, last.Ino, last.Index
	}
}

// copyChunk makes the member's copy of chunk it.key equal to the head's
// (or deletes it if the head has none), under the head's chunk lock, and
// returns the bytes sent and whether the member holds the chunk now.
//
// The member's copy changes, between the listing and the copy, only by
// changes forwarded by this head, which the head's copy has too. So a
// chunk the member lacked is written piece by piece, holes (zero pieces)
// left out, and cut to size only where a hole ends it; a chunk the member
// holds is overwritten whole, zeros included, and cut to size only if the
// member's was longer. Each truncation is a metadata change on the
// member, which waits for its file system's journal; most chunks need
// none.
func (r *resyncRun) copyChunk(it copyItem) (int, bool, error) {
	k := it.key
	unlock := r.s.lockChunk(r.c.ID, k.ino, k.idx)
	defer unlock()
	if err := r.current(); err != nil {
		return 0, false, err
	}
	st, ok, err := r.store.StatChunk(k.ino, k.idx)
	if err != nil {
		return 0, false, err
	}
	if !ok {
		del := proto.ChunkDeleteReq{Routing: r.to, Ino: k.ino, From: k.idx, To: k.idx + 1}
		return 0, false, r.peer.Call(proto.OpChunkDelete, del.Encode, nil)
	}
	ref := proto.ChunkRef{Routing: r.to, Ino: k.ino, Index: k.idx}
	bp := getBuf(resyncPiece)
	defer putBuf(bp)
	sent := 0
	var end int64 // of the data written
	for off := int64(0); off < int64(st.Size); off += resyncPiece {
		n, err := r.store.Read(k.ino, k.idx, (*bp)[:resyncPiece], off)
		if err != nil {
			return sent, true, err
		}
		piece := (*bp)[:n]
		if !it.memberHas && allZero(piece) {
			continue // a hole stays a hole
		}
		w := proto.ChunkWriteReq{Chunk: ref, Off: uint32(off), Data: piece, Bulk: true}
		if err := r.peer.CallData(proto.OpChunkWrite, w.EncodeHead, w.Data, nil); err != nil {
			return sent, true, err
		}
		r.s.share.copiedBytes(n)
		resyncCopiedBytes.Add(float64(n))
		sent += n
		end = off + int64(n)
	}
	if end < int64(st.Size) || st.Size == 0 || (it.memberHas && int64(it.memberSize) > int64(st.Size)) {
		tr := proto.ChunkTruncateReq{Chunk: ref, Size: uint32(st.Size)}
		if err := r.peer.Call(proto.OpChunkTruncate, tr.Encode, nil); err != nil {
			return sent, true, err
		}
	}
	return sent, true, nil
}

// resyncSyncCalls bounds the sync requests (one per file) in flight.
const resyncSyncCalls = 16

// syncMember makes the copied chunks durable on the member, one request
// per file, resyncSyncCalls at a time.
func (r *resyncRun) syncMember(copied map[uint64][]uint64) error {
	errs := make(chan error, len(copied))
	sem := make(chan struct{}, resyncSyncCalls)
	for ino, idxs := range copied {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			req := proto.ChunkSyncReq{Routing: r.to, Ino: ino, Indexes: idxs}
			errs <- r.peer.Call(proto.OpChunkSync, req.Encode, nil)
		}()
	}
	var first error
	for range copied {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func allZero(b []byte) bool {
	for len(b) >= 8 {
		if b[0]|b[1]|b[2]|b[3]|b[4]|b[5]|b[6]|b[7] != 0 {
			return false
		}
		b = b[8:]
	}
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}
