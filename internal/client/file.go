package client

import (
	"bytes"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
)

// fileState is this client's shared view of one open inode: the layout,
// the size and mtime including writes not yet committed to the metadata
// service, the chunks written since the last fsync, and the writes still
// in flight. Every handle on the inode shares it.
type fileState struct {
	ino uint64

	mu     sync.Mutex
	inode  proto.Inode
	size   uint64
	mtime  int64
	dirty  bool   // size/mtime not yet committed
	wrote  uint64 // bytes written to chains since the last commit
	opens  int
	orphan bool // unlinked while open: release it on last close
	// writing: reported to the metadata leader as open for writing
	// (opens.go); announced: the leader has been told, before any data
	// went to the file's targets. announced is guarded by mu.
	writing   atomic.Bool
	announced bool
	written   map[chunkKey]struct{}
	// A failed write-behind request is reported once to every handle open
	// on the file, at its next write, flush or fsync, as Linux reports a
	// writeback error to every open file (errseq_t): err is the failure,
	// errSeq counts failures, errSeen says a handle reported err.
	err     error
	errSeq  uint64
	errSeen bool
	// syncing is held by an fsync from taking written until its chunks
	// are synced (syncWritten).
	syncing sync.Mutex

	// Writes to an inline file wait for the next commit (inline.go):
	// pendingInline in order, and inlineImage, the file's bytes with them
	// applied, for this client's reads. nil when none wait.
	pendingInline []proto.InlineWrite
	inlineImage   []byte

	// capAbsent: security.capability is known to be absent, as of
	// capEpoch, which every change seen to the inode moves on
	// (capability.go). Guarded by mu.
	capAbsent bool
	capEpoch  uint64

	ra readahead

	inflight rangeSet

	// writers counts this client's writes to the file still in flight:
	// what a read or write brings is kept in the block cache only if no
	// other write was out meanwhile (blockcache.go). Guarded by mu.
	writers int

	// ec: an erasure-coded file's stripes this client writes (nil for a
	// file that is copied). Replaced only by followLayout, with mu held.
	ec atomic.Pointer[ecState]
}

type chunkKey struct {
	chain uint32
	index uint64
}

// Handle is one open file.
type Handle struct {
	c      *Client
	st     *fileState
	direct bool // O_DIRECT or O_SYNC: write through, no write-behind
	sync   bool // O_SYNC/O_DSYNC: each write durable before it returns
	// uncached: O_DIRECT, and the client does not cache such I/O
	// (Config.CacheDirectIO): no block cache for its reads and writes.
	uncached bool
	errSeq   uint64 // the last of st's failures this handle reported
}

// Open opens inode ino (of which n is a fresh copy). flags are open(2)
// flags; O_TRUNC truncates.
func (c *Client) Open(n *proto.Inode, flags uint32) (*Handle, error) {
	st := c.acquire(n)
	h := &Handle{c: c, st: st,
		direct:   flags&syscall.O_DIRECT != 0 || flags&syscall.O_SYNC != 0 || flags&syscall.O_DSYNC != 0,
		sync:     flags&syscall.O_SYNC != 0 || flags&syscall.O_DSYNC != 0,
		uncached: flags&syscall.O_DIRECT != 0 && !c.cfg.CacheDirectIO,
		errSeq:   st.errSample()}
	if flags&syscall.O_TRUNC != 0 && n.Mode&syscall.S_IFMT == syscall.S_IFREG {
		r := proto.SetAttrReq{Ino: n.Ino, Valid: proto.SetSize, Size: 0}
		if _, err := c.SetAttr(&r); err != nil {
			h.Release()
			return nil, err
		}
	}
	return h, nil
}

