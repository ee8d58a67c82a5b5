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
	listWait time.Duration // spent waiting for bucket listings
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
			durable, listWait := job.durable, job.listWait
			job.mu.Unlock()
			s.logf("storage: resync of target %d in chain %d done in %v: %d chunks examined, %d copied (%d bytes); %v of it making the copies durable, %v waiting for bucket listings",
				m, c.ID, time.Since(start).Round(time.Millisecond), p.Chunks, p.Copied, p.Bytes, durable.Round(time.Millisecond), listWait.Round(time.Millisecond))
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
// copied chunks are made durable on the member in batches while the copy
// goes on (see syncer), all of them before walk returns, so before
// OpResyncDone.
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
	toSync := make(chan copiedChunk, resyncWorkers)
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
					toSync <- copiedChunk{k, n}
				}
			}
		}()
	}
	listings := make(chan bucketListing, resyncListAhead)
	go r.lister(listings, failed)
	for {
		t0 := time.Now()
		l, ok := <-listings
		r.job.mu.Lock()
		r.job.listWait += time.Since(t0)
		r.job.mu.Unlock()
		if !ok {
			break // the lister is done, stopped or failed
		}
		if l.err != nil {
			fail(fmt.Errorf("bucket %d: %w", l.b, l.err))
			continue
		}
		if r.compare(l, todo, failed) {
			r.job.update(func(p *proto.ResyncProgress) { p.Buckets = uint32(l.b) + 1 })
		}
	}
	select {
	case <-failed:
	default: // every bucket compared; the empty ones were not sent
		r.job.update(func(p *proto.ResyncProgress) { p.Buckets = Buckets })
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

// bucketListing is both copies' chunks in bucket b, or why they could
// not be listed.
type bucketListing struct {
	b            uint8
	mine, theirs []proto.ChunkStat
	err          error
}

// resyncListAhead is how many buckets with chunks the lister may list
// ahead of the copy; a few large files fill a few buckets, so the lister
// runs past empty ones.
const resyncListAhead = 8

// resyncListCalls is how many buckets the lister lists at once. Listing a
// bucket is a directory walk here and a call to the member, which is busy
// writing the copies: listed one at a time, in turn with the copy, the 256
// buckets took a fifth of a resync of 300 chunks per chain (100–125 ms of
// 0.5–0.6 s), and one at a time ahead of it, 1.7 ms each, nearly all of it
// (2026-11-26, failure matrix scenario 1).
const resyncListCalls = 8

// lister lists every bucket on both copies, resyncListCalls at a time,
// and sends onto out, in bucket order, those with chunks on either; it
// closes out when done, after an error (sent) or once failed is closed,
// and only once no listing of its own is running.
func (r *resyncRun) lister(out chan<- bucketListing, failed <-chan struct{}) {
	defer close(out)
	// slots holds, in bucket order, where each started listing will land.
	slots := make(chan chan bucketListing, resyncListCalls)
	go func() {
		defer close(slots)
		for b := range Buckets {
			slot := make(chan bucketListing, 1)
			select {
			case slots <- slot:
			case <-failed:
				return
			}
			go func() { slot <- r.listBucket(uint8(b)) }()
		}
	}()
	defer func() {
		for slot := range slots { // wait for the listings still running
			<-slot
		}
	}()
	for slot := range slots {
		l := <-slot
		if l.err == nil && len(l.mine) == 0 && len(l.theirs) == 0 {
			continue
		}
		select {
		case out <- l:
		case <-failed:
			return
		}
		if l.err != nil {
			return // walk fails, which stops the listings
		}
	}
}

// listBucket lists bucket b here and on the member at the same time.
func (r *resyncRun) listBucket(b uint8) bucketListing {
	l := bucketListing{b: b}
	if l.err = r.current(); l.err != nil {
		return l
	}
	var theirsErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.theirs, theirsErr = r.memberList(b)
	}()
	l.mine, _, l.err = r.store.ListBucket(b, true, 0, 0, math.MaxInt)
	<-done
	if l.err == nil {
		l.err = theirsErr
	}
	return l
}

// compare queues on todo the chunks of listing l to copy and reports
// whether it queued them all: it stops early when failed is closed.
func (r *resyncRun) compare(l bucketListing, todo chan<- copyItem, failed <-chan struct{}) bool {
	mine, theirs := l.mine, l.theirs
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
			return false // the caller reports the error that stopped it
		}
	}
	return true
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
// the network and both disks busy while one chunk waits on another. 8
// rather than 4 (2026-11-27, alternated runs): a 1 GiB resync of one chain
// on an idle machine 1,047-1,126 MB/s against 744-1,027, and in the
// failure matrix under load 716-723 against 631-652 MB/s (scenario 2, two
// chains) and 602-645 against 533-556 (scenario 8, one), stalls the same.
const resyncWorkers = 8

