package client

import (
	"sync"
	"time"

	"tandemfs/internal/proto"
	"tandemfs/internal/wire"
)

// Directory leases, the client's side (the contract is in proto/lease.go):
// a directory this client holds a lease on answers "no such name" without
// a call to the metadata service.
//
// A lease's listing must never lack a name the directory has. So:
//   - the listing comes from the leader with the lease, as of a change
//     index (from); the client's own changes after that index add and
//     remove their names;
//   - a change by anyone else after from, seen on the watch, ends the
//     lease (the leader waits for the watch to pass it before answering
//     that change);
//   - a lease is trusted only while the watch is live, and for nine
//     tenths of its term counted from when the request was sent;
//   - anything unexpected (an own change that failed, a lost watch) ends
//     it.
// A listing may hold a name the directory lacks; that only costs a call.

// leaseTrust is how long a lease is trusted after its request was sent.
const leaseTrust = proto.DirLeaseMs * time.Millisecond * 9 / 10

// leaseRetry is how long after a refused lease this client asks again.
const leaseRetry = 2 * time.Second

// missWindow: a second name found missing in one directory within it
// makes the client ask for a lease on that directory.
const missWindow = 2 * time.Second

// leaseNamesMax bounds the names held over all leases; past it every
// lease is dropped.
const leaseNamesMax = 1 << 20

type leaseTable struct {
	mu      sync.Mutex
	dirs    map[uint64]*dirLease
	pending map[uint64]*pendingLease
	refused map[uint64]time.Time // directory → no request before
	misses  map[uint64]time.Time // directory → last name found missing
	names   int                  // over all leases
	// seen holds the index of the last change by others seen to each
	// directory (below seenFloor, not known): the lease on a directory
	// this client made must not start before such a change, whose notice
	// can come before the reply to the mkdir.
	seen      map[uint64]uint64
	seenFloor uint64
}

type dirLease struct {
	names map[string]struct{}
	until time.Time
	from  uint64
}

// pendingLease is a lease asked for: what happened to its directory
// while the request was out decides whether the listing can be trusted.
type pendingLease struct {
	foreign uint64      // the last change by others seen meanwhile
	own     []ownChange // this client's changes seen meanwhile
}

type ownChange struct {
	index uint64
	name  string
	added bool
}

func newLeaseTable() *leaseTable {
	return &leaseTable{dirs: map[uint64]*dirLease{}, pending: map[uint64]*pendingLease{},
		refused: map[uint64]time.Time{}, misses: map[uint64]time.Time{}, seen: map[uint64]uint64{}}
}

// absent reports whether a lease on dir says name is not there.
func (t *leaseTable) absent(dir uint64, name string, now time.Time) bool {
	return t.absentFor(dir, name, now) > 0
}

// absentFor is how much longer, from now, a lease on dir vouches that
// name is not there: 0 if none does.
func (t *leaseTable) absentFor(dir uint64, name string, now time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.dirs[dir]
	if l == nil || !now.Before(l.until) {
		return 0
	}
	if _, there := l.names[name]; there {
		return 0
	}
	return l.until.Sub(now)
}

// missed notes that the leader found no name in dir, and reports whether
// to ask for a lease on it now: on the second miss within missWindow,
// when none is held, asked for or lately refused.
func (t *leaseTable) missed(dir uint64, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	last, seen := t.misses[dir]
	t.misses[dir] = now
	if len(t.misses) > cacheMax {
		clear(t.misses)
	}
	if !seen || now.Sub(last) > missWindow || t.pending[dir] != nil || now.Before(t.refused[dir]) {
		return false
	}
	if l := t.dirs[dir]; l != nil && now.Before(l.until) {
		return false
	}
	t.pending[dir] = &pendingLease{}
	return true
}

// granted settles the request for a lease on dir that was sent at sent.
func (t *leaseTable) granted(dir uint64, r *proto.DirLeaseReply, ok bool, sent time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.pending[dir]
	delete(t.pending, dir)
	if p == nil {
		return // not asked for by missed (a lost watch spoils, never deletes)
	}
	if !ok || !r.Granted || p.foreign > r.Index {
		t.refused[dir] = time.Now().Add(leaseRetry)
		if len(t.refused) > cacheMax {
			clear(t.refused)
		}
		return
	}
	l := &dirLease{names: make(map[string]struct{}, len(r.Names)), until: sent.Add(leaseTrust), from: r.Index}
	for _, n := range r.Names {
		l.names[n] = struct{}{}
	}
	for _, c := range p.own {
		l.apply(c)
	}
	t.install(dir, l)
}

// install puts l in as dir's lease.
func (t *leaseTable) install(dir uint64, l *dirLease) {
	t.dropLocked(dir)
	if t.names+len(l.names) > leaseNamesMax {
		t.clearLocked()
	}
	t.dirs[dir] = l
	t.names += len(l.names)
}

// apply makes an own change at c.index part of the listing, unless the
// listing already holds it.
func (l *dirLease) apply(c ownChange) int {
	if c.index <= l.from {
		return 0
	}
	_, there := l.names[c.name]
	switch {
	case c.added && !there:
		l.names[c.name] = struct{}{}
		return 1
	case !c.added && there:
		delete(l.names, c.name)
		return -1
	}
	return 0
}