// acquire returns the shared state of inode n, creating it on first open.
func (c *Client) acquire(n *proto.Inode) *fileState {
	c.filesMu.Lock()
	defer c.filesMu.Unlock()
	st, ok := c.files[n.Ino]
	if !ok {
		st = &fileState{ino: n.Ino, written: map[chunkKey]struct{}{}}
		st.inflight.init() // and followLayout below gives a coded file its ec
		c.files[n.Ino] = st
		c.opensChanged()
	}
	st.mu.Lock()
	if (st.opens == 0 || !st.dirty) && st.followLayout(n) {
		st.inode = *n
		st.size = n.Size
		st.mtime = n.Mtime
	}
	st.opens++
	st.mu.Unlock()
	return st
}

func (c *Client) lookupState(ino uint64) *fileState {
	c.filesMu.Lock()
	defer c.filesMu.Unlock()
	return c.files[ino]
}

func (c *Client) isOpen(ino uint64) bool { return c.lookupState(ino) != nil }

func (c *Client) anyOpen() bool {
	c.filesMu.Lock()
	defer c.filesMu.Unlock()
	return len(c.files) > 0
}

// markOrphan is told that the metadata service keeps ino, unlinked while
// this client had it open, until the client's last close of it, and sees
// that the close comes: at once if it came in the meantime.
func (c *Client) markOrphan(ino uint64) {
	if !c.orphaned(ino) {
		c.releaseOrphan(ino)
	}
}

// orphaned marks ino's open state as an orphan's, so that its last close
// releases it, and reports whether ino is still open. It decides under
// the lock Release decides under (filesMu), so that exactly one of them
// releases the orphan, in either order.
func (c *Client) orphaned(ino uint64) bool {
	c.filesMu.Lock()
	defer c.filesMu.Unlock()
	st := c.files[ino]
	if st == nil {
		return false
	}
	st.mu.Lock()
	st.orphan = true
	st.mu.Unlock()
	return true
}

// releaseOrphan tells the metadata service that this client's last close
// of orphan ino came (it may delete it now), and forgets ino's blocks.
func (c *Client) releaseOrphan(ino uint64) {
	r := proto.InoReq{Ino: ino, Session: c.session}
	c.metaCall(proto.OpRelease, r.Encode, nil)
	c.blocks.forget(ino)
}

// overlay applies to n what this client knows of inode n.Ino that is
// newer: the inode its own last commit (or truncate, or open) brought
// back, and its uncommitted size and mtime.
func (c *Client) overlay(n *proto.Inode) {
	if st := c.lookupState(n.Ino); st != nil {
		st.overlay(n)
	}
}

// overlay applies the state of the open file to n, a copy of its inode
// from the cache or from a reply. n may predate a commit that ended
// while it was read: a cached copy read just before the commit put its
// reply in the cache, or a reply the metadata service sent before it
// applied the commit. Then the commit has cleared dirty, and only the
// inode it brought back (a higher version) has the size (found by
// tests/fsx_test.go: an O_APPEND descriptor's release committed the
// size of an O_DIRECT write made meanwhile, and fstat got the size from
// before).
func (st *fileState) overlay(n *proto.Inode) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.inode.Version > n.Version {
		*n = st.inode
	}
	if st.dirty {
		if st.size > n.Size {
			n.Size = st.size
		}
		if st.mtime > n.Mtime {
			n.Mtime, n.Ctime = st.mtime, st.mtime
		}
		n.Written = min(n.Written+st.wrote, n.Size)
	}
}

// sizeChanged records a truncate's result in the open state, if any.
func (c *Client) sizeChanged(ino, size uint64, n *proto.Inode) {
	st := c.lookupState(ino)
	if st == nil {
		return
	}
	st.mu.Lock()
	st.inode = *n
	st.size = size
	st.mu.Unlock()
}

// Ino is the handle's inode number.
func (h *Handle) Ino() uint64 { return h.st.ino }

// Read reads into buf at off and returns the bytes read (short at EOF).
func (h *Handle) Read(buf []byte, off uint64) (int, error) {
	data, done, err := h.ReadData(buf, off)
	if err != nil {
		return 0, err
	}
	if len(data) > 0 && &data[0] != &buf[0] {
		copy(buf, data)
	}
	done()
	return len(data), nil
}

