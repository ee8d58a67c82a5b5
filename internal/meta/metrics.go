package meta

import (
	"tandemfs/internal/metrics"
	"tandemfs/internal/proto"
)

var (
	// servedMetrics records the requests this service answers.
	servedMetrics = metrics.Served("meta", proto.OpName)
	// storageCallMetrics records its own calls to storage servers.
	storageCallMetrics = metrics.Called("storage", proto.OpName)
)

// RaftIndexes reports this replica's Raft log: the last index it holds,
// the last known committed, and the last applied to its state machine.
// A follower whose applied index lags the leader's is catching up.
func (s *Service) RaftIndexes() (last, commit, applied uint64) {
	r := s.node.raft
	return r.LastIndex(), r.CommitIndex(), r.AppliedIndex()
}

// ExportMetrics adds this service's gauges to the process's metrics:
// whether it leads, and its Raft indexes.
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
}
