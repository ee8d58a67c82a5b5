package meta

import (
	"cmp"
	"encoding/binary"
	"maps"
	"slices"
	"syscall"

	"github.com/cockroachdb/pebble/v2"

	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
)

// Replicated chains are formed by the state machine when targets register,
// and change state only through commands in the Raft log (failServer,
// rejoinServer, resyncDone), so that every replica agrees on them and a
// deposed leader cannot change them.

// replicatedChainBase is the first ID of a replicated chain. Chains of one
// target share their target's ID, so the ranges must not meet.
const replicatedChainBase = 1 << 20

// formChains groups targets not yet in a chain of r members into new
// chains of r targets on r different servers, for r = 2 and 3. Members are
// taken from the servers with the most unchained targets first, so that a
// cluster of equal servers pairs up completely, each target in one chain
// of each size; the member order rotates from chain to chain so that heads
// (which serve reads) spread over the servers. Targets left over because
// too few servers have unchained ones (a server added on its own to a
// cluster whose targets are all chained) are chained with targets that
// already are, on the least used other servers: their chunks then live in
// a second store on those targets (chains/<id>/), and the new server's
// capacity is used by replicated files at once, instead of waiting for a
// partner server as a BeeGFS buddy group would.
func (t *tx) formChains() error {
	targets, err := loadTargets(t.b)
	if err != nil {
		return err
	}
	chains, err := loadChains(t.b)
	if err != nil {
		return err
	}
	for r := 2; r <= 3; r++ {
		if err := t.formChainsOf(r, targets, chains); err != nil {
			return err
		}
	}
	return nil
}

func (t *tx) formChainsOf(r int, targets []proto.Target, chains []proto.Chain) error {
	chained := map[uint32]bool{}
	made := 0
	for _, c := range chains {
		if len(c.Targets) == r {
			made++
			for _, id := range c.Targets {
				chained[id] = true
			}
		}
	}
	free := map[uint32][]uint32{} // server -> unchained targets, by ID
	for _, tg := range targets {
		if !chained[tg.ID] {
			free[tg.Server] = append(free[tg.Server], tg.ID)
		}
	}
	uses := map[uint32]int{}    // target -> chains of r it is in
	unwell := map[uint32]bool{} // targets not serving in some chain
	for _, c := range chains {
		for i, id := range c.Targets {
			if len(c.Targets) == r {
				uses[id]++
			}
			if i < len(c.States) && c.States[i] != proto.MemberServing {
				unwell[id] = true
			}
		}
	}
	save := func(members []uint32, rotate bool) error {
		if rotate {
			rot := made % r
			members = append(members[rot:], members[:rot]...)
		}
		id, err := t.counter(keyNextChain)
		if err != nil {
			return err
		}
		c := proto.Chain{ID: replicatedChainBase + id, Version: 1, Targets: members,
			States: make([]uint8, r), SinceMs: make([]int64, r)}
		t.b.Set(u32Key(prefixChain, c.ID), marshalChain(&c), nil)
		for _, m := range members {
			uses[m]++
		}
		made++
		return nil
	}
	for {
		servers := serversByFreeTargets(free)
		if len(servers) < r {
			break
		}
		members := make([]uint32, r)
		for i, srv := range servers[:r] {
			members[i] = free[srv][0]
			free[srv] = free[srv][1:]
		}
		if err := save(members, true); err != nil {
			return err
		}
	}
	if made == 0 {
		return nil // no chain of r yet: the leftovers wait for partners
	}
	for _, srv := range serversByFreeTargets(free) {
		for _, tg := range free[srv] {
			partners := leastUsedPartners(targets, uses, unwell, srv, r-1)
			if partners == nil {
				return nil // too few other servers with a serving target
			}
			// The new target heads its chain: it serves nothing else
			// yet, and reads go to heads.
			if err := save(append([]uint32{tg}, partners...), false); err != nil {
				return err
			}
		}
	}
	return nil
}