// ReadData reads at most len(buf) bytes at off. The result is buf or, for
// sequential reads, possibly read-only memory of the readahead, which stays
// valid until the caller calls done (always, and once; done is never nil
// when err is nil).
func (h *Handle) ReadData(buf []byte, off uint64) (data []byte, done func(), err error) {
	st := h.st
	end := off + uint64(len(buf))
	st.inflight.waitOverlap(off, end)
	st.mu.Lock()
	size := st.size
	if off >= size {
		st.mu.Unlock()
		return nil, noop, nil
	}
	if end > size {
		end = size
		buf = buf[:end-off]
	}
	if st.inode.Inline {
		data := st.inlineBytes()
		n := copy(buf, data[min(off, uint64(len(data))):])
		clear(buf[n:])
		st.mu.Unlock()
		return buf, noop, nil
	}
	layout := st.inode
	// The generation is taken under st.mu, as writes drop blocks, so a
	// write that starts after this read makes its insert void.
	gen, cacheable := h.c.blockCacheable(st, off, len(buf))
	cacheable = cacheable && !h.uncached
	st.mu.Unlock()
	// The block cache first: a sequential reader of blocks kept there
	// (written through an NFS gateway) needs no readahead.
	if cacheable && h.c.readCached(layout.Ino, off, buf) {
		return buf, noop, nil
	}
	if !h.direct { // O_DIRECT readers asked for no readahead
		if data, done, served, err := st.ra.read(h.c, &layout, &st.inflight, size, off, buf); served {
			return data, done, err
		}
	}
	if !cacheable {
		err = h.c.readPieces(&layout, off, buf)
	} else {
		err = h.c.readMissed(&layout, size, off, buf, gen)
	}
	if err != nil {
		return nil, nil, err
	}
	return buf, noop, nil
}

func noop() {}

// Write writes data at off. Buffered writes are sent in the background
// (write-behind, bounded per file) and their errors reported by a later
// Write, Flush or Fsync; O_DIRECT and O_SYNC writes complete before
// returning.
func (h *Handle) Write(data []byte, off uint64) (int, error) {
	n, err := h.write(data, off)
	if err != nil {
		// The kernel may hold bytes of it that the servers do not.
		h.c.pages.forget(h.st.ino)
	}
	return n, err
}

// Append writes data at the end of the file as this client knows it:
// the size the metadata service gave at open, grown by this client's
// writes since. A FUSE file system without the kernel's writeback cache
// must place O_APPEND writes itself: the kernel uses the size it cached,
// which may predate another client's last close. The kernel sends one
// write at a time per file, so two appends never take the same end.
func (h *Handle) Append(data []byte) (int, error) {
	h.st.mu.Lock()
	off := h.st.size
	h.st.mu.Unlock()
	return h.Write(data, off)
}

