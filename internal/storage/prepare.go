package storage

import (
	"slices"

	"tandemfs/internal/proto"
)

// Chain stores made before the first write. A replicated chain keeps its
// chunks in a store of its own inside each member target (chains.go),
// with 256 bucket directories spread over the disk (spread.go). Made on
// the chain's first write, as they were until 2026-11-28, they held that
// write up: on a fresh one-machine cluster, after the page cache was
// dropped (as the benchmark suite does before each phase), ext4 read
// about 2,200 blocks of bitmaps to place the new directories, and the
// first 4 MiB written to the four chains took 0.64-0.70 s against 0.07
// for the next file; fio's first sequential write of 256 MiB ran at
// 194-211 MB/s against 285-306 once the stores existed (three rounds
// each, alternated). So a server makes, or opens after a restart, the
// stores of the chains its targets belong to as soon as the cluster map
// shows them, in the background; a request that comes first waits for
// its own chain's store only, as before. A head also opens connections to
// its followers' servers then, as a mount does to every storage server
// (client.WarmStorage): with both, the first 4 MiB written to a fresh
// cluster took 0.12-0.13 s against 0.14-0.16 with the stores alone.

// storeToPrepare is a chain store a target of this server should hold.
type storeToPrepare struct {
	chain  uint32
	target *Target
}

// prepareChainStores opens, in the background, the stores of v's
// replicated chains that a target of this server takes part in and that
// are not open yet. Members out of their chain (offline) and targets
// failed here are left alone: a failing disk is not worth a try, and a
// resync opens the store when the target comes back.
func (s *Service) prepareChainStores(v *chainView) {
	todo := s.storesToPrepare(v)
	if len(todo) == 0 {
		return
	}
	select {
	case <-s.stop:
		return
	default:
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for _, p := range todo {
			select {
			case <-s.stop:
				return
			default:
			}
			if _, err := s.chainStore(p.target, p.chain); err != nil {
				s.logf("storage: preparing the store of chain %d: %v (the chain's first write will try again)", p.chain, err)
			}
		}
	}()
}

// peerConns is how many connections a head opens ahead to each server it
// forwards to.
const peerConns = 2

// warmFollowers opens connections, in the background, to the servers of
// the followers of the chains this server heads, so that the first
// forwards do not wait for a dial and a handshake.
func (s *Service) warmFollowers(v *chainView) {
	addrs := map[string]bool{}
	for _, c := range v.chains {
		head, ok := c.Head()
		if len(c.Targets) < 2 || !ok {
			continue
		}
		if _, err := s.target(head); err != nil {
			continue
		}
		for _, f := range c.Followers() {
			if a := v.addrs[f]; a != "" && a != s.addr {
				addrs[a] = true
			}
		}
	}
	for a := range addrs {
		s.peer(a).Warm(peerConns)
	}
}

// storesToPrepare lists, in chain order, the stores prepareChainStores
// should open.
func (s *Service) storesToPrepare(v *chainView) []storeToPrepare {
	ids := make([]uint32, 0, len(v.chains))
	for id, c := range v.chains {
		if len(c.Targets) > 1 {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	var todo []storeToPrepare
	for _, id := range ids {
		c := v.chains[id]
		for i, t := range c.Targets {
			if i < len(c.States) && c.States[i] == proto.MemberOffline {
				continue
			}
			tg, err := s.target(t)
			if err != nil || s.failed.get(t) != nil {
				continue
			}
			if s.storeSlot(id).st.Load() == nil {
				todo = append(todo, storeToPrepare{chain: id, target: tg})
			}
		}
	}
	return todo
}
