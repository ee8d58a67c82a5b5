package client

import (
	"slices"
	"sync"
	"time"

	"tandemfs/internal/proto"
	"tandemfs/internal/wire"
)

// File leases, the client's side (the contract is in proto/lease.go): a
// file this client holds a lease on is opened with the attributes in the
// namespace cache, without a call to the metadata service.
//
// A lease must never cover a change by another session. So:
//   - a lease is granted as of a change index (from): a change by
//     another session after it, seen on the watch, ends the lease, and
//     one seen before the grant's reply arrived refuses the grant (the
//     leader waits for this client's watch to pass such a change before
//     answering it);
//   - the watch renews every lease; a lease is trusted for nine tenths of
//     its term counted from when the last answered watch request (or the
//     grant's request) was sent, and nine tenths of its life;
//   - a broken or lost watch ends every lease, and refuses grants whose
//     replies are still on their way.
// The cached inode used must be at least as new as the one granted with.

const (
	fileLeaseTrust = proto.FileLeaseMs * time.Millisecond * 9 / 10
	fileLeaseLife  = proto.FileLeaseLifeMs * time.Millisecond * 9 / 10
)

type fileLeaseTable struct {
	mu   sync.Mutex
	held map[uint64]fileLease
	// foreign holds the index of the last change by another session
	// seen to each file; below floor, such changes are not known (the
	// record was emptied, or the watch broke), so no grant as of an
	// earlier index is taken.
	foreign   map[uint64]uint64
	floor     uint64
	renewSent time.Time // when the last answered watch request was sent
	// Leases given back (OpFileLeaseRelease): those evicted to stay
	// under the leader's bound, those granted but not taken, and those
	// a broken watch ended. evicted waits to be sent; giving holds, per
	// file, when its last release came back (zero while one is on its
	// way). No grant of such a file is taken that was asked for before
	// then: the leader may have applied the release after the grant.
	evicted []uint64
	giving  map[uint64]givenBack
	pruned  time.Time // when giving was last rid of releases that no longer matter
}

// givenBack is where a file's lease stands in being given back: queued
// in evicted, on its way (done zero), or given back at done.
type givenBack struct {
	queued bool
	done   time.Time
}

type fileLease struct {
	sent    time.Time // when the request that got it was sent
	from    uint64    // the change index it was granted as of
	version uint64    // the inode's version then
}

func newFileLeaseTable() *fileLeaseTable {
	return &fileLeaseTable{held: map[uint64]fileLease{}, foreign: map[uint64]uint64{}, giving: map[uint64]givenBack{}}
}

// install takes a lease on ino granted as of index from (the inode then
// at version) by a request sent at sent, unless a change by another
// session after from is known or may have been missed.
func (t *fileLeaseTable) install(ino, from, version uint64, sent time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	g, giving := t.giving[ino]
	if from < t.floor || t.foreign[ino] > from || giving && (g.done.IsZero() || sent.Before(g.done)) {
		// The leader counts the lease all the same: it goes back, or
		// the session would reach the leader's bound before its table.
		delete(t.held, ino)
		t.giveBackLocked(ino)
		return false
	}
	t.held[ino] = fileLease{sent: sent, from: from, version: version}
	// Near the leader's bound, past which it grants no more, the older
	// half goes back (with room for leases the leader holds and this
	// table does not: given back, but not yet forgotten).
	if len(t.held) >= proto.MaxFileLeases-fileLeaseSlack {
		t.evictOlderHalfLocked()
	}
	return true
}

// fileLeaseSlack is how far below the leader's bound the table gives
// back its older half.
const fileLeaseSlack = 1024

// giveBackLocked queues ino's lease to be given back.
func (t *fileLeaseTable) giveBackLocked(ino uint64) {
	if t.giving[ino].queued {
		return
	}
	t.evicted = append(t.evicted, ino)
	t.giving[ino] = givenBack{queued: true}
}

// evictOlderHalfLocked stops trusting the older half of the leases held
// (by when they were asked for) and queues them to be given back.
func (t *fileLeaseTable) evictOlderHalfLocked() {
	sent := make([]time.Time, 0, len(t.held))
	for _, l := range t.held {
		sent = append(sent, l.sent)
	}
	slices.SortFunc(sent, time.Time.Compare)
	median, half := sent[len(sent)/2], len(sent)/2
	gone := 0
	for ino, l := range t.held {
		if l.sent.Before(median) {
			delete(t.held, ino)
			t.giveBackLocked(ino)
			gone++
		}
	}
	for ino, l := range t.held { // ties with the median, up to half
		if gone >= half {
			break
		}
		if l.sent.Equal(median) {
			delete(t.held, ino)
			t.giveBackLocked(ino)
			gone++
		}
	}
}

