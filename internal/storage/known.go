package storage

import (
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"tandemfs/internal/proto"
)

// Each member target records, in <target>/chains/<id>/chain.version, the
// version of the chain it last knew while it took writes. When its server
// registers after a restart, the metadata leader compares it with the
// chain's version: unchanged means the member missed nothing (a write is
// never acknowledged without a member unless the chain changes first), so
// it serves again at once; changed means it is resynced.

const knownVersionFile = "chain.version"

// knownVersions remembers what was last written, to write only changes.
type knownVersions struct {
	mu      sync.Mutex
	written map[[2]uint32]uint32 // {chain, target} -> version
}

// recordVersions writes the version of every replicated chain in which a
// local target takes writes.
func (s *Service) recordVersions(v *chainView) {
	s.known.mu.Lock()
	defer s.known.mu.Unlock()
	if s.known.written == nil {
		s.known.written = map[[2]uint32]uint32{}
	}
	for _, c := range v.chains {
		if len(c.Targets) < 2 {
			continue
		}
		for i, t := range c.Targets {
			tg, err := s.target(t)
			if err != nil || c.States[i] == proto.MemberOffline {
				continue
			}
			key := [2]uint32{c.ID, t}
			if s.known.written[key] == c.Version {
				continue
			}
			dir := chainStoreDir(tg, c.ID)
			if err := s.cfg.FS.MkdirAll(dir, 0o755); err != nil {
				s.logf("storage: recording chain %d version: %v", c.ID, err)
				continue
			}
			if err := WriteFileAtomic(s.cfg.FS, filepath.Join(dir, knownVersionFile), []byte(strconv.FormatUint(uint64(c.Version), 10)+"\n")); err != nil {
				s.logf("storage: recording chain %d version: %v", c.ID, err)
				continue
			}
			s.known.written[key] = c.Version
		}
	}
}

// knownChainVersions reads the versions recorded in the local targets.
func (s *Service) knownChainVersions() []proto.ChainVersion {
	var out []proto.ChainVersion
	for _, tg := range s.targets {
		if tg.ID() == 0 {
			continue
		}
		ids, err := s.chainStoreIDs(tg)
		if err != nil {
			s.logf("storage: reading chain versions of %s: %v", tg.Dir(), err)
			continue
		}
		for _, id := range ids {
			b, err := ReadFile(s.cfg.FS, filepath.Join(chainStoreDir(tg, id), knownVersionFile))
			if err != nil {
				continue
			}
			v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
			if err != nil {
				continue
			}
			out = append(out, proto.ChainVersion{Chain: id, Target: tg.ID(), Version: uint32(v)})
		}
	}
	return out
}