func (h *Handle) write(data []byte, off uint64) (int, error) {
	st := h.st
	if err := h.takeErr(); err != nil {
		return 0, err
	}
	end := off + uint64(len(data))
	if err := h.checkQuota(end); err != nil {
		return 0, err
	}
	st.mu.Lock()
	if st.inode.Inline && end <= uint64(h.c.InlineLimit()) {
		n, err := h.writeInline(off, data) // unlocks st.mu
		if errnoOf(err) != proto.ErrNotInline {
			return n, err
		}
		// Another client moved the file to its chains.
		if err := h.c.reloadMoved(st); err != nil {
			return 0, err
		}
		return h.write(data, off)
	}
	// Data goes to the file's targets from here on.
	if err := h.c.announceWriting(st); err != nil {
		st.mu.Unlock()
		return 0, err
	}
	if st.inode.Inline {
		if err := h.c.commitLocked(st, false); err != nil { // pending inline writes first
			st.mu.Unlock()
			return 0, err
		}
		if err := h.c.uninline(st); err != nil {
			st.mu.Unlock()
			return 0, err
		}
	}
	layout := st.inode
	coded := layout.Stripe.EC.On()
	// An O_SYNC write inside the file commits its mtime while its data
	// is written (stable.go); otherwise the size and mtime follow the data.
	// (An erasure-coded file's stripes are written anew, and committed.)
	inPlace := h.sync && !st.dirty && end <= st.size && !coded
	committedSize := st.size
	// An O_SYNC write's chunks are synced by the write itself: an fsync
	// (which the kernel sends after each such write) need not sync them
	// again.
	for _, p := range splitRange(&layout, off, uint64(len(data))) {
		if !h.sync && !coded {
			st.written[chunkKey{p.chain, p.index}] = struct{}{}
		}
	}
	buffered := !coded && !inPlace && !h.direct
	keep, gen := h.c.startCachedWrite(st, off, data, h.direct && !h.uncached, buffered)
	st.mu.Unlock()

	// Every write, O_DIRECT ones too, is counted in flight: it goes out
	// only after this client's write-behind requests it overlaps (sent
	// at once, it could reach the servers first and be overwritten by
	// the older bytes; found by tests/fsx_test.go), and readahead
	// fetches no chunk it overlaps until it is done. The readahead
	// window is dropped only once the write is counted, so that a chunk
	// fetched before, which may miss the write, is not kept either.
	st.inflight.add(off, end)
	st.ra.invalidate()
	var err error
	if coded {
		// Into the stripes' images; O_DIRECT and O_SYNC writes are sent
		// before the write returns (and O_SYNC ones committed below).
		err = h.c.writeEC(st, &layout, off, data, h.direct)
		h.c.endCachedWrite(st, off, data, gen, keep && err == nil)
		st.inflight.done(off, end)
		if err != nil {
			return 0, err
		}
	} else if inPlace {
		err = h.writeInPlace(&layout, off, data, committedSize)
		h.c.endCachedWrite(st, off, data, gen, keep && err == nil)
		st.inflight.done(off, end)
		if err != nil {
			return 0, err
		}
		return len(data), nil
	} else if h.direct {
		err = h.c.writePieces(&layout, off, data, h.sync)
		h.c.endCachedWrite(st, off, data, gen, keep && err == nil)
		st.inflight.done(off, end)
	} else {
		buf := append(getBuf(len(data)), data...)
		go func() {
			if err := h.c.writePieces(&layout, off, buf, false); err != nil {
				h.c.forgetFailedWrite(st)
				st.setErr(err)
			}
			putBuf(buf)
			h.c.endCachedWrite(st, off, nil, 0, false)
			st.inflight.done(off, end)
		}()
	}
	if err != nil {
		return 0, err
	}
	st.mu.Lock()
	if end > st.size {
		st.size = end
	}
	st.mtime = time.Now().UnixNano()
	st.dirty = true
	st.wrote += uint64(len(data))
	st.mu.Unlock()
	if h.sync || (coded && st.ec.Load().needsCommit()) {
		// O_SYNC/O_DSYNC: the new size must be as durable as the data
		// (the chunk was fsynced by its target already): one commit that
		// syncs the metadata log.
		st.mu.Lock()
		err := h.c.commitLocked(st, h.sync)
		st.mu.Unlock()
		if err != nil {
			return 0, err
		}
	}
	if err := h.reportGrowth(); err != nil {
		h.c.cfg.Logf("quota: reporting the growth of file %d: %v (reported at its close instead)", st.ino, err)
	}
	return len(data), nil
}

// checkQuota refuses (EDQUOT) a write ending at end that grows the file
// while its owner, group or project is over a byte limit (quota.go).
// Writes within the file's size pass: they take no new space.
func (h *Handle) checkQuota(end uint64) error {
	st := h.st
	st.mu.Lock()
	grows := end > st.size
	n := st.inode
	st.mu.Unlock()
	if !grows {
		return nil
	}
	return h.c.checkGrowth(&n)
}

