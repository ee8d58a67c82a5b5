package storage

import (
	"strings"
	"testing"
	"time"

	"tandemfs/internal/proto"
)

// Specification of the dirty sets (dirty.go), checked on the tracker
// alone: which chunks a resync must copy to a member that returns.

const (
	sv = proto.MemberServing
	sy = proto.MemberSyncing
	of = proto.MemberOffline
)

// dirtyWorld drives a tracker with a fake clock, as the server holding
// target 1 of chain 100 (targets 1, 2 and possibly 3).
type dirtyWorld struct {
	t   *testing.T
	now time.Time
	tr  dirtyTracker
	cur proto.Chain
	// mtimes of the local copy's chunks of file 7, for scans; a scan
	// asked for is run at once unless holdScans is set.
	mtimes    map[uint64]time.Time
	holdScans bool
	scans     []scanReq
}

func newDirtyWorld(t *testing.T) *dirtyWorld {
	w := &dirtyWorld{t: t, now: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC), mtimes: map[uint64]time.Time{}}
	w.tr.init(func() time.Time { return w.now })
	return w
}

// runScans runs the scans asked for over the chunk mtimes.
func (w *dirtyWorld) runScans() {
	for _, req := range w.scans {
		var found []chunkKey
		for idx, mt := range w.mtimes {
			if !mt.Before(req.since) {
				found = append(found, chunkKey{7, idx})
			}
		}
		w.tr.scanned(req, found, nil)
	}
	w.scans = nil
}

func (w *dirtyWorld) wait(d time.Duration) { w.now = w.now.Add(d) }

// chain makes version ver of chain 100 with the states given for
// targets 1, 2, ...; members not serving failed at the current time.
func (w *dirtyWorld) chain(ver uint32, states ...uint8) proto.Chain {
	c := proto.Chain{ID: 100, Version: ver}
	for i, st := range states {
		c.Targets = append(c.Targets, uint32(i+1))
		c.States = append(c.States, st)
		var since int64
		if st != sv {
			since = w.now.UnixMilli()
		}
		c.SinceMs = append(c.SinceMs, since)
	}
	return c
}

// see makes the tracker observe chain c (target 1 is local).
func (w *dirtyWorld) see(c proto.Chain) {
	w.cur = c
	w.scans = append(w.scans, w.tr.observe(map[uint32]proto.Chain{c.ID: c}, func(t uint32) bool { return t == 1 })...)
	if !w.holdScans {
		w.runScans()
	}
}

// write records a change of chunk idx of file 7 routed by the current chain.
func (w *dirtyWorld) write(idx uint64) {
	c := w.cur
	w.mtimes[idx] = w.now
	w.tr.record(&c, &c, chunkChange(7, idx))
}

// dirty is the set of member m, failing the test if it is unusable.
func (w *dirtyWorld) dirty(m uint32) changeSet {
	w.t.Helper()
	set, why, _ := w.tr.snapshot(w.cur, m)
	if why != "" {
		w.t.Fatalf("no usable dirty set for target %d: %s", m, why)
	}
	return set
}

func (w *dirtyWorld) unusable(m uint32, want string) {
	w.t.Helper()
	_, why, _ := w.tr.snapshot(w.cur, m)
	if why == "" || !strings.Contains(why, want) {
		w.t.Fatalf("dirty set of target %d: got reason %q, want one containing %q", m, why, want)
	}
}

func wantChunks(t *testing.T, set changeSet, want ...uint64) {
	t.Helper()
	if len(set.chunks) != len(want) {
		t.Errorf("dirty set holds %d chunks, want %d (%v)", len(set.chunks), len(want), want)
	}
	for _, idx := range want {
		if !set.has(chunkKey{7, idx}) {
			t.Errorf("chunk 7/%d is not in the dirty set", idx)
		}
	}
}

// A member that returns needs the chunks changed while it was out, and
// those changed shortly before it was taken out (it may have lost them
// with its page cache, or their forward failed before the failover); not
// those changed long before, nor those it took by forwarding after it
// came back.
func TestDirtySetHoldsWhatTheMemberMissed(t *testing.T) {
	w := newDirtyWorld(t)
	w.see(w.chain(1, sv, sv))
	w.write(1) // long before the failure
	w.wait(5 * time.Minute)
	w.write(2) // shortly before: the member may have lost it
	w.wait(3 * time.Second)
	w.see(w.chain(2, sv, of))
	w.write(3) // while it was out
	w.write(2)
	w.see(w.chain(3, sv, sy))
	w.write(4) // forwarded to it after it came back
	w.write(3)
	wantChunks(t, w.dirty(2), 2, 3)

	w.see(w.chain(4, sv, sv))
	w.unusable(2, "no record of what it missed")
}

// Deleted chunks are recorded as ranges: a chunk in a range deleted while
// the member was out must be copied even if it exists again on both
// copies with the same size.
func TestDirtySetHoldsChunksDeletedWhileOut(t *testing.T) {
	w := newDirtyWorld(t)
	w.see(w.chain(1, sv, sv))
	w.wait(5 * time.Minute)
	w.see(w.chain(2, sv, of))
	c := w.cur
	w.tr.record(&c, &c, deleteChange(7, 10, 0))
	w.see(w.chain(3, sv, sy))
	set := w.dirty(2)
	for _, idx := range []uint64{10, 11, 1 << 40} {
		if !set.has(chunkKey{7, idx}) {
			t.Errorf("chunk 7/%d, deleted while the member was out, is not in its dirty set", idx)
		}
	}
	if set.has(chunkKey{7, 9}) || set.has(chunkKey{8, 10}) {
		t.Error("chunks outside the deleted range are in the dirty set")
	}
}

