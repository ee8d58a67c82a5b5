package storage

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"tandemfs/internal/proto"
)

// Dirty sets: which chunks a returning chain member missed.
//
// Specification. Every storage server keeps, for each replicated chain it
// holds a member of, and for each other member M of that chain that is out
// of date (offline or syncing), a dirty set: the chunks that changed in
// the local copy of the chain while M did not take the changes. When M
// returns as syncing, its chain's head copies to it the chunks of the
// head's dirty set for M, plus every chunk that one of the two copies lacks
// or that differs in size between them, and deletes the chunks the head no
// longer has. Chunks changed after M returned reach M by forwarding and are
// not copied again; chunks written long before it failed are not copied.
//
//  1. Recording. Every change (write, truncate, deletion of chunks) applied
//     to a local chain store, by the head or by a follower, is recorded
//     after it was applied, still under the lock that orders it (the
//     head's chunk or ino lock; on a follower an apply lock, under which
//     the chain version is checked again), in
//     a. the recent log: every chunk changed here in the last recentKeep
//     generations of recentSpan (at least two minutes), and
//     b. the dirty set of each member that is offline in the chain version
//     the change was routed by, or in the chain as this server knows it
//     when it records the change.
//  2. Going out. When this server sees a map in which M is offline and M
//     was not offline in the previous map it saw of that chain, it adds to
//     M's dirty set every chunk changed here since resyncMargin before M's
//     failure time (or before now, if earlier): the changes M acknowledged
//     but may have lost with its page cache (a crashed host), and the
//     changes applied here whose forward to M failed before the leader
//     took M out. It takes them from the recent log; where the log does not
//     reach back that far (this server started less than that before, or
//     dropped older generations), it also scans the local copy of the chain
//     for chunks whose mtime is that recent (a scan in the background,
//     which a resync waits for). Before this server started M was serving,
//     so it took every acknowledged deletion (deletions are durable when
//     acknowledged); the scan cannot see only an unacknowledged deletion
//     whose forward to M failed, of a chunk created again after M returned
//     at the same size. If M failed before this server started, the set is
//     unusable (rule 5).
//  3. Coming back. A syncing M takes every new change by forwarding, so
//     nothing more is added to its set. A head that starts a resync first
//     waits for every change admitted under an older chain version to be
//     applied and recorded (changeBarrier), then takes a copy of the set.
//     If M fails again while syncing, rule 2 applies again.
//  4. Serving. When M serves again in a map, its set is dropped.
//  5. Unusable sets. A set is unusable, until M serves again, if this
//     server first saw M syncing without having seen it offline (a member
//     restarted within the failure timeout, a replaced disk, this server
//     restarted); if this server's own member of the chain was offline or
//     syncing (it missed changes itself); if the chain changed between
//     versions this server did not see, while M was out; if M's failure
//     time is unknown or before this server started (a head restarted
//     within the failure timeout, or as the last serving member, while M
//     was out); if the recent log overflowed or a scan failed; or
//     if the set outgrew dirtyMax. A head without a usable set falls back
//     to the full comparison: it copies every chunk changed since M's
//     failure time minus resyncMargin.
//
// The sets live in memory only: a head that restarts has none, and falls
// back to the full comparison. A new empty disk (tandem target replace)
// lacks every chunk, so the size-and-presence check copies all of it.

const (
	// recentSpan and recentKeep bound the recent log: recentKeep
	// generations of recentSpan each, so it reaches back at least
	// (recentKeep-1)*recentSpan, which must exceed resyncMargin.
	recentSpan = 30 * time.Second
	recentKeep = 5
	// recentMax is the most chunks one generation records; past it the
	// generation is marked overflowed and the log is unusable until that
	// generation is dropped.
	recentMax = 1 << 18
	// dirtyMax is the most entries (chunks and deleted ranges) of one
	// dirty set; past it the set is unusable.
	dirtyMax = 1 << 21
)

// change names the chunks [from, to) of file ino; to == 0 means none (a
// sync changes nothing).
type change struct{ ino, from, to uint64 }

