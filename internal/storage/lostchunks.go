package storage

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"tandemfs/internal/proto"
)

// Lost chunks. A file system under a target can lose the newest writes of
// some chunks while the disk itself is fine: a write-back flash cache
// whose device fails before it copied them to the disk
// (internal/flashcache). The engine then meets I/O errors and the target
// is failed over as after disk errors (diskfail.go); if the file system
// can recover from the loss (RecoverableFS), the server brings the target
// back without a restart:
//
//  1. It waits until the metadata service has taken the target out of its
//     replicated chains, so that no client or head sends it changes.
//  2. It drops its open handles of the target's chain stores' chunks, and
//     the file system moves the chunks that lack writes aside.
//  3. It holds those chunks as lost: their stores list them as absent to
//     a resync, so that the chain's head copies each of them whole, even if
//     a change forwarded after the member rejoined has already recreated
//     part of one (at the same size, the head would otherwise take it for
//     complete).
//  4. It asks the metadata leader to end the target's failure
//     (OpTargetRecovered): its members become syncing, take new changes,
//     and their heads resync them.
//
// A chain's lost chunks are released once this server sees its member of
// the chain serving (the resync completed); when none are left, the file
// system is told (ResyncedLost) and forgets them. A server started while
// some were still lost (it stopped before the resyncs completed) holds
// them from its start.

// RecoverableFS is a file system under targets that can lose acknowledged
// writes of some chunks without its disk failing, and recover from that
// with the help of the chains' other copies.
type RecoverableFS interface {
	// RecoverLost readies the target at dir to serve again after such a
	// loss: the chunk files whose disk copy lacks writes are moved out of
	// the target, and their paths, relative to dir, returned. ok is
	// false if the target's failure is not such a loss.
	RecoverLost(dir string) (lost []string, ok bool, err error)
	// LostChunks returns the chunk files of the target at dir that were
	// moved aside after a loss and are not yet resynced.
	LostChunks(dir string) ([]string, error)
	// ResyncedLost tells that the lost chunks of the target at dir are
	// whole again: every chain serves this copy of them.
	ResyncedLost(dir string) error
}

// lostChains are the chains whose stores hold lost chunks, with the
// target they are on.
type lostChains struct {
	mu sync.Mutex
	m  map[uint32]*Target // by chain
}

// ChainOfPath returns the chain whose store holds rel, a path relative
// to its target (chains/<chain>/...); ok is false for a path outside the
// chain stores (the target's own chain of one, target.json).
func ChainOfPath(rel string) (chain uint32, ok bool) {
	parts := strings.SplitN(filepath.ToSlash(rel), "/", 3)
	if len(parts) < 3 || parts[0] != "chains" {
		return 0, false
	}
	c, err := strconv.ParseUint(parts[1], 10, 32)
	return uint32(c), err == nil
}

// parseChainChunkPath reads a chain store's chunk file path, relative to
// its target: chains/<chain>/chunks/<hh>/<ino>/<idx>[.sum].
func parseChainChunkPath(rel string) (chain uint32, k chunkKey, ok bool) {
	chain, ok = ChainOfPath(rel)
	parts := strings.Split(filepath.ToSlash(rel), "/")
	if !ok || len(parts) != 6 || parts[2] != "chunks" {
		return 0, k, false
	}
	ino, err1 := strconv.ParseUint(parts[4], 10, 64)
	idx, err2 := strconv.ParseUint(strings.TrimSuffix(parts[5], ".sum"), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, k, false
	}
	return chain, chunkKey{ino, idx}, true
}

// holdLost holds the chunk files rels of target tg as lost (step 3).
func (s *Service) holdLost(tg *Target, rels []string) error {
	byChain := map[uint32][]chunkKey{}
	for _, rel := range rels {
		if chain, k, ok := parseChainChunkPath(rel); ok {
			byChain[chain] = append(byChain[chain], k)
		}
	}
	for chain, keys := range byChain {
		store, err := s.chainStore(tg, chain)
		if err != nil {
			return err
		}
		store.markLost(keys)
		s.lost.mu.Lock()
		if s.lost.m == nil {
			s.lost.m = map[uint32]*Target{}
		}
		s.lost.m[chain] = tg
		s.lost.mu.Unlock()
	}
	if len(byChain) > 0 {
		s.logf("storage: target %s: %d chunks in %d chains lost writes; they are copied whole from the chains' other members", tg.Dir(), len(rels), len(byChain))
	}
	return nil
}

// loadLost holds, at the server's start, the chunks its targets' file
// system still lists as lost.
func (s *Service) loadLost() error {
	rfs, ok := s.cfg.FS.(RecoverableFS)
	if !ok {
		return nil
	}
	for _, tg := range s.targets {
		rels, err := rfs.LostChunks(tg.Dir())
		if err != nil {
			return fmt.Errorf("storage: target %s: the chunks it lost: %w", tg.Dir(), err)
		}
		if err := s.holdLost(tg, rels); err != nil {
			return err
		}
	}
	return nil
}