// Changes recorded after the map moved on, but routed by a version in
// which the member was offline (admitted before the map change), count.
func TestDirtySetTakesChangesRoutedByTheOldVersion(t *testing.T) {
	w := newDirtyWorld(t)
	w.see(w.chain(1, sv, sv))
	w.wait(5 * time.Minute)
	w.see(w.chain(2, sv, of))
	old := w.cur
	w.see(w.chain(3, sv, sy))
	w.tr.record(&old, &w.cur, chunkChange(7, 5))
	wantChunks(t, w.dirty(2), 5)
}

// A server that has not recorded changes for resyncMargin before the
// failure (it started since) finds the chunks changed in that time by
// their mtime, in a scan that a resync waits for.
func TestDirtySetOfAFreshServerScansForRecentChanges(t *testing.T) {
	w := newDirtyWorld(t)
	w.mtimes[1] = w.now.Add(-10 * time.Minute) // before this server started
	w.mtimes[2] = w.now.Add(-40 * time.Second) // by the server's last run
	w.see(w.chain(1, sv, sv))
	w.wait(15 * time.Second)
	w.write(3)
	w.wait(5 * time.Second)
	w.holdScans = true
	w.see(w.chain(2, sv, of))
	w.write(4)
	w.see(w.chain(3, sv, sy))
	if _, why, busy := w.tr.snapshot(w.cur, 2); !busy {
		t.Fatalf("dirty set ready (%q) before the scan ended", why)
	}
	w.runScans()
	w.write(5) // forwarded to the member
	wantChunks(t, w.dirty(2), 2, 3, 4)
}

// A server that started after the member failed (its previous run, or a
// partner, made changes while the member was out, deletions among them)
// does not know what the member missed.
func TestDirtySetOfAServerStartedAfterTheFailureIsUnusable(t *testing.T) {
	w := newDirtyWorld(t)
	c := w.chain(2, sv, of)
	c.SinceMs[1] = w.now.Add(-10 * time.Second).UnixMilli()
	w.see(c)
	w.write(1)
	w.see(w.chain(3, sv, sy))
	w.unusable(2, "before this server started")
}

// A member seen syncing without having been seen offline (restarted
// within the failure timeout, a replaced disk, or this server restarted
// meanwhile) has no usable set; nor has one whose chain changed in
// versions this server did not see.
func TestDirtySetNeedsTheWholeStory(t *testing.T) {
	w := newDirtyWorld(t)
	w.see(w.chain(1, sv, sv))
	w.wait(5 * time.Minute)
	w.see(w.chain(2, sv, sy))
	w.unusable(2, "not seen offline")

	w.see(w.chain(3, sv, sv))
	w.see(w.chain(4, sv, of))
	w.see(w.chain(7, sv, sy))
	w.unusable(2, "did not see")

	// An unusable set stays so until the member serves again.
	w.see(w.chain(8, sv, of))
	w.see(w.chain(9, sv, sy))
	w.unusable(2, "did not see")
	w.see(w.chain(10, sv, sv))
	w.see(w.chain(11, sv, of))
	w.write(1)
	w.see(w.chain(12, sv, sy))
	wantChunks(t, w.dirty(2), 1)
}

// A member that fails again while syncing may have lost what it took by
// forwarding just before: the recent changes are added again.
func TestDirtySetGrowsWhenTheMemberFailsAgainWhileSyncing(t *testing.T) {
	w := newDirtyWorld(t)
	w.see(w.chain(1, sv, sv))
	w.wait(5 * time.Minute)
	w.see(w.chain(2, sv, of))
	w.write(1)
	w.see(w.chain(3, sv, sy))
	w.wait(2 * time.Minute) // the resync runs long
	w.write(2)              // forwarded, then lost
	w.see(w.chain(4, sv, of))
	w.see(w.chain(5, sv, sy))
	wantChunks(t, w.dirty(2), 1, 2)
}

// With three copies, a follower records what an offline member misses,
// so that it can resync that member when it becomes head. A server whose
// own copy was out of date knows nothing reliable.
func TestDirtySetOfAFollowerServesWhenTheHeadChanges(t *testing.T) {
	w := newDirtyWorld(t)
	// Target 1 (local) is the second member: chain order 2, 1, 3.
	c := func(ver uint32, head, self, third uint8) proto.Chain {
		ch := w.chain(ver, head, self, third)
		ch.Targets = []uint32{2, 1, 3}
		return ch
	}
	w.see(c(1, sv, sv, sv))
	w.wait(5 * time.Minute)
	w.see(c(2, sv, sv, of)) // target 3 out; target 2 heads, 1 follows
	w.write(1)
	w.see(c(3, of, sv, of)) // the head fails: target 1 heads
	w.write(2)
	w.see(c(4, of, sv, sy))
	wantChunks(t, w.dirty(3), 1, 2)
	w.see(c(5, sy, sv, sy))
	// Chunk 1 changed shortly before the old head failed: it may have
	// lost it.
	wantChunks(t, w.dirty(2), 1, 2)

	w.see(c(6, sv, sv, sv))
	w.see(c(7, sv, of, of))
	w.see(c(8, sv, sy, sy))
	w.unusable(3, "copy was out of date")
}