// own records this client's change to dir's entries, made at index by a
// request sent at sent (extended: the leader renewed the lease).
func (t *leaseTable) own(dir uint64, c ownChange, extended bool, sent time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.pending[dir]; p != nil {
		p.own = append(p.own, c)
	}
	l := t.dirs[dir]
	if l == nil {
		return
	}
	t.names += l.apply(c)
	if extended {
		l.until = later(l.until, sent.Add(leaseTrust))
	}
}

// newDir installs the lease the leader granted on the directory dir this
// client made at index: it is empty.
func (t *leaseTable) newDir(dir, index uint64, sent time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if index < t.seenFloor || t.seen[dir] > index {
		return // someone put a name in it already
	}
	t.install(dir, &dirLease{names: map[string]struct{}{}, until: sent.Add(leaseTrust), from: index})
}

// foreign takes in a change to dir's entries by someone else, at index.
// It reports whether a lease ended.
func (t *leaseTable) foreign(dir, index uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.pending[dir]; p != nil {
		p.foreign = max(p.foreign, index)
	}
	t.seen[dir] = max(t.seen[dir], index)
	if len(t.seen) > cacheMax {
		clear(t.seen)
		t.seenFloor = max(t.seenFloor, index)
	}
	l := t.dirs[dir]
	if l == nil || index <= l.from {
		return false
	}
	t.dropLocked(dir)
	return true
}

// drop ends the lease on dir (an own change went wrong).
func (t *leaseTable) drop(dir uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.dropLocked(dir)
	if p := t.pending[dir]; p != nil {
		p.foreign = ^uint64(0) // the request's answer cannot be trusted
	}
}

func (t *leaseTable) dropLocked(dir uint64) {
	if l := t.dirs[dir]; l != nil {
		t.names -= len(l.names)
		delete(t.dirs, dir)
	}
}

// clear ends every lease and spoils every request out.
func (t *leaseTable) clear() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.clearLocked()
}

func (t *leaseTable) clearLocked() {
	clear(t.dirs)
	t.names = 0
	for _, p := range t.pending {
		p.foreign = ^uint64(0)
	}
}

// held reports how many leases are held (for tests and status).
func (t *leaseTable) held(now time.Time) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, l := range t.dirs {
		if now.Before(l.until) {
			n++
		}
	}
	return n
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// missed is called when the leader found no name in dir: past the first
// such miss, this client asks for a lease on dir, in the background.
func (c *Client) missed(dir uint64) {
	if !c.ns.watching() || !c.leases.missed(dir, time.Now()) {
		return
	}
	c.inBackground(func() {
		sent := time.Now()
		var reply proto.DirLeaseReply
		r := proto.DirLeaseReq{Dir: dir, Session: c.session}
		err := c.callLeader(proto.OpDirLease, r.Encode, func(d *wire.Dec) error { reply.Decode(d); return nil })
		c.leases.granted(dir, &reply, err == nil, sent)
	})
}

// endLeases ends what is trusted only while the watch is unbroken: the
// directory and file leases, and the blocks the file leases vouch for.
// Changes before index floor may have been missed (^0: not known yet).
func (c *Client) endLeases(floor uint64) {
	c.leases.clear()
	c.fileLeases.clear(floor)
	c.giveBackFileLeases()
	c.blocks.dropAll()
	c.invalidator().ForgetAllAbsent()
}

// AbsentFor is how much longer a directory lease vouches that parent
// holds no entry name: 0 if none does. A cache in front of this client
// may keep the absence that long (the kernel's negative entries): until
// then the leader answers no other client's change to the directory
// before this client's watch took it in and the Invalidator was told
// (ForgetAbsent). Only the watch loop tells it: a FUSE handler must not,
// since the kernel holds the directory's lock while it waits for one.
func (c *Client) AbsentFor(parent uint64, name string) time.Duration {
	if !c.ns.watching() {
		return 0
	}
	if _, ok := c.ns.getDent(parent, name); ok {
		return 0
	}
	return c.leases.absentFor(parent, name, time.Now())
}

// watched takes in the changes of a watch reply (after the namespace
// cache did): others' changes end directory and file leases. It reports
// whether one ended, in which case the leader waits for this client's
// next watch request.
func (c *Client) watched(r *proto.WatchReply, forgetAll bool) (ended bool) {
	if forgetAll {
		c.endLeases(r.Upto)
	}
	for i := range r.Events {
		ev := &r.Events[i]
		if ev.Session == c.session || ev.MapChanged() {
			continue
		}
		if ev.Parent != 0 && c.leases.foreign(ev.Parent, ev.Index) {
			// The leader no longer waits for this client before
			// answering changes to the directory: absences the lease
			// vouched for must go from the caches in front, all of
			// them, before the next watch request acknowledges this.
			c.invalidator().ForgetAbsent(ev.Parent)
			ended = true
		}
		if ev.Parent == 0 {
			// The blocks first: the leader answers the change once
			// this client's next watch request shows it taken in.
			c.blocks.dropFile(ev.Ino)
			c.dropDisk(ev.Ino)
			if c.fileLeases.foreignChange(ev.Ino, ev.Index) {
				ended = true
			}
		}
	}
	return ended
}

// DirLeases is the number of directory leases this client holds now.
func (c *Client) DirLeases() int { return c.leases.held(time.Now()) }