// releaseLost releases the lost chunks of every chain in which v shows
// this server's member serving, and tells the file system of each target
// left with none.
func (s *Service) releaseLost(v *chainView) {
	s.lost.mu.Lock()
	var done []*Target
	for chain, tg := range s.lost.m {
		c, ok := v.chains[chain]
		if st, member := c.State(tg.ID()); ok && member && st != proto.MemberServing {
			continue
		}
		if store := s.storeSlot(chain).st.Load(); store != nil {
			store.clearLost()
		}
		delete(s.lost.m, chain)
		if !slices.Contains(done, tg) {
			done = append(done, tg)
		}
	}
	for _, tg := range done {
		for _, other := range s.lost.m {
			if other == tg {
				tg = nil
				break
			}
		}
		if tg != nil {
			s.resyncedLost(tg)
		}
	}
	s.lost.mu.Unlock()
}

func (s *Service) resyncedLost(tg *Target) {
	rfs, ok := s.cfg.FS.(RecoverableFS)
	if !ok {
		return
	}
	if err := rfs.ResyncedLost(tg.Dir()); err != nil {
		s.logf("storage: target %s: recording that its lost chunks were resynced: %v", tg.Dir(), err)
		return
	}
	s.logf("storage: target %s: every chunk it lost was copied back from its chains' other members", tg.Dir())
}

// recoverInPlace brings target id back after a failure its file system
// can recover from (steps 1, 2 and 4 above); for any other failure it
// returns once the target is out of its chains, and the target stays out
// until its server restarts.
func (s *Service) recoverInPlace(id uint32) {
	rfs, ok := s.cfg.FS.(RecoverableFS)
	if !ok {
		return
	}
	tg, err := s.target(id)
	if err != nil {
		return
	}
	for warned := false; !s.outOfChains(id, &warned); {
		if !s.sleep(100 * time.Millisecond) {
			return
		}
	}
	s.retireChainChunks(tg)
	lost, ok, err := rfs.RecoverLost(tg.Dir())
	if err != nil {
		s.logf("storage: target %d: recovering from its failure: %v; it stays failed until the server restarts", id, err)
		return
	}
	if !ok {
		return
	}
	if err := s.holdLost(tg, lost); err != nil {
		s.logf("storage: target %d: %v; it stays failed until the server restarts", id, err)
		return
	}
	s.failed.remove(id)
	req := proto.TargetRecoveredReq{Target: id, Reason: fmt.Sprintf("%d chunks set aside to be resynced", len(lost))}
	for {
		if _, err := s.callMeta(proto.OpTargetRecovered, req.Encode, nil); err == nil {
			s.logf("storage: target %d rejoins its chains: their heads resync it", id)
			return
		} else {
			s.logf("storage: reporting the recovery of target %d: %v", id, explainMetaErr(err))
		}
		if !s.sleep(250 * time.Millisecond) {
			return
		}
	}
}

// outOfChains reports whether this server's view shows target id out of
// every replicated chain it is a member of. A target that is a chain's
// last serving member is never taken out: that is logged once (warned).
func (s *Service) outOfChains(id uint32, warned *bool) bool {
	v := s.cs.view.Load()
	if v == nil {
		return false
	}
	for _, c := range v.chains {
		st, member := c.State(id)
		if !member || len(c.Targets) < 2 || st != proto.MemberServing {
			continue
		}
		if c.Serving() == 1 && !*warned {
			*warned = true
			s.logf("storage: target %d is the last serving member of chain %d, which has no other copy of what it lost: it stays failed until its server restarts", id, c.ID)
		}
		return false
	}
	return true
}

// retireChainChunks drops the open handles of the chunks of tg's chain
// stores: calls that come later open the files afresh.
func (s *Service) retireChainChunks(tg *Target) {
	ids, err := s.chainStoreIDs(tg)
	if err != nil {
		s.logf("storage: target %s: listing its chain stores: %v", tg.Dir(), err)
	}
	for _, id := range ids {
		if store := s.storeSlot(id).st.Load(); store != nil {
			store.retireAll()
		}
	}
}

// markLost holds keys as lost: ListBucket leaves them out.
func (t *Target) markLost(keys []chunkKey) {
	t.lostMu.Lock()
	defer t.lostMu.Unlock()
	if t.lost == nil {
		t.lost = map[chunkKey]bool{}
	}
	for _, k := range keys {
		t.lost[k] = true
	}
}

func (t *Target) clearLost() {
	t.lostMu.Lock()
	defer t.lostMu.Unlock()
	t.lost = nil
}

func (t *Target) isLost(k chunkKey) bool {
	t.lostMu.Lock()
	defer t.lostMu.Unlock()
	return t.lost[k]
}

// retireAll drops every open chunk handle (retire).
func (t *Target) retireAll() {
	for _, k := range t.cache.keys() {
		t.retire(k)
	}
}