// setErr records the failure of a write-behind request. More failures
// before any handle reported the first are the same failure to report.
func (st *fileState) setErr(err error) {
	st.mu.Lock()
	if st.err == nil || st.errSeen {
		st.err, st.errSeen = err, false
		st.errSeq++
	}
	st.mu.Unlock()
}

// errSample is the failure a handle opened now counts as reported: the
// last one if a handle reported it, so that a new handle does not report
// an old failure, and none otherwise, so that a failure nobody reported
// yet (the writer closed, or died) reaches whoever opens the file next.
func (st *fileState) errSample() uint64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.errSeen {
		return st.errSeq
	}
	return 0
}

// unreportedErr reports whether a failure of a write-behind request is
// not yet reported by any handle. Called with st.mu held.
func (st *fileState) unreportedErr() bool { return st.err != nil && !st.errSeen }

// takeErr returns the failure of a write-behind request this handle has
// not reported yet, once.
func (h *Handle) takeErr() error {
	st := h.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if h.errSeq == st.errSeq {
		return nil
	}
	h.errSeq = st.errSeq
	st.errSeen = true
	return st.err
}

// Flush waits for write-behind requests and commits size and mtime to the
// metadata service (close(2) calls it). After it returns, the data and its
// size survive the loss of every TandemFS process.
func (h *Handle) Flush() error {
	st := h.st
	st.inflight.waitAll()
	if err := h.takeErr(); err != nil {
		return err
	}
	return h.c.commit(st)
}

// Fsync is Flush plus an fsync of every chunk written since the last one,
// so the data also survives a power failure of the storage servers.
func (h *Handle) Fsync() error {
	st := h.st
	st.inflight.waitAll()
	if err := h.takeErr(); err != nil {
		return err
	}
	if err := st.syncWritten(func(written map[chunkKey]struct{}) error {
		return h.c.syncChunks(st.ino, written)
	}); err != nil {
		return err
	}
	// One call commits and syncs when there is something to commit.
	st.mu.Lock()
	dirty := st.dirty
	err := h.c.commitLocked(st, true)
	st.mu.Unlock()
	if err != nil || dirty {
		return err
	}
	return h.c.SyncMeta()
}

// syncWritten syncs, with sync, the chunks written since the last fsync,
// and returns once every chunk written before it was called is synced.
// fsyncs of the file run this one at a time: one that came while
// another's chunks were being synced finds written empty, and without
// the wait would return before that other sync, which holds its chunks
// too, had ended. Chunks whose sync failed stay to be synced next time.
func (st *fileState) syncWritten(sync func(map[chunkKey]struct{}) error) error {
	st.syncing.Lock()
	defer st.syncing.Unlock()
	st.mu.Lock()
	written := st.written
	st.written = map[chunkKey]struct{}{}
	st.mu.Unlock()
	if err := sync(written); err != nil {
		st.mu.Lock()
		for k := range written {
			st.written[k] = struct{}{}
		}
		st.mu.Unlock()
		return err
	}
	return nil
}

// flushWrites commits this client's buffered writes to ino, if it has the
// file open, for a call that must come after them. A write-behind error
// stays for close or fsync to report.
func (c *Client) flushWrites(ino uint64) error {
	st := c.lookupState(ino)
	if st == nil {
		return nil
	}
	st.inflight.waitAll()
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.unreportedErr() {
		return nil
	}
	return c.commitLocked(st, false)
}

// FlushForUnlock makes this client's writes to ino reach the cluster
// before a lock on it is released, as an NFS client flushes on unlock: a
// process that takes the lock next, on any host, reads them. A failure
// is kept for close or fsync to report, as a write-behind error is.
func (c *Client) FlushForUnlock(ino uint64) {
	if err := c.flushWrites(ino); err != nil {
		if st := c.lookupState(ino); st != nil {
			st.setErr(err)
		}
	}
}