func chunkChange(ino, idx uint64) change { return change{ino, idx, idx + 1} }

// deleteChange is a deletion of chunks [from, to) of ino, to 0 meaning
// every chunk from on (as ChunkDeleteReq).
func deleteChange(ino, from, to uint64) change {
	if to == 0 {
		to = math.MaxUint64
	}
	return change{ino, from, to}
}

type idxRange struct{ from, to uint64 }

// changeSet is a set of changed chunks and deleted ranges of chunks.
type changeSet struct {
	chunks map[chunkKey]struct{}
	ranges map[uint64][]idxRange // by ino
	n      int
}

func newChangeSet() changeSet {
	return changeSet{chunks: map[chunkKey]struct{}{}, ranges: map[uint64][]idxRange{}}
}

func (cs *changeSet) add(c change) {
	switch {
	case c.to <= c.from:
		return
	case c.to == c.from+1:
		k := chunkKey{c.ino, c.from}
		if _, ok := cs.chunks[k]; !ok {
			cs.chunks[k] = struct{}{}
			cs.n++
		}
	default:
		r := idxRange{c.from, c.to}
		if !slices.Contains(cs.ranges[c.ino], r) {
			cs.ranges[c.ino] = append(cs.ranges[c.ino], r)
			cs.n++
		}
	}
}

func (cs *changeSet) merge(o *changeSet) {
	for k := range o.chunks {
		cs.add(chunkChange(k.ino, k.idx))
	}
	for ino, rs := range o.ranges {
		for _, r := range rs {
			cs.add(change{ino, r.from, r.to})
		}
	}
}

// has reports whether chunk k changed, alone or within a deleted range.
func (cs *changeSet) has(k chunkKey) bool {
	if _, ok := cs.chunks[k]; ok {
		return true
	}
	for _, r := range cs.ranges[k.ino] {
		if k.idx >= r.from && k.idx < r.to {
			return true
		}
	}
	return false
}

func (cs *changeSet) clone() changeSet {
	out := changeSet{chunks: maps.Clone(cs.chunks), ranges: make(map[uint64][]idxRange, len(cs.ranges)), n: cs.n}
	for ino, rs := range cs.ranges {
		out.ranges[ino] = slices.Clone(rs)
	}
	return out
}

// generation is one recentSpan of the recent log.
type generation struct {
	start    time.Time
	last     time.Time // of the last change recorded in it
	set      changeSet
	overflow bool
}

// dirtySet is what member M of a chain missed, as this server knows it.
type dirtySet struct {
	usable bool
	why    string // why it is unusable
	set    changeSet
	scans  int // scans of the local copy under way (scanReq)
}

// scanReq asks for the chunks of the local copy (target) of a chain whose
// mtime is at least since, for set (rule 2).
type scanReq struct {
	chain, target uint32
	since         time.Time
	set           *dirtySet
}

func (d *dirtySet) spoil(why string) {
	if d.usable {
		d.usable, d.why = false, why
		d.set = changeSet{}
	}
}

func (d *dirtySet) add(c change) {
	if !d.usable {
		return
	}
	d.set.add(c)
	if d.set.n > dirtyMax {
		d.spoil(fmt.Sprintf("more than %d chunks changed", dirtyMax))
	}
}

// trackedChain is the last version of a chain this server saw, and the
// dirty sets of its out-of-date members.
type trackedChain struct {
	chain proto.Chain
	dirty map[uint32]*dirtySet // by member target
}

// dirtyTracker holds the recent log and the dirty sets of a server.
type dirtyTracker struct {
	mu      sync.Mutex
	now     func() time.Time // time.Now; tests replace it
	started time.Time        // when recording began
	gens    []*generation    // oldest first
	chains  map[uint32]*trackedChain
}

func (tr *dirtyTracker) init(now func() time.Time) {
	tr.now = now
	tr.started = now()
	tr.gens = []*generation{{start: tr.started, set: newChangeSet()}}
	tr.chains = map[uint32]*trackedChain{}
}

