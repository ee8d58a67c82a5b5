package meta

import (
	"encoding/binary"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"tandemfs/internal/proto"
	"tandemfs/internal/wire"
)

// A storage server silent for longer than Config.ECRebuildAfter is taken
// to be gone for good as far as erasure-coded files go: its targets are
// retired (no new file puts a shard there), and each coded file's shard
// on a retired target moves to a target in a failure domain the file does
// not use yet. The move changes the layout and drops the shard from every
// stripe's version, so the background repair (ecrepair.go) rebuilds each
// of them on the new target; a writer that still has the old layout
// writes under a generation from before the move, and its shard there is
// dropped from what it commits too. A retired server that registers again
// is no longer retired (files moved off it stay where they went).
//
//	ce<target:4>       a retired target (value: unix ms)
//	m<ino:8><shard:1>  the file's first write generation after shard moved (4)

var prefixRetired = []byte("ce")

const pECMoved = 'm'

func retiredKey(target uint32) []byte { return u32Key(prefixRetired, target) }

func ecMovedKey(ino uint64, shard int) []byte {
	k := make([]byte, 10)
	k[0] = pECMoved
	binary.BigEndian.PutUint64(k[1:], ino)
	k[9] = byte(shard)
	return k
}

// loadRetired lists the retired targets.
func loadRetired(r reader) (map[uint32]bool, error) {
	out := map[uint32]bool{}
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefixRetired, UpperBound: prefixEnd(prefixRetired)})
	if err != nil {
		return nil, err
	}
	for ok := it.First(); ok; ok = it.Next() {
		if k := it.Key(); len(k) == len(prefixRetired)+4 {
			out[binary.BigEndian.Uint32(k[len(prefixRetired):])] = true
		}
	}
	return out, it.Close()
}

// applyRetire retires targets (opECRetire).
func (t *tx) applyRetire(targets []uint32) error {
	for _, id := range targets {
		t.b.Set(retiredKey(id), binary.BigEndian.AppendUint64(nil, uint64(t.now)/1e6), nil)
	}
	t.onCommit(t.f.reloadChains)
	return nil
}

// unretire returns a registering server's targets to service.
func (t *tx) unretire(targets []uint32) {
	for _, id := range targets {
		t.b.Delete(retiredKey(id), nil)
	}
}

// applyMoveShard moves shard j of file ino from chain from to chain to
// (opECMoveShard): the layout changes, every stripe loses the shard (to
// be rebuilt on the new target), and generations handed out so far are
// marked as written with the old layout.
func (t *tx) applyMoveShard(ino uint64, j int, from, to uint32) error {
	n, err := t.inode(ino)
	if err != nil || !n.isReg() || !n.Stripe.EC.On() || j >= len(n.Chains) || n.Chains[j] != from {
		return nil // removed, or moved already: nothing to do
	}
	n.Chains[j] = to
	next := uint32(1)
	if v, ok, err := get(t.b, ecGenKey(ino)); err != nil {
		return err
	} else if ok && len(v) == 4 {
		next = binary.BigEndian.Uint32(v)
	}
	t.b.Set(ecMovedKey(ino, j), binary.BigEndian.AppendUint32(nil, next), nil)
	lo := ecStripeKey(ino, 0)[:9]
	it, err := t.b.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(lo)})
	if err != nil {
		return err
	}
	var stripes []proto.ECStripe
	for ok := it.First(); ok; ok = it.Next() {
		s, err := unmarshalECStripe(it.Key(), it.Value())
		if err != nil {
			it.Close()
			return err
		}
		stripes = append(stripes, s)
	}
	if err := it.Close(); err != nil {
		return err
	}
	for _, s := range stripes {
		s.Shards &^= 1 << j
		t.b.Set(ecStripeKey(ino, s.Stripe), marshalECStripe(&s), nil)
		t.markDegraded(n, &s)
	}
	t.putInode(n)
	return nil
}