// RefreshForLock takes the size and layout of ino from the metadata
// service when a lock on it is granted, if this client has it open, and
// drops its readahead: another client may have written and released the
// lock since this one opened the file. Writes of this client not yet
// committed keep the size they reach. It reports whether it reloaded: a
// file lease this client holds vouches that no other client changed the
// file, so then there is nothing to reload.
func (c *Client) RefreshForLock(ino uint64) (bool, error) {
	st := c.lookupState(ino)
	if st == nil {
		return false, nil
	}
	if _, leased := c.fileLeases.valid(ino, time.Now()); leased {
		return false, nil
	}
	r := proto.InoReq{Ino: ino}
	n, err := c.inodeCall(proto.OpGetAttr, r.Encode)
	if err != nil {
		return false, err
	}
	st.mu.Lock()
	if st.dirty {
		st.size = max(st.size, n.Size)
	} else {
		st.inode, st.size, st.mtime = *n, n.Size, n.Mtime
	}
	st.mu.Unlock()
	st.ra.invalidate()
	return true, nil
}

// Refresh gives the open state of file n.Ino the inode n, fresh from the
// metadata service, when it is newer than the one the state holds: a
// server that keeps files open between its clients' requests (the NFS
// gateway) sees then what other clients wrote and closed since, as a new
// open would. This client's uncommitted writes keep the size they reach.
func (c *Client) Refresh(n *proto.Inode) {
	st := c.lookupState(n.Ino)
	if st == nil {
		return
	}
	st.mu.Lock()
	newer := n.Version > st.inode.Version
	switch {
	case !newer:
	case st.dirty || st.pendingInline != nil:
		st.size = max(st.size, n.Size)
	default:
		st.inode, st.size, st.mtime = *n, n.Size, n.Mtime
	}
	st.mu.Unlock()
	if newer {
		st.ra.invalidate()
	}
}

// SyncMeta makes every metadata change so far durable on the metadata
// service's disk (changes are otherwise fsynced in groups).
func (c *Client) SyncMeta() error { return c.metaCall(proto.OpSync, nil, nil) }

// Release closes the handle; the last close of an inode unlinked while
// open lets the metadata service delete it.
func (h *Handle) Release() error {
	err := h.Flush()
	if h.c.closed(h.st) {
		h.c.releaseOrphan(h.st.ino)
	}
	return err
}

// closed counts one close of st and reports whether it was the last of
// an orphan's, which the caller then releases (see orphaned).
func (c *Client) closed(st *fileState) (lastOfOrphan bool) {
	c.filesMu.Lock()
	defer c.filesMu.Unlock()
	st.mu.Lock()
	defer st.mu.Unlock()
	st.opens--
	if st.opens > 0 {
		return false
	}
	delete(c.files, st.ino)
	c.opensChanged()
	return st.orphan
}

// commit sends the size and mtime of writes, and the writes buffered to an
// inline file, to the metadata service.
func (c *Client) commit(st *fileState) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	return c.commitLocked(st, false)
}

// commitLocked commits with st.mu held; with sync, the commit is durable
// on the metadata service's disk when it returns.
func (c *Client) commitLocked(st *fileState, sync bool) error {
	if !st.dirty {
		return nil
	}
	if st.ec.Load() != nil && !st.inode.Inline {
		return c.commitECLocked(st, sync)
	}
	r := proto.CommitWriteReq{Ino: st.ino, Size: st.size, Mtime: st.mtime, Written: st.wrote, Session: c.session,
		Inline: st.pendingInline, Sync: sync, WroteTargets: st.announced, WroteEC: st.inode.Stripe.EC}
	n, err := c.inodeCall(proto.OpCommitWrite, r.Encode)
	if errnoOf(err) == proto.ErrNotInline && len(r.Inline) > 0 {
		// Another client moved the file to its targets; the buffered
		// writes go there, as any writer's, announced (opens.go).
		if err := c.announceWriting(st); err != nil {
			return err
		}
		if st.ec.Load() != nil {
			return c.commitMovedInlineEC(st, &r, sync)
		}
		n, err = c.commitMovedInline(st, &r)
	}
	if err != nil {
		return err
	}
	st.inode = *n
	st.dirty = false
	st.wrote = 0
	st.pendingInline, st.inlineImage = nil, nil
	return nil
}

