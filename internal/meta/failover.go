package meta

import (
	"context"
	"time"

	"tandemfs/internal/fence"
	"tandemfs/internal/proto"
	"tandemfs/internal/wire"
)

// The metadata leader owns failure decisions. A storage server silent on
// the network clients use for FailureTimeout is taken out of its chains,
// through the Raft log, so that a leader that has been deposed cannot act;
// a server heard from again rejoins them and is resynced. Losing only the
// private network is no failure: clients still reach the server.
//
// Storage servers hold a lease of half the timeout, renewed by each
// acknowledged heartbeat, and stop serving replicated chains when it runs
// out (storage.Service), so by the time the leader acts a server it could
// not hear from has already stopped accepting writes.

// flapWindow and flapLimit hold out a server that failed flapLimit times
// within flapWindow: it does not rejoin its chains until the window has
// passed since its last failure, instead of failing over back and forth.
const (
	flapWindow = 10 * time.Minute
	flapLimit  = 3
)

// failureLoop runs the failure detector while this replica leads.
func (s *Service) failureLoop() {
	s.every(s.cfg.FailureTimeout/20, func() {
		if !s.serving.Load() {
			return
		}
		// A new leader has no heartbeats yet: give every server a full
		// timeout to reach it before judging it silent.
		since := time.Unix(0, s.leaderSince.Load())
		if time.Since(since) < s.cfg.FailureTimeout {
			return
		}
		s.checkServers(since)
	})
}

// checkServers proposes the failure or the rejoining of each storage server
// whose liveness disagrees with its chains' states.
func (s *Service) checkServers(leaderSince time.Time) {
	m, err := s.clusterMap()
	if err != nil {
		return
	}
	for _, srv := range m.Servers {
		active, offline := memberStates(m, srv.ID)
		if !active && !offline {
			continue // in no replicated chain
		}
		seen := s.live.lastPublic(srv.ID)
		silent := time.Since(later(seen, leaderSince)) > s.cfg.FailureTimeout
		switch {
		case silent && active && s.wouldFail(m, srv.ID):
			s.logf("storage server %d (%s) silent for over %v: failing over its chains", srv.ID, srv.Addr, s.cfg.FailureTimeout)
			s.flaps.failed(srv.ID)
			if s.proposeServer(opFailServer, srv.ID) {
				serverFailovers.Inc()
				s.fenceServer(srv)
			}
		case !silent && offline:
			if s.flaps.heldOut(srv.ID) {
				continue
			}
			s.logf("storage server %d (%s) is back: resyncing its chain members", srv.ID, srv.Addr)
			if s.proposeServer(opRejoinServer, srv.ID) {
				serverRejoins.Inc()
			}
		}
	}
}

// afterRegistration resyncs the members of a server that registered (it
// restarted) in the chains that changed since it last knew them (it says
// which version it knew, see storage/known.go) and where another serving
// member is alive: it may have missed changes. A chain still at the
// version the member knew missed nothing: no write is acknowledged
// without a member unless its chain changes first. Where no partner is
// alive (the whole cluster restarts) its copies are the ones to serve. The registration is
// answered only after this commits, and the server serves replicated
// chains only once its first heartbeat is acknowledged, after it loaded
// the map: it never serves as an up-to-date member it is not.
// Chains formed by this very registration (not in existing) are new and
// need nothing.
func (s *Service) afterRegistration(req *proto.RegisterServerReq, reply []byte, existing map[uint32]bool) error {
	var rep proto.RegisterServerReply
	d := wire.NewDec(reply)
	rep.Decode(d)
	if d.Finish() != nil {
		return nil
	}
	m, err := s.clusterMap()
	if err != nil {
		return err
	}
	server := serverOfTarget(m)
	alive := func(srv uint32) bool {
		seen := s.live.lastPublic(srv)
		return !seen.IsZero() && time.Since(seen) < s.cfg.FailureTimeout
	}
	knew := map[[2]uint32]uint32{}
	for _, k := range req.Known {
		knew[[2]uint32{k.Chain, k.Target}] = k.Version
	}
	var pairs []uint32 // chain, target, ...
	for _, c := range m.Chains {
		if !existing[c.ID] {
			continue
		}
		for i, t := range c.Targets {
			if server[t] != rep.ServerID || c.States[i] != proto.MemberServing {
				continue
			}
			if v, ok := knew[[2]uint32{c.ID, t}]; ok && v == c.Version {
				continue // missed nothing
			}
			for j, p := range c.Targets {
				if j != i && c.States[j] == proto.MemberServing && server[p] != rep.ServerID && alive(server[p]) {
					pairs = append(pairs, c.ID, t)
					break
				}
			}
		}
	}
	if len(pairs) == 0 {
		return nil
	}
	s.logf("storage server %d registered again: resyncing its members (chain, target) %v from their live partners", rep.ServerID, pairs)
	_, err = s.propose(opResyncTargets, func(e *wire.Enc) { e.U32(rep.ServerID); e.U32s(pairs) })
	return err
}