// A resync makes its copies durable on the member in batches of at most
// resyncSyncBytes or resyncSyncChunks, whichever fills first, each synced
// while the next is copied; walk waits only when a batch fills before the
// one before it is durable, and for the last.
//
// Why 64 MiB and not a GiB: the member writes its copies with
// RWF_DONTCACHE, so its kernel starts writing each piece at once and an
// fsync finds little left to write; what it waits for is the disk's own
// cache flush, which takes longer the more the disk holds unflushed. On
// the test VM the sync at the end of one chain's 512 MiB stalled every
// request on the disk for 0.6 s (`/proc/diskstats`: 26-30 requests in
// flight, none finishing), the other chain's copy with it.
// TestResyncSpeed (1 GiB over two chains, a client appending), alternated
// runs on 2026-11-28: 434-465 MB/s against 310-366 with one sync per 1024
// chunks (4 pairs); without the client 544-665 against 496-591 (3 pairs);
// batches of 16 MiB 338-478, of 256 MiB 307-415. On 2026-11-22, before
// RWF_DONTCACHE, batches of 32-256 chunks were slower than 1024, since
// each fsync then had the whole batch still to write.
const (
	resyncSyncBytes  = 64 << 20
	resyncSyncChunks = 1024 // for chunks with few bytes: holes, truncations
)

// copiedChunk is a chunk the member now holds, and the bytes sent for it.
type copiedChunk struct {
	key   chunkKey
	bytes int
}

// syncer makes the chunks received on toSync durable on the member (see
// syncInBatches).
func (r *resyncRun) syncer(toSync <-chan copiedChunk) error {
	waited, err := syncInBatches(toSync, r.syncMember)
	r.job.mu.Lock()
	r.job.durable += waited
	r.job.mu.Unlock()
	return err
}

// syncInBatches passes the chunks received on toSync to sync, by file, in
// batches of at most resyncSyncBytes or resyncSyncChunks, one batch
// syncing while the next fills. It returns once toSync is closed and
// every batch is synced, or after the first failed sync (the chunks
// received after it are drained, not synced), with the time it spent
// waiting for syncs.
func syncInBatches(toSync <-chan copiedChunk, sync func(batch map[uint64][]uint64) error) (waited time.Duration, err error) {
	var (
		batch    = map[uint64][]uint64{}
		bytes, n int
		running  chan error // the sync of the batch before, if any
	)
	wait := func() {
		if running == nil {
			return
		}
		t0 := time.Now()
		if e := <-running; e != nil && err == nil {
			err = e
		}
		running = nil
		waited += time.Since(t0)
	}
	flush := func() {
		wait()
		b := batch
		batch, bytes, n = map[uint64][]uint64{}, 0, 0
		if len(b) == 0 || err != nil {
			return
		}
		running = make(chan error, 1)
		go func(done chan<- error) { done <- sync(b) }(running)
	}
	for c := range toSync {
		batch[c.key.ino] = append(batch[c.key.ino], c.key.idx)
		bytes += c.bytes
		if n++; bytes >= resyncSyncBytes || n >= resyncSyncChunks {
			flush()
		}
	}
	flush()
	wait()
	return waited, err
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
	sent := 0
	var end int64 // of the data written
	for off := int64(0); off < int64(st.Size); off += resyncPiece {
		n, wrote, err := r.copyPiece(ref, off, it.memberHas)
		if err != nil {
			return sent, true, err
		}
		if wrote {
			r.s.share.copiedBytes(n)
			resyncCopiedBytes.Add(float64(n))
			sent += n
			end = off + int64(n)
		}
		if n < resyncPiece {
			break // the chunk ends here
		}
	}
	if end < int64(st.Size) || st.Size == 0 || (it.memberHas && int64(it.memberSize) > int64(st.Size)) {
		tr := proto.ChunkTruncateReq{Chunk: ref, Size: uint32(st.Size)}
		if err := r.peer.Call(proto.OpChunkTruncate, tr.Encode, nil); err != nil {
			return sent, true, err
		}
	}
	return sent, true, nil
}

// copyPiece copies the piece of the chunk at off to the member, straight
// from the file with sendfile where the target can (sendfile.go), and
// returns its length and whether it was written: a hole the member lacks
// stays a hole.
func (r *resyncRun) copyPiece(ref proto.ChunkRef, off int64, memberHas bool) (n int, wrote bool, err error) {
	n, err = r.store.SendPiece(ref.Ino, ref.Index, off, resyncPiece, func(fd, n int, sums []byte) error {
		if !memberHas && isHole(fd, off, n) {
			return nil
		}
		w := proto.ChunkWriteReq{Chunk: ref, Off: uint32(off), Sums: sums, Bulk: true}
		wrote = true
		return r.peer.CallFile(proto.OpChunkWrite, func(e *wire.Enc) { w.EncodeHeadLen(e, n) }, fd, off, n, nil)
	})
	if !errors.Is(err, errNoSendfile) {
		return n, wrote, err
	}
	bp := getBuf(resyncPiece)
	defer putBuf(bp)
	if n, err = r.store.Read(ref.Ino, ref.Index, (*bp)[:resyncPiece], off); err != nil || n == 0 {
		return n, false, err
	}
	piece := (*bp)[:n]
	if !memberHas && allZero(piece) {
		return n, false, nil
	}
	w := proto.ChunkWriteReq{Chunk: ref, Off: uint32(off), Data: piece, Bulk: true}
	return n, true, r.peer.CallData(proto.OpChunkWrite, w.EncodeHead, w.Data, nil)
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