// movedShards drops from u the shards that moved after the generation u
// was written under (Written) was handed out: they went to the old
// layout's targets.
func (t *tx) movedShards(n *inodeRec, u *proto.ECStripeUpdate) error {
	written := u.Written
	if written == 0 {
		written = u.Gen
	}
	for j := 0; j < n.Stripe.EC.Shards(); j++ {
		v, ok, err := get(t.b, ecMovedKey(n.Ino, j))
		if err != nil {
			return err
		}
		if ok && len(v) == 4 && written < binary.BigEndian.Uint32(v) {
			u.Shards &^= 1 << j
		}
	}
	return nil
}

// retireSilent retires the targets of servers silent for longer than
// Config.ECRebuildAfter.
func (s *Service) retireSilent() {
	if s.cfg.ECRebuildAfter <= 0 {
		return
	}
	since := time.Unix(0, s.leaderSince.Load())
	if time.Since(since) < s.cfg.ECRebuildAfter {
		return // a new leader has not heard every server yet
	}
	m, err := s.clusterMap()
	if err != nil {
		return
	}
	retired, err := loadRetired(s.fsm.db)
	if err != nil {
		return
	}
	var gone []uint32
	for _, srv := range m.Servers {
		if time.Since(later(s.live.lastPublic(srv.ID), since)) <= s.cfg.ECRebuildAfter {
			continue
		}
		for _, tg := range m.Targets {
			if tg.Server == srv.ID && !retired[tg.ID] {
				gone = append(gone, tg.ID)
			}
		}
	}
	if len(gone) == 0 {
		return
	}
	s.logf("erasure coding: targets %v silent for over %v: retiring them, their shards are rebuilt elsewhere", gone, s.cfg.ECRebuildAfter)
	if _, err := s.propose(opECRetire, func(e *wire.Enc) { e.U32s(gone) }); err != nil {
		s.logf("erasure coding: retiring targets %v: %v", gone, err)
	}
}

// evacuate moves the shards of coded files off retired targets, at most
// max a call; it reports how many files still have shards there to move
// (left), and how many have a shard there with no failure domain left to
// move it to (unplaceable: an 8+2 file over ten servers when one is gone),
// which stay degraded until their server returns.
func (s *Service) evacuate(max int) (left, unplaceable int) {
	retired, err := loadRetired(s.fsm.db)
	if err != nil || len(retired) == 0 {
		return 0, 0
	}
	moved := 0
	after := inoKey(0)
	for s.serving.Load() {
		batch, done := s.ecFilesAfter(after, 256)
		for _, ino := range batch {
			n, err := loadInode(s.fsm.db, ino)
			if err != nil {
				continue
			}
			for j, ch := range n.Chains {
				if !retired[ch] {
					continue
				}
				to, ok := s.fsm.replacementShard(n, j, retired)
				switch {
				case !ok:
					unplaceable++
					continue
				case moved >= max:
					left++
					continue
				}
				if _, err := s.propose(opECMoveShard, func(e *wire.Enc) { e.U64(ino); e.U8(uint8(j)); e.U32(ch); e.U32(to) }); err != nil {
					s.logf("erasure coding: moving shard %d of file %d off target %d: %v", j, ino, ch, err)
					return left + 1, unplaceable
				}
				moved++
			}
		}
		if done || len(batch) == 0 {
			break
		}
		after = inoKey(batch[len(batch)-1])
	}
	return left, unplaceable
}

// replacementShard picks a chain for shard j of n in a failure domain none
// of n's other shards uses, not retired, rotating with the inode number.
func (f *FSM) replacementShard(n *inodeRec, j int, retired map[uint32]bool) (uint32, bool) {
	f.chainsMu.Lock()
	domains := f.shardDomains[n.Stripe.EC.Domain]
	f.chainsMu.Unlock()
	domainOf := map[uint32]int{}
	for d, chains := range domains {
		for _, c := range chains {
			domainOf[c] = d
		}
	}
	used := map[int]bool{}
	for i, c := range n.Chains {
		if i != j {
			if d, ok := domainOf[c]; ok {
				used[d] = true
			}
		}
	}
	for k := range domains {
		d := (int(n.Ino) + k) % len(domains)
		if used[d] {
			continue
		}
		candidates := slices.DeleteFunc(slices.Clone(domains[d]), func(c uint32) bool { return retired[c] })
		if len(candidates) > 0 {
			return candidates[int(n.Ino/uint64(len(domains)))%len(candidates)], true
		}
	}
	return 0, false
}
