package meta

import "github.com/cockroachdb/pebble/v2"

// Hooks for the package's external tests.

// CrashStoreOnClose makes Close lose what the state machine's store holds
// only in memory, as a crash of the process would.
func (s *Service) CrashStoreOnClose() { s.fsm.crashOnClose = true }

// TakeSnapshot makes Raft snapshot the state machine now.
func (s *Service) TakeSnapshot() error { return s.node.raft.Snapshot().Error() }

// ForgetQuotaUsage deletes the quota records and the mark that usage was
// summed: a file system made before quotas has neither.
func (s *Service) ForgetQuotaUsage() {
	s.fsm.db.DeleteRange(prefixQuota, prefixEnd(prefixQuota), pebble.Sync)
	s.fsm.db.Delete(keyQuotaInit, pebble.Sync)
}

// SetQuotaPage makes OpQuotaList answer in pages of n records.
func SetQuotaPage(n int) func() {
	old := quotaPage
	quotaPage = n
	return func() { quotaPage = old }
}

// FileHolders is fileHolders for tests in package meta_test.
func (s *Service) FileHolders(ino uint64) (writers, readers []uint64, ok bool) {
	return s.fileHolders(ino)
}
