package meta

import (
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"tandemfs/internal/proto"
)

// registerTargets adds n targets of server srv to the store and forms
// chains, as a server's registration does; it returns the chains.
func registerTargets(t *testing.T, f *FSM, srv uint32, ids ...uint32) []proto.Chain {
	t.Helper()
	tx := &tx{f: f, b: f.db.NewIndexedBatch()}
	for _, id := range ids {
		tg := proto.Target{ID: id, Server: srv}
		tx.b.Set(u32Key(prefixTarget, id), marshalTarget(&tg), nil)
	}
	if err := tx.formChains(); err != nil {
		t.Fatal(err)
	}
	if err := tx.b.Commit(pebble.NoSync); err != nil { // the store has no WAL
		t.Fatal(err)
	}
	chains, err := loadChains(f.db)
	if err != nil {
		t.Fatal(err)
	}
	return chains
}

func pairs(chains []proto.Chain) []proto.Chain {
	var out []proto.Chain
	for _, c := range chains {
		if len(c.Targets) == 2 {
			out = append(out, c)
		}
	}
	return out
}

func TestAServerAddedAloneIsChainedWithTheLeastUsedServers(t *testing.T) {
	f, err := OpenFSM(t.TempDir(), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer f.db.Close()
	server := map[uint32]uint32{1: 1, 2: 1, 3: 2, 4: 2, 5: 3, 6: 3}

	if c := registerTargets(t, f, 1, 1, 2); len(c) != 0 {
		t.Fatalf("one server formed chains %+v", c)
	}
	if c := pairs(registerTargets(t, f, 2, 3, 4)); len(c) != 2 {
		t.Fatalf("two servers of two targets formed %d pairs, want 2: %+v", len(c), c)
	}
	chains := pairs(registerTargets(t, f, 3, 5, 6))
	if len(chains) != 4 {
		t.Fatalf("after a third server: %d pairs, want 4: %+v", len(chains), chains)
	}
	uses := map[uint32]int{}   // per target
	perSrv := map[uint32]int{} // per server
	for _, c := range chains {
		if server[c.Targets[0]] == server[c.Targets[1]] {
			t.Fatalf("chain %d has both copies on server %d", c.ID, server[c.Targets[0]])
		}
		for _, m := range c.Targets {
			uses[m]++
			perSrv[server[m]]++
		}
	}
	for id := uint32(1); id <= 6; id++ {
		if uses[id] == 0 {
			t.Fatalf("target %d is in no replicated chain: %+v", id, chains)
		}
	}
	if perSrv[1] != 3 || perSrv[2] != 3 || perSrv[3] != 2 {
		t.Fatalf("chain memberships per server %v, want 3, 3, 2 (spread over the old servers)", perSrv)
	}
	for _, c := range chains[2:] {
		if server[c.Targets[0]] != 3 {
			t.Fatalf("chain %d is headed by target %d, not the new server's", c.ID, c.Targets[0])
		}
	}
}

func TestTargetsThatAreNotServingAreNoPartners(t *testing.T) {
	f, err := OpenFSM(t.TempDir(), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer f.db.Close()
	registerTargets(t, f, 1, 1)
	chains := registerTargets(t, f, 2, 2)
	// Target 1's server failed: it is offline in the chain.
	c := chains[0]
	c.States[0] = proto.MemberOffline
	tx := &tx{f: f, b: f.db.NewIndexedBatch()}
	tx.b.Set(u32Key(prefixChain, c.ID), marshalChain(&c), nil)
	if err := tx.b.Commit(pebble.NoSync); err != nil { // the store has no WAL
		t.Fatal(err)
	}
	got := pairs(registerTargets(t, f, 3, 3))
	for _, c := range got[1:] {
		for _, m := range c.Targets {
			if m == 1 {
				t.Fatalf("offline target 1 became a partner: %+v", c)
			}
		}
	}
	if len(got) != 2 {
		t.Fatalf("%d pairs, want the old one and target 3 with target 2: %+v", len(got), got)
	}
}

// Files with one copy striped over fewer targets than there are spread
// over servers before they reuse one: with four targets on two servers,
// every file striped over two gets one target on each server.
func TestOneCopyStripesSpreadOverServersFirst(t *testing.T) {
	targets := []proto.Target{{ID: 1, Server: 1}, {ID: 2, Server: 1}, {ID: 3, Server: 2}, {ID: 4, Server: 2}}
	var chains []proto.Chain
	for _, tg := range targets {
		chains = append(chains, proto.Chain{ID: tg.ID, Targets: []uint32{tg.ID}})
	}
	f := &FSM{chainsByReplicas: spreadChains(chains, targets)}
	server := map[uint32]uint32{1: 1, 2: 1, 3: 2, 4: 2}
	for ino := uint64(100); ino < 108; ino++ {
		s := proto.Stripe{Count: 2, Replicas: 1}
		picked := f.pickChains(ino, &s)
		if len(picked) != 2 || server[picked[0]] == server[picked[1]] {
			t.Fatalf("inode %d got targets %v: both on one server", ino, picked)
		}
	}
	// Uneven servers: three targets on one, one on the other. Every target
	// is still used, and the lone server's target comes up in turn.
	targets[2].Server = 1
	got := spreadChains(chains, targets)[1]
	if len(got) != 4 || got[0] != 1 || got[1] != 4 {
		t.Fatalf("order %v, want 1 then 4 (one per server first)", got)
	}
}

// A target failed after disk errors is held out of its chains; its
// server bringing it back (OpTargetRecovered) makes it syncing there, so
// its head resyncs it, and lifts the hold. A target not failed is left
// as it is.
func TestARecoveredTargetRejoinsItsChainsAsSyncing(t *testing.T) {
	f, err := OpenFSM(t.TempDir(), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer f.db.Close()
	registerTargets(t, f, 1, 1)
	registerTargets(t, f, 2, 2)
	apply := func(fn func(tx *tx) error) {
		t.Helper()
		tx := &tx{f: f, b: f.db.NewIndexedBatch()}
		if err := fn(tx); err != nil {
			t.Fatal(err)
		}
		if err := tx.b.Commit(pebble.NoSync); err != nil { // the store has no WAL
			t.Fatal(err)
		}
	}
	stateOf := func(target uint32) uint8 {
		t.Helper()
		chains, err := loadChains(f.db)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range pairs(chains) {
			if st, ok := c.State(target); ok {
				return st
			}
		}
		t.Fatalf("target %d is in no replicated chain", target)
		return 0
	}

	apply(func(tx *tx) error { return tx.recoverTarget(&proto.TargetRecoveredReq{Target: 1}) })
	if st := stateOf(1); st != proto.MemberServing {
		t.Fatalf("a target never failed, recovered: state %d, want serving", st)
	}
	apply(func(tx *tx) error { return tx.failTarget(&proto.TargetFailedReq{Target: 1, Reason: "EIO"}) })
	if st := stateOf(1); st != proto.MemberOffline {
		t.Fatalf("a failed target: state %d, want offline", st)
	}
	if failed, _ := failedTargets(f.db); failed[1] == "" {
		t.Fatal("the failed target is not held out")
	}
	apply(func(tx *tx) error { return tx.recoverTarget(&proto.TargetRecoveredReq{Target: 1}) })
	if st := stateOf(1); st != proto.MemberSyncing {
		t.Fatalf("a recovered target: state %d, want syncing", st)
	}
	if failed, _ := failedTargets(f.db); failed[1] != "" {
		t.Fatal("the recovered target is still held out")
	}
	if st := stateOf(2); st != proto.MemberServing {
		t.Fatalf("its partner: state %d, want serving", st)
	}
}