// rotate starts a new generation of the recent log when the newest one is
// recentSpan old, and drops the oldest beyond recentKeep.
func (tr *dirtyTracker) rotate(now time.Time) {
	if now.Sub(tr.gens[len(tr.gens)-1].start) >= recentSpan {
		tr.gens = append(tr.gens, &generation{start: now, set: newChangeSet()})
	}
	if len(tr.gens) > recentKeep {
		tr.gens = slices.Delete(tr.gens, 0, len(tr.gens)-recentKeep)
	}
}

// mergeRecent adds to d the chunks of the recent log changed since cutoff
// (whole generations: a superset). If the log does not reach back to
// cutoff it returns a request to scan the local copy of the chain too.
func (tr *dirtyTracker) mergeRecent(d *dirtySet, cutoff time.Time, chain, target uint32) []scanReq {
	if !d.usable {
		return nil
	}
	for _, g := range tr.gens {
		if g.overflow {
			d.spoil(fmt.Sprintf("over %d chunks changed within %v", recentMax, recentSpan))
			return nil
		}
	}
	for _, g := range tr.gens {
		if !g.last.Before(cutoff) {
			d.set.merge(&g.set)
		}
	}
	if d.set.n > dirtyMax {
		d.spoil(fmt.Sprintf("more than %d chunks changed", dirtyMax))
		return nil
	}
	if tr.gens[0].start.After(cutoff) {
		d.scans++
		return []scanReq{{chain: chain, target: target, since: cutoff, set: d}}
	}
	return nil
}

// scanned adds the chunks a scan found (or its failure) to its set.
func (tr *dirtyTracker) scanned(req scanReq, found []chunkKey, err error) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	d := req.set
	d.scans--
	if err != nil {
		d.spoil(fmt.Sprintf("scanning the chunks changed since %s: %v", req.since.Format(time.TimeOnly), err))
		return
	}
	for _, k := range found {
		d.add(chunkChange(k.ino, k.idx))
	}
}

// record notes change ch, applied to the local store of chain c (as of
// the version it was routed by); cur is the chain as this server knows it
// now (rule 1).
func (tr *dirtyTracker) record(c, cur *proto.Chain, ch change) {
	if ch.to <= ch.from {
		return
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	now := tr.now()
	tr.rotate(now)
	g := tr.gens[len(tr.gens)-1]
	g.last = now
	if !g.overflow {
		g.set.add(ch)
		if g.set.n > recentMax {
			g.overflow, g.set = true, changeSet{}
		}
	}
	tc := tr.chains[c.ID]
	if tc == nil {
		return // no member out: seen only through the recent log
	}
	for _, ch2 := range []*proto.Chain{c, cur} {
		if ch2 == nil {
			continue
		}
		for i, t := range ch2.Targets {
			if i < len(ch2.States) && ch2.States[i] == proto.MemberOffline {
				if d := tc.dirty[t]; d != nil {
					d.add(ch)
				}
			}
		}
	}
}

// observe applies a new map to the dirty sets (rules 2, 4 and 5). local
// reports whether a target is on this server. The caller runs the scans
// it returns and reports them to scanned.
func (tr *dirtyTracker) observe(chains map[uint32]proto.Chain, local func(uint32) bool) (scans []scanReq) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	now := tr.now()
	tr.rotate(now)
	for id := range tr.chains {
		if _, ok := chains[id]; !ok {
			delete(tr.chains, id)
		}
	}
	for id, c := range chains {
		if len(c.Targets) < 2 || len(c.States) != len(c.Targets) || len(c.SinceMs) != len(c.Targets) {
			continue
		}
		own := -1
		for i, t := range c.Targets {
			if local(t) {
				own = i
			}
		}
		if own < 0 {
			delete(tr.chains, id)
			continue
		}
		tc := tr.chains[id]
		if tc != nil && c.Version <= tc.chain.Version {
			continue // seen already
		}
		// gap: versions this server did not see (or the first map).
		gap := tc == nil || c.Version != tc.chain.Version+1
		if tc == nil {
			tc = &trackedChain{dirty: map[uint32]*dirtySet{}}
			tr.chains[id] = tc
		}
		prev := tc.chain
		tc.chain = c
		ownOut := c.States[own] != proto.MemberServing
		for i, t := range c.Targets {
			if i == own {
				continue
			}
			st := c.States[i]
			if st == proto.MemberServing {
				delete(tc.dirty, t)
				continue
			}
			prevState, wasMember := prev.State(t)
			d := tc.dirty[t]
			switch {
			case d == nil && st == proto.MemberOffline:
				d = &dirtySet{usable: true, set: newChangeSet()}
				cutoff := now
				if since := c.SinceMs[i]; since > 0 && time.UnixMilli(since).Before(cutoff) {
					cutoff = time.UnixMilli(since)
				}
				switch since := c.SinceMs[i]; {
				case since == 0:
					d.spoil("its failure time is unknown")
				case time.UnixMilli(since).Before(tr.started):
					// Changes made here by this server's previous
					// run while M was out, deletions among them,
					// are unknown.
					d.spoil("it failed before this server started")
				}
				scans = append(scans, tr.mergeRecent(d, cutoff.Add(-resyncMargin), id, c.Targets[own])...)
			case d == nil: // syncing
				d = &dirtySet{why: "it was not seen offline before it came back"}
			case gap:
				d.spoil("the chain changed in versions this server did not see")
			case st == proto.MemberOffline && (!wasMember || prevState != proto.MemberOffline):
				// Out again while syncing.
				scans = append(scans, tr.mergeRecent(d, now.Add(-resyncMargin), id, c.Targets[own])...)
			}
			if ownOut {
				d.spoil("this server's copy was out of date too")
			}
			tc.dirty[t] = d
		}
	}
	return scans
}

