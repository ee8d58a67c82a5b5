package meta

import (
	"tandemfs/internal/fence"
	"tandemfs/internal/metrics"
	"tandemfs/internal/proto"
)

var (
	// servedMetrics records the requests this service answers.
	servedMetrics = metrics.Served("meta", proto.OpName)
	// storageCallMetrics records its own calls to storage servers.
	storageCallMetrics = metrics.Called("storage", proto.OpName)

	// serverFailovers and serverRejoins count the changes of storage
	// servers' state this replica committed as leader.
	serverFailovers = metrics.Counter("tandem_meta_server_failovers_total",
		"Storage servers this metadata leader declared failed, taking their targets out of their chains.")
	serverRejoins = metrics.Counter("tandem_meta_server_rejoins_total",
		"Failed storage servers this metadata leader took back into their chains to resync.")
	// fenceRuns counts fence agent runs by agent and result, so a
	// primary agent that keeps failing shows before it is needed alone.
	fenceRuns = metrics.CounterVec("tandem_meta_fence_agent_runs_total",
		"Fence agent runs against failed storage servers, by agent and result (ok, failed).", "agent", "result")
	fenceOutcomes = metrics.CounterVec("tandem_meta_fences_total",
		"Failed storage servers fenced or not (result fenced, not_fenced).", "result")
)

// countFence adds one fencing's agent runs and outcome to the metrics.
func countFence(o fence.Outcome) {
	for _, r := range o.Results {
		result := "ok"
		if !r.OK {
			result = "failed"
		}
		fenceRuns.WithLabelValues(r.Agent, result).Inc()
	}
	result := "fenced"
	if !o.Fenced {
		result = "not_fenced"
	}
	fenceOutcomes.WithLabelValues(result).Inc()
}

// RaftIndexes reports this replica's Raft log: the last index it holds,
// the last known committed, and the last applied to its state machine.
// A follower whose applied index lags the leader's is catching up.
func (s *Service) RaftIndexes() (last, commit, applied uint64) {
	r := s.node.raft
	return r.LastIndex(), r.CommitIndex(), r.AppliedIndex()
}

// ExportMetrics adds this service's gauges to the process's metrics:
// whether it leads, its Raft indexes, and the state of the chains.
func (s *Service) ExportMetrics() {
	metrics.Func("tandem_meta_leader", "1 while this metadata replica leads and serves, else 0.", func() float64 {
		if s.Leading() {
			return 1
		}
		return 0
	})
	index := func(name, help string, pick func(last, commit, applied uint64) uint64) {
		metrics.Func(name, help, func() float64 { return float64(pick(s.RaftIndexes())) })
	}
	index("tandem_meta_raft_last_index", "Last index in this replica's Raft log.", func(l, _, _ uint64) uint64 { return l })
	index("tandem_meta_raft_commit_index", "Last Raft index this replica knows committed.", func(_, c, _ uint64) uint64 { return c })
	index("tandem_meta_raft_applied_index", "Last Raft index applied to this replica's namespace.", func(_, _, a uint64) uint64 { return a })
	s.exportChainMetrics()
}

// exportChainMetrics adds the cluster map's chains to the metrics: how
// many members are in each state, and how many chains run with fewer
// copies than they have members (the alert an administrator wants: a
// second failure there would stop their files).
func (s *Service) exportChainMetrics() {
	states := []uint8{proto.MemberServing, proto.MemberSyncing, proto.MemberOffline}
	metrics.GaugesFunc("tandem_meta_chain_members", "Members of chains, by state (serving, syncing, offline).", []string{"state"},
		func(emit func(float64, ...string)) {
			count, _, ok := s.chainCounts()
			if !ok {
				return
			}
			for _, st := range states {
				emit(float64(count[st]), proto.MemberStateName(st))
			}
		})
	metrics.GaugesFunc("tandem_meta_chains_degraded", "Chains with a member that is not serving (fewer copies than members).", nil,
		func(emit func(float64, ...string)) {
			if _, degraded, ok := s.chainCounts(); ok {
				emit(float64(degraded))
			}
		})
}

// chainCounts counts the members of the cluster map's chains by state,
// and the chains with a member not serving; ok is false if the map could
// not be read.
func (s *Service) chainCounts() (members map[uint8]int, degraded int, ok bool) {
	chains, err := loadChains(s.fsm.db)
	if err != nil {
		return nil, 0, false
	}
	members = map[uint8]int{}
	for _, c := range chains {
		whole := true
		for _, t := range c.Targets {
			st, _ := c.State(t)
			members[st]++
			whole = whole && st == proto.MemberServing
		}
		if !whole {
			degraded++
		}
	}
	return members, degraded, true
}