// takeEvicted returns the leases to give back; releaseDone records when
// their release came back.
func (t *fileLeaseTable) takeEvicted() []uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	files := t.evicted
	t.evicted = nil
	for _, ino := range files {
		t.giving[ino] = givenBack{} // on its way
	}
	return files
}

// releaseDone records that the release of files came back (or failed: a
// leader that did not apply it has no lease of this client's to drop,
// since a new leader starts with none) at now. A release older than a
// lease's life no longer matters: a grant asked for before it would be
// trusted no more.
func (t *fileLeaseTable) releaseDone(files []uint64, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if now.Sub(t.pruned) > time.Second {
		t.pruned = now
		for ino, g := range t.giving {
			if !g.done.IsZero() && now.Sub(g.done) > fileLeaseLife {
				delete(t.giving, ino)
			}
		}
	}
	for _, ino := range files {
		if g, ok := t.giving[ino]; ok && !g.queued && g.done.IsZero() {
			t.giving[ino] = givenBack{done: now}
		}
	}
}

// valid reports whether this client holds a live lease on ino, and the
// inode version it was granted with.
func (t *fileLeaseTable) valid(ino uint64, now time.Time) (uint64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l, ok := t.held[ino]
	if !ok {
		return 0, false
	}
	end := minTime(l.sent.Add(fileLeaseLife), later(l.sent, t.renewSent).Add(fileLeaseTrust))
	return l.version, now.Before(end)
}

// foreignChange takes in a change to ino by another session at index,
// and reports whether it ended a lease.
func (t *fileLeaseTable) foreignChange(ino, index uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.foreign[ino] = max(t.foreign[ino], index)
	if len(t.foreign) > cacheMax {
		clear(t.foreign)
		t.floor = max(t.floor, index)
	}
	l, ok := t.held[ino]
	if !ok || index <= l.from {
		return false
	}
	delete(t.held, ino)
	return true
}

// renewed records that a watch request sent at sent was answered, on the
// stream the leases were granted on: it renewed them all.
func (t *fileLeaseTable) renewed(sent time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.renewSent = later(t.renewSent, sent)
}

// clear ends every lease: the watch broke (changes may be missed until
// index floor; ^0 while not known) or was lost.
func (t *fileLeaseTable) clear(floor uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for ino := range t.held { // the leader may hold them a while yet
		t.giveBackLocked(ino)
	}
	clear(t.held)
	clear(t.foreign)
	t.floor, t.renewSent = floor, time.Time{}
}

// resumed sets the floor once the watch answers again: changes before
// index upto may have been missed.
func (t *fileLeaseTable) resumed(upto uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.floor == ^uint64(0) {
		t.floor = upto
	}
}

// count is the number of leases held, live or not.
func (t *fileLeaseTable) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.held)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// OpenAttr returns inode ino's current attributes for an open (with this
// client's unflushed writes applied): from the namespace cache when a
// file lease vouches for them, otherwise from the leader, asking for a
// lease. asked reports the latter: then another client may have changed
// the file since the kernel in front of this client last had its
// attributes, and a caller with such a cache must drop them.
func (c *Client) OpenAttr(ino uint64) (n *proto.Inode, asked bool, err error) {
	if version, ok := c.fileLeases.valid(ino, time.Now()); ok {
		if n, ok := c.ns.peekInode(ino); ok && n.Version >= version {
			c.overlay(&n)
			return &n, false, nil
		}
	}
	if !c.ns.watching() {
		n, err := c.FreshAttr(ino)
		return n, true, err
	}
	wm := c.ns.watermark()
	sent := time.Now()
	r := proto.InoReq{Ino: ino, Session: c.session}
	var reply proto.FileLeaseReply
	if err := c.metaCall(proto.OpFileLease, r.Encode, func(d *wire.Dec) error { reply.Decode(d); return nil }); err != nil {
		return nil, true, err
	}
	n = &reply.Inode
	c.ns.putInode(n, wm)
	if reply.Granted {
		c.fileLeases.install(ino, reply.Index, n.Version, sent)
		c.giveBackFileLeases()
	}
	c.overlay(n)
	return n, true, nil
}

// giveBackFileLeases sends the leader the leases this client stopped
// trusting to make room for new ones, in the background.
func (c *Client) giveBackFileLeases() {
	files := c.fileLeases.takeEvicted()
	if files == nil {
		return
	}
	all := files
	c.inBackground(func() {
		for len(files) > 0 {
			r := proto.FileLeaseRelease{Session: c.session, Files: files[:min(len(files), proto.MaxFileLeaseRelease)]}
			if err := c.metaCall(proto.OpFileLeaseRelease, r.Encode, nil); err != nil {
				c.cfg.Logf("client: giving back %d file leases: %v", len(r.Files), err)
			}
			files = files[len(r.Files):]
		}
		c.fileLeases.releaseDone(all, time.Now())
	})
}

// FileLeases is the number of file leases this client holds.
func (c *Client) FileLeases() int { return c.fileLeases.count() }