// replicatedChains are the IDs of the replicated chains now.
func (s *Service) replicatedChains() map[uint32]bool {
	chains, err := loadChains(s.fsm.db)
	out := map[uint32]bool{}
	if err != nil {
		return out
	}
	for _, c := range chains {
		if len(c.Targets) > 1 {
			out[c.ID] = true
		}
	}
	return out
}

// fenceServer runs the fence agents of a server that was failed over, in
// the background: the chain versions and the server's expired lease already
// keep it from doing harm, so failover need not wait for a slow iDRAC.
// Fencing makes sure it stays down until an administrator looks at it.
func (s *Service) fenceServer(srv proto.Server) {
	if s.cfg.Fence == nil {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-s.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		o := s.cfg.Fence.Fence(ctx, fence.Server{UUID: srv.UUID, Addr: srv.Addr, ID: srv.ID})
		s.fences.Record(o)
		countFence(o)
		s.logf("fencing: %s", o)
	}()
}

func (s *Service) proposeServer(op uint16, id uint32) bool {
	_, err := s.propose(op, func(e *wire.Enc) { e.U32(id) })
	if err != nil {
		s.logf("committing the state of storage server %d: %v", id, err)
	}
	return err == nil
}

// memberStates reports whether server id has members of replicated chains
// that take writes (active) or that are offline.
// Failed targets count as neither: they wait for their server to
// register again.
func memberStates(m *proto.ClusterMap, id uint32) (active, offline bool) {
	server := serverOfTarget(m)
	failed := map[uint32]bool{}
	for _, t := range m.Targets {
		failed[t.ID] = t.State == proto.TargetFailed
	}
	for _, c := range m.Chains {
		if len(c.Targets) < 2 {
			continue
		}
		for i, t := range c.Targets {
			if server[t] != id || failed[t] {
				continue
			}
			if c.States[i] == proto.MemberOffline {
				offline = true
			} else {
				active = true
			}
		}
	}
	return active, offline
}

// wouldFail reports whether failing server id changes any chain: a server
// that is the last serving member of all its chains stays in them.
func (s *Service) wouldFail(m *proto.ClusterMap, id uint32) bool {
	server := serverOfTarget(m)
	for _, c := range m.Chains {
		if len(c.Targets) < 2 {
			continue
		}
		for i, t := range c.Targets {
			if server[t] != id {
				continue
			}
			if c.States[i] == proto.MemberSyncing || (c.States[i] == proto.MemberServing && c.Serving() > 1) {
				return true
			}
		}
	}
	return false
}

func serverOfTarget(m *proto.ClusterMap) map[uint32]uint32 {
	out := make(map[uint32]uint32, len(m.Targets))
	for _, t := range m.Targets {
		out[t.ID] = t.Server
	}
	return out
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// flapCounter remembers recent failures per server.
type flapCounter struct {
	fails map[uint32][]time.Time
	// logged remembers servers already reported as held out.
	logged map[uint32]bool
	logf   func(string, ...any)
}

func (f *flapCounter) failed(id uint32) {
	f.fails[id] = append(f.recent(id), time.Now())
	delete(f.logged, id)
}

func (f *flapCounter) recent(id uint32) []time.Time {
	var out []time.Time
	for _, t := range f.fails[id] {
		if time.Since(t) < flapWindow {
			out = append(out, t)
		}
	}
	return out
}

func (f *flapCounter) heldOut(id uint32) bool {
	if len(f.recent(id)) < flapLimit {
		return false
	}
	if !f.logged[id] {
		f.logged[id] = true
		f.logf("storage server %d failed %d times within %v: held out of its chains until %v after its last failure", id, flapLimit, flapWindow, flapWindow)
	}
	return true
}