// snapshot returns a copy of the dirty set of member m of chain c as of
// c.Version, or why there is no usable one; busy if a scan for it is
// under way.
func (tr *dirtyTracker) snapshot(c proto.Chain, m uint32) (set changeSet, why string, busy bool) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tc := tr.chains[c.ID]
	switch {
	case tc == nil:
		return changeSet{}, "this server has no record of the chain", false
	case tc.chain.Version != c.Version:
		return changeSet{}, fmt.Sprintf("this server's record is of chain version %d, not %d", tc.chain.Version, c.Version), false
	}
	d := tc.dirty[m]
	switch {
	case d == nil:
		return changeSet{}, "this server has no record of what it missed", false
	case !d.usable:
		return changeSet{}, d.why, false
	case d.scans > 0:
		return changeSet{}, "scanning for recent changes", true
	}
	return d.set.clone(), "", false
}

// scanChanged runs a scan that observe asked for: the chunks of the local
// copy of the chain changed since req.since.
func (s *Service) scanChanged(req scanReq) {
	found, err := func() ([]chunkKey, error) {
		tg, err := s.target(req.target)
		if err != nil {
			return nil, err
		}
		store, err := s.chainStore(tg, req.chain)
		if err != nil {
			return nil, err
		}
		since := req.since.UnixMilli()
		var found []chunkKey
		for b := range Buckets {
			list, _, err := store.ListBucket(uint8(b), true, 0, 0, math.MaxInt)
			if err != nil {
				return nil, err
			}
			for _, st := range list {
				if st.MtimeMs >= since {
					found = append(found, chunkKey{st.Ino, st.Index})
				}
			}
		}
		return found, nil
	}()
	s.dirty.scanned(req, found, err)
}

// observeMap applies a new map to the dirty sets and starts the scans
// they need, to the Go processors kept for resyncs (procs.go), and to the
// chain stores and connections made ahead of the first write (prepare.go).
func (s *Service) observeMap(v *chainView) {
	s.followResyncs(v)
	s.releaseLost(v)
	s.prepareChainStores(v)
	s.warmFollowers(v)
	for _, req := range s.dirty.observe(v.chains, func(t uint32) bool { _, err := s.target(t); return err == nil }) {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.scanChanged(req)
		}()
	}
}