// uninline moves an inline file's bytes to its chains: chains are assigned
// first, the bytes written and synced there, and only then is the inline
// copy dropped, so a crash at any point loses nothing. st.mu is held.
func (c *Client) uninline(st *fileState) error {
	var n proto.Inode
	r := proto.UninlineReq{Ino: st.ino, AssignOnly: true, Session: c.session}
	if err := c.metaCall(proto.OpUninline, r.Encode, decodeInode(&n)); err != nil {
		return err
	}
	if n.Stripe.EC.On() {
		np, err := c.uninlineEC(st, &n)
		if err != nil {
			return err
		}
		st.inode = *np
		return nil
	}
	if n.Inline && len(n.InlineData) > 0 {
		if err := c.writePieces(&n, 0, n.InlineData, true); err != nil {
			return err
		}
	}
	r.AssignOnly = false
	np, err := c.inodeCall(proto.OpUninline, r.Encode)
	if err != nil {
		return err
	}
	st.inode = *np
	return nil
}

// truncateData makes a file's chunks match a new size before the metadata
// records it: chunks past the end are deleted and the last one cut, so that
// growing the file later exposes zeros, never old bytes.
func (c *Client) truncateData(ino uint64, size uint64) error {
	st := c.lookupState(ino)
	var n proto.Inode
	if st != nil {
		st.inflight.waitAll()
		st.mu.Lock()
		defer st.mu.Unlock()
		if err := c.announceWriting(st); err != nil { // a truncate deletes data
			return err
		}
		if !st.unreportedErr() { // the writes before the truncate (a failed one is reported by close)
			if err := c.commitLocked(st, false); err != nil {
				return err
			}
		}
		if st.inode.Inline && size > uint64(c.InlineLimit()) && !allZero(st.inode.InlineData) {
			if err := c.uninline(st); err != nil {
				return err
			}
		}
		n = st.inode
	} else {
		r := proto.InoReq{Ino: ino}
		if err := c.metaCall(proto.OpGetAttr, r.Encode, decodeInode(&n)); err != nil {
			return err
		}
		if n.Inline && size > uint64(c.InlineLimit()) && !allZero(n.InlineData) {
			tmp := &fileState{ino: ino, inode: n, written: map[chunkKey]struct{}{}}
			if n.Stripe.EC.On() {
				tmp.ec.Store(newECState())
			}
			if err := c.uninline(tmp); err != nil {
				return err
			}
			n = tmp.inode
		}
	}
	if n.Mode&syscall.S_IFMT != syscall.S_IFREG || n.Inline || len(n.Chains) == 0 {
		return nil
	}
	if st != nil {
		st.ra.invalidate()
	}
	if n.Stripe.EC.On() {
		// The metadata service cuts an erasure-coded file's stripes with
		// its size (stripe versions are never changed in place).
		return nil
	}
	return c.trimChunks(&n, size)
}

func allZero(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), len(zeroBlock))
		if !bytes.Equal(b[:n], zeroBlock[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

// zeroBlock is what allZero compares with (bytes.Equal is vectorised).
var zeroBlock = make([]byte, 64<<10)

func errIO(format string, args ...any) error { return rpc.Errorf(syscall.EIO, format, args...) }

// OverlayAttr applies this client's uncommitted writes (size, mtime) to n,
// for callers that got n from a call that does not (Lookup, Link).
func (c *Client) OverlayAttr(n *proto.Inode) { c.overlay(n) }
