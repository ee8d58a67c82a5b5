package meta

import (
	"errors"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"tandemfs/internal/proto"
	"tandemfs/internal/wire"
)

// gcLoop deletes the chunks of removed files. Removal commits a garbage
// record in the same command that drops the inode, so nothing is leaked if
// the service restarts; the record goes once every target confirmed.
func (s *Service) gcLoop() {
	s.every(time.Second, func() {
		if s.serving.Load() {
			s.collectGarbage(256)
			s.collectECVersions(256)
			s.collectReplacedLayouts(64)
		}
	})
}

// every runs fn every interval until the service stops.
func (s *Service) every(interval time.Duration, fn func()) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
			fn()
		}
	}
}

// garbage is chunks to delete: file ino's chunks on chains, those of
// indexes [from, to) (to 0: every one from from on).
type garbage struct {
	ino      uint64
	chains   []uint32
	from, to uint64
}

func (s *Service) collectGarbage(max int) {
	s.collect(pGarbage, max, opGCDone, func(k, v []byte) (garbageRecord, bool) {
		ino := decodeU64(k[1:])
		return garbageRecord{garbage{ino: ino, chains: decodeChains(v)}, func(e *wire.Enc) { e.U64(ino) }}, true
	})
}

// garbageRecord is one record a collector found: the chunks to delete,
// and the body of the command that drops the record once they are.
type garbageRecord struct {
	garbage
	done func(*wire.Enc)
}

// collect deletes the chunks of up to max records under prefix, each as
// parse reads it from its key and value (false: not now, or not one),
// and proposes op with the record's done once every chain confirmed.
func (s *Service) collect(prefix byte, max int, op uint16, parse func(k, v []byte) (garbageRecord, bool)) {
	var todo []garbageRecord
	lo := []byte{prefix}
	it, err := s.fsm.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(lo)})
	if err != nil {
		return
	}
	for ok := it.First(); ok && len(todo) < max; ok = it.Next() {
		if r, ok := parse(it.Key(), it.Value()); ok {
			todo = append(todo, r)
		}
	}
	it.Close()
	if len(todo) == 0 {
		return
	}
	m, err := s.clusterMap()
	if err != nil {
		return
	}
	for _, r := range todo {
		if s.deleteChunks(m, r.garbage) {
			if _, err := s.propose(op, r.done); err != nil {
				return
			}
		}
	}
}

// deleteChunks asks the head of each of the file's chains to delete g's
// chunks (the head passes the deletion on to the chain's other members); it
// reports whether all of them confirmed. Members that are offline miss the
// deletion and drop the chunks when they resync.
func (s *Service) deleteChunks(m *proto.ClusterMap, g garbage) bool {
	ok := true
	for _, cid := range g.chains {
		c, found := findChain(m, cid)
		if !found {
			continue // chain no longer exists: nothing to delete
		}
		head, _ := c.Head()
		addr := serverAddrOfTarget(m, head)
		if addr == "" {
			ok = false
			continue
		}
		req := proto.ChunkDeleteReq{Routing: proto.Routing{Target: head, Chain: cid, Version: c.Version}, Ino: g.ino, From: g.from, To: g.to}
		err := s.storage.get(addr).Call(proto.OpChunkDelete, req.Encode, nil)
		if err != nil && !errors.Is(err, syscall.ENOENT) {
			ok = false
		}
	}
	return ok
}

func findChain(m *proto.ClusterMap, id uint32) (proto.Chain, bool) {
	for _, c := range m.Chains {
		if c.ID == id {
			return c, true
		}
	}
	return proto.Chain{}, false
}

func serverAddrOfTarget(m *proto.ClusterMap, tid uint32) string {
	for _, t := range m.Targets {
		if t.ID != tid {
			continue
		}
		for _, srv := range m.Servers {
			if srv.ID == t.Server {
				return srv.Addr
			}
		}
	}
	return ""
}

// orphanLoop deletes files that were unlinked while open by a client
// session that has since gone silent (a client that crashed never sends
// the release).
func (s *Service) orphanLoop() { s.every(s.cfg.SessionTimeout/4, s.sweepOrphans) }

// judgingSessions reports whether this replica may judge client sessions
// silent: sessions are known to the leader only, so it gives clients time
// to reach a new (or restarted) leader first.
func (s *Service) judgingSessions() bool {
	return s.serving.Load() && time.Since(time.Unix(0, s.leaderSince.Load())) >= s.cfg.SessionTimeout
}

// sessionSilent reports whether client session id was not heard from
// within the session timeout.
func (s *Service) sessionSilent(id uint64) bool {
	seen, known := s.sessions.lastSeen(id)
	return !known || time.Since(seen) > s.cfg.SessionTimeout
}

func (s *Service) sweepOrphans() {
	if !s.judgingSessions() {
		return
	}
	prefix := []byte{pOrphan}
	var expired []uint64
	it, err := s.fsm.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return
	}
	for ok := it.First(); ok; ok = it.Next() {
		if s.sessionSilent(decodeU64(it.Value())) {
			expired = append(expired, decodeU64(it.Key()[1:]))
		}
	}
	it.Close()
	for _, ino := range expired {
		r := proto.InoReq{Ino: ino}
		if _, err := s.propose(proto.OpRelease, r.Encode); err != nil {
			return
		}
	}
}

// collectECVersions deletes the shard chunks of stripe versions that a
// commit or a truncate replaced (ecstripes.go), on each of the file's
// chains (of one target), and forgets each once all confirmed. A reader
// that took such a version just before finds its chunks gone and reads
// the recorded version instead (internal/client, readStripe).
func (s *Service) collectECVersions(max int) {
	s.collect(pECGarbage, max, opECGCDone, func(k, v []byte) (garbageRecord, bool) {
		if len(k) != 17 {
			return garbageRecord{}, false
		}
		ino, index := decodeU64(k[1:9]), decodeU64(k[9:])
		return garbageRecord{garbage{ino: ino, chains: decodeChains(v), from: index, to: index + 1},
			func(e *wire.Enc) { e.U64(ino); e.U64(index) }}, true
	})
}
