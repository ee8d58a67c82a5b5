package meta

// Hooks for the package's external tests.

// CrashStoreOnClose makes Close lose what the state machine's store holds
// only in memory, as a crash of the process would.
func (s *Service) CrashStoreOnClose() { s.fsm.crashOnClose = true }

// TakeSnapshot makes Raft snapshot the state machine now.
func (s *Service) TakeSnapshot() error { return s.node.raft.Snapshot().Error() }
