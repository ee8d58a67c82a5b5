package storage

import (
	"math"
	"os"
	"runtime"
	"sync"

	"tandemfs/internal/proto"
)

// Extra Go processors for work that blocks in system calls.
//
// A goroutine in a system call keeps its Go processor (P) until the
// runtime's monitor takes it back, so a server with as few Ps as cores
// (one per server in a one-machine cluster, see cluster.serviceEnv) lets
// requests that are ready to run wait while others block for
// milliseconds. Two kinds of work do:
//
//   - A resync keeps resyncWorkers chunk copies in flight per chain: on
//     the member each creates the chunk's two files and writes 1 MiB with
//     O_DIRECT, on the head each sends with sendfile into a full socket.
//     A runtime trace of the member during a resync (2026-11-27,
//     TestResyncSpeed, 2 GiB under a client writing) had its copy handlers
//     runnable but waiting for a P 56-58 % of the time with one P and
//     42-45 % with two, and running Go code 1-2 %. With eight Ps per process (GOMAXPROCS=8 in the environment) the
//     resync copied 967 and 1,006 MB/s where two gave 696 and 751,
//     alternated; eight for the storage servers only, against one, 809 /
//     667 against 633 / 475.
//   - Large client writes (largewrites.go) each fill a megabyte of page
//     cache, which on the development VM takes milliseconds.
//
// More Ps than cores cost a server that answers small requests one at a
// time (two Ps per storage server instead of one took one fio job's random
// 4 KiB writes with two copies from 8,509-10,705 to 7,274-7,559 IOPS), so a
// server takes extraProcs only while it does such work, and gives them back
// after.

// extraProcs counts the holders of the process's extra Ps and keeps the
// GOMAXPROCS to return to when none holds them. Several Services share one
// process in tests, and GOMAXPROCS is the process's.
var extraProcs procBoost

// procsExtra is how many Ps a holder adds: one per resync copy in flight.
const procsExtra = resyncWorkers

// procBoost raises GOMAXPROCS by extra while anyone holds it.
type procBoost struct {
	mu      sync.Mutex
	holders int
	base    int // GOMAXPROCS before the first holder
}

// hold raises GOMAXPROCS by extra if nobody held it yet.
func (b *procBoost) hold(extra int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.holders == 0 {
		b.base = runtime.GOMAXPROCS(0)
		runtime.GOMAXPROCS(b.base + extra)
	}
	b.holders++
}

// release puts GOMAXPROCS back once the last holder releases.
func (b *procBoost) release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.holders == 0 {
		return
	}
	if b.holders--; b.holders == 0 {
		restoreProcs(b.base)
	}
}

// restoreProcs puts GOMAXPROCS back to base. Where the environment does not
// set it, base was the runtime's default, which follows the CPUs and the
// container's CPU limit until GOMAXPROCS is called: that following resumes.
func restoreProcs(base int) {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.SetDefaultGOMAXPROCS()
		return
	}
	runtime.GOMAXPROCS(base)
}

// resyncing says whether this server takes part in a resync under map v:
// it heads a chain with a syncing member, or a syncing member is its own.
func (s *Service) resyncing(v *chainView) bool {
	ours := func(t uint32) bool { _, err := s.target(t); return err == nil }
	for _, c := range v.chains {
		head, ok := c.Head()
		for i, st := range c.States {
			if st == proto.MemberSyncing && ok && (ours(head) || ours(c.Targets[i])) {
				return true
			}
		}
	}
	return false
}

// followResyncs holds extraProcs while map v has this server take part in
// a resync, and releases it when a later map has it take part in none.
func (s *Service) followResyncs(v *chainView) {
	busy := s.resyncing(v)
	s.procsMu.Lock()
	defer s.procsMu.Unlock()
	if v.version < s.procsVersion {
		return // an older map, loaded concurrently with a newer one
	}
	s.procsVersion = v.version
	s.holdProcs(busy)
}

// releaseProcs gives extraProcs back for good: the server is closing.
func (s *Service) releaseProcs() {
	s.procsMu.Lock()
	defer s.procsMu.Unlock()
	s.procsVersion = math.MaxUint64
	s.holdProcs(false)
}

func (s *Service) holdProcs(busy bool) {
	switch {
	case busy && !s.procsHeld:
		extraProcs.hold(procsExtra)
		s.logf("storage: taking part in a resync: %d Go processors until it ends", runtime.GOMAXPROCS(0))
	case !busy && s.procsHeld:
		extraProcs.release()
		// Large writes may still hold the extra Ps (largewrites.go).
		s.logf("storage: no resync of this server's chains runs: its hold on the extra Go processors ends")
	}
	s.procsHeld = busy
}
