package flashcache

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"tandemfs/internal/proto"
	"tandemfs/internal/storage"
)

// Set is the storage.FS of a server whose targets have caches: each call
// goes to the tier of the target its path is under, and a path under no
// cached target goes to the disk's file system.
type Set struct {
	Base  storage.FS
	Tiers []*Tier
}

// pick is the file system for name.
func (s *Set) pick(name string) storage.FS {
	clean := filepath.Clean(name)
	for _, t := range s.Tiers {
		if clean == t.target || strings.HasPrefix(clean, t.target+string(filepath.Separator)) {
			return t
		}
	}
	return s.Base
}

func (s *Set) OpenFile(name string, flag int, perm os.FileMode) (storage.File, error) {
	return s.pick(name).OpenFile(name, flag, perm)
}
func (s *Set) Mkdir(name string, perm os.FileMode) error    { return s.pick(name).Mkdir(name, perm) }
func (s *Set) MkdirAll(name string, perm os.FileMode) error { return s.pick(name).MkdirAll(name, perm) }
func (s *Set) Remove(name string) error                     { return s.pick(name).Remove(name) }
func (s *Set) ReadDirNames(name string) ([]string, error)   { return s.pick(name).ReadDirNames(name) }
func (s *Set) SyncDir(name string) error                    { return s.pick(name).SyncDir(name) }
func (s *Set) Statfs(name string) (uint64, uint64, error)   { return s.pick(name).Statfs(name) }
func (s *Set) Lock(name string) (io.Closer, error)          { return s.pick(name).Lock(name) }
func (s *Set) Stat(name string) (int64, time.Time, error)   { return s.pick(name).Stat(name) }

// Rename renames within one target (the engine never renames across).
func (s *Set) Rename(oldname, newname string) error { return s.pick(oldname).Rename(oldname, newname) }

// MarkTopDir passes the engine's placement hint on.
func (s *Set) MarkTopDir(name string) error {
	if m, ok := s.pick(name).(interface{ MarkTopDir(string) error }); ok {
		return m.MarkTopDir(name)
	}
	return nil
}

// tier is the tier of the target at dir, or nil.
func (s *Set) tier(dir string) *Tier {
	t, _ := s.pick(dir).(*Tier)
	return t
}

// RecoverLost is the RecoverLost of the target's tier
// (storage.RecoverableFS).
func (s *Set) RecoverLost(dir string) ([]string, bool, error) {
	if t := s.tier(dir); t != nil {
		return t.RecoverLost()
	}
	return nil, false, nil
}

// LostChunks is the LostChunks of the target's tier.
func (s *Set) LostChunks(dir string) ([]string, error) {
	if t := s.tier(dir); t != nil {
		return t.LostChunks()
	}
	return nil, nil
}

// ResyncedLost is the ResyncedLost of the target's tier.
func (s *Set) ResyncedLost(dir string) error {
	if t := s.tier(dir); t != nil {
		return t.ResyncedLost()
	}
	return nil
}

// Close closes every tier (marking their caches clean).
func (s *Set) Close() error {
	var first error
	for _, t := range s.Tiers {
		if err := t.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// SetWriteBackRule gives every tier the server's view of its chains
// (Tier.SetWriteBackRule).
func (s *Set) SetWriteBackRule(ok func(chain uint32) bool) {
	for _, t := range s.Tiers {
		t.SetWriteBackRule(ok)
	}
}

// Reports are the tiers' reports for the server's heartbeats.
func (s *Set) Reports() []proto.CacheReport {
	out := make([]proto.CacheReport, len(s.Tiers))
	for i, t := range s.Tiers {
		out[i] = t.Report()
	}
	return out
}