// leastUsedPartners picks n chained, serving targets on n different
// servers other than server not: the servers whose targets are in the
// fewest chains first, and on each its least used target (ties by ID).
// Nil if there are fewer than n such servers.
func leastUsedPartners(targets []proto.Target, uses map[uint32]int, unwell map[uint32]bool, not uint32, n int) []uint32 {
	load := map[uint32]int{}    // server -> chain memberships of its targets
	best := map[uint32]uint32{} // server -> its least used target
	for _, tg := range targets {
		if tg.Server == not || uses[tg.ID] == 0 || unwell[tg.ID] {
			continue
		}
		load[tg.Server] += uses[tg.ID]
		if b, ok := best[tg.Server]; !ok || uses[tg.ID] < uses[b] || (uses[tg.ID] == uses[b] && tg.ID < b) {
			best[tg.Server] = tg.ID
		}
	}
	if len(load) < n {
		return nil
	}
	servers := slices.Collect(maps.Keys(load))
	slices.SortFunc(servers, func(a, b uint32) int {
		if c := cmp.Compare(load[a], load[b]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	out := make([]uint32, n)
	for i, srv := range servers[:n] {
		out[i] = best[srv]
	}
	return out
}

// serversByFreeTargets lists the servers that have unchained targets, most
// first, ties by server ID.
func serversByFreeTargets(free map[uint32][]uint32) []uint32 {
	var out []uint32
	for srv, ts := range free {
		if len(ts) > 0 {
			out = append(out, srv)
		}
	}
	slices.SortFunc(out, func(a, b uint32) int {
		if c := cmp.Compare(len(free[b]), len(free[a])); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	return out
}

// targetsOfServer are the IDs of server id's targets.
func (t *tx) targetsOfServer(id uint32) (map[uint32]bool, error) {
	targets, err := loadTargets(t.b)
	if err != nil {
		return nil, err
	}
	out := map[uint32]bool{}
	for _, tg := range targets {
		if tg.Server == id {
			out[tg.ID] = true
		}
	}
	return out, nil
}

// updateChains applies change to every replicated chain with a member on
// server id, saving (with a new version) the chains it reports changed.
func (t *tx) updateChains(id uint32, change func(c *proto.Chain, member int) bool) error {
	mine, err := t.targetsOfServer(id)
	if err != nil {
		return err
	}
	chains, err := loadChains(t.b)
	if err != nil {
		return err
	}
	changed := false
	for i := range chains {
		c := &chains[i]
		if len(c.Targets) < 2 {
			continue
		}
		dirty := false
		for m, tid := range c.Targets {
			if mine[tid] && change(c, m) {
				dirty = true
			}
		}
		if dirty {
			c.Version++
			t.b.Set(u32Key(prefixChain, c.ID), marshalChain(c), nil)
			changed = true
		}
	}
	if !changed {
		return nil
	}
	return t.bumpMapVersion()
}

// failServer takes the targets of a silent server out of their chains:
// they stop taking writes, and the next serving member becomes head. The
// last serving member of a chain stays serving: its chain then waits for
// it (a double failure), since no other copy is complete.
func (t *tx) failServer(id uint32) error {
	nowMs := t.now / 1e6
	return t.updateChains(id, func(c *proto.Chain, m int) bool { return failMember(c, m, nowMs) })
}

// target reads target id, or fails with ENOENT.
func (t *tx) target(id uint32) (proto.Target, error) {
	v, ok, err := get(t.b, u32Key(prefixTarget, id))
	if err != nil {
		return proto.Target{}, err
	}
	if !ok {
		return proto.Target{}, rpc.Errorf(syscall.ENOENT, "target %d does not exist", id)
	}
	return unmarshalTarget(v)
}

// failTarget takes a target whose disk keeps failing out of its chains
// and keeps it out (rejoinServer skips it) until its server registers
// again, which an administrator does by restarting the server once the
// disk is fixed or replaced.
func (t *tx) failTarget(r *proto.TargetFailedReq) error {
	tg, err := t.target(r.Target)
	if err != nil {
		return err
	}
	t.b.Set(u32Key(prefixFailed, r.Target), []byte(r.Reason), nil)
	nowMs := t.now / 1e6
	return t.updateChains(tg.Server, func(c *proto.Chain, m int) bool {
		if c.Targets[m] != r.Target {
			return false
		}
		return failMember(c, m, nowMs)
	})
}

// recoverTarget ends the failure of a target its storage server brought
// back without a restart (it set aside the chunks that lacked writes):
// its offline members become syncing, so that they take new changes and
// their heads copy what they lack. A target not failed is left alone.
func (t *tx) recoverTarget(r *proto.TargetRecoveredReq) error {
	_, failed, err := get(t.b, u32Key(prefixFailed, r.Target))
	if err != nil || !failed {
		return err
	}
	tg, err := t.target(r.Target)
	if err != nil {
		return err
	}
	t.b.Delete(u32Key(prefixFailed, r.Target), nil)
	err = t.updateChains(tg.Server, func(c *proto.Chain, m int) bool {
		if c.Targets[m] != r.Target || c.States[m] != proto.MemberOffline {
			return false
		}
		c.States[m] = proto.MemberSyncing
		return true
	})
	if err != nil {
		return err
	}
	return t.bumpMapVersion() // the target's state is in the map too
}

// failMember takes member m out of chain c unless it is the chain's last
// serving member, and reports whether it changed anything.
func failMember(c *proto.Chain, m int, nowMs int64) bool {
	switch c.States[m] {
	case proto.MemberServing:
		if c.Serving() == 1 {
			return false
		}
		c.SinceMs[m] = nowMs
	case proto.MemberSyncing:
		// Still out of date since it first failed.
	default:
		return false
	}
	c.States[m] = proto.MemberOffline
	return true
}

// failedTargets are the targets held out after a disk failure.
func failedTargets(r reader) (map[uint32]string, error) {
	out := map[uint32]string{}
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefixFailed, UpperBound: prefixEnd(prefixFailed)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		out[binary.BigEndian.Uint32(it.Key()[len(prefixFailed):])] = string(it.Value())
	}
	return out, it.Error()
}

// resyncTargets makes the serving members which selects syncing, unless
// they are their chain's last serving member, with no known time since
// which they are out of date (a resync then copies everything that
// differs in size or is missing, plus what changed in the last minute).
// Used for fresh disks that replace dead ones, and by the leader for a
// restarted server whose chain partners are alive (it may have missed
// changes while down, or hold an empty new disk).
func (t *tx) resyncTargets(server uint32, which func(chain, target uint32) bool) error {
	nowMs := t.now / 1e6
	return t.updateChains(server, func(c *proto.Chain, m int) bool {
		if !which(c.ID, c.Targets[m]) || c.States[m] != proto.MemberServing || c.Serving() == 1 {
			return false
		}
		c.States[m] = proto.MemberSyncing
		c.SinceMs[m] = nowMs
		return true
	})
}

// rejoinServer starts the resync of a returned server's offline members:
// they take new writes at once, and the head copies what they missed.
func (t *tx) rejoinServer(id uint32) error {
	failed, err := failedTargets(t.b)
	if err != nil {
		return err
	}
	return t.updateChains(id, func(c *proto.Chain, m int) bool {
		if c.States[m] != proto.MemberOffline || failed[c.Targets[m]] != "" {
			return false
		}
		c.States[m] = proto.MemberSyncing
		return true
	})
}

// resyncDone makes a syncing member serving, if the chain has not changed
// since the head started to copy it.
func (t *tx) resyncDone(r *proto.ResyncDoneReq) error {
	v, ok, err := get(t.b, u32Key(prefixChain, r.Chain))
	if err != nil {
		return err
	}
	if !ok {
		return rpc.Errorf(syscall.ENOENT, "chain %d does not exist", r.Chain)
	}
	c, err := unmarshalChain(v)
	if err != nil {
		return err
	}
	if c.Version != r.Version {
		return rpc.Errorf(syscall.ESTALE, "chain %d is at version %d, the resync was for version %d", r.Chain, c.Version, r.Version)
	}
	m := slices.Index(c.Targets, r.Target)
	if m < 0 || c.States[m] != proto.MemberSyncing {
		return rpc.Errorf(syscall.EINVAL, "target %d is not a syncing member of chain %d", r.Target, r.Chain)
	}
	c.States[m] = proto.MemberServing
	c.SinceMs[m] = 0
	c.Version++
	t.b.Set(u32Key(prefixChain, c.ID), marshalChain(&c), nil)
	return t.bumpMapVersion()
}
