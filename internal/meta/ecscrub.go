package meta

import (
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"tandemfs/internal/client"
	"tandemfs/internal/proto"
)

// The parity check of erasure-coded files (`tandem scrub`; storage
// servers check their blocks' checksums in their own scrubs): the leader
// walks every inode and, for each erasure-coded file, reads every shard of
// every stripe, checks parity and rebuilds what is missing, short or
// wrong (client.RepairEC with verify). A new disk in place of a dead
// target is filled this way too.

// ecScrubber is the leader's parity check and its progress.
type ecScrubber struct {
	mu      sync.Mutex
	asked   bool // a pass was asked for
	running bool
	status  proto.ECScrubStatus
}

// askECScrub starts a pass at the next tick, or another after the one
// running.
func (s *Service) askECScrub() {
	s.ecScrub.mu.Lock()
	s.ecScrub.asked = true
	s.ecScrub.mu.Unlock()
}

// maybeECScrub starts an asked-for pass if none runs.
func (s *Service) maybeECScrub(c *client.Client) {
	sc := &s.ecScrub
	sc.mu.Lock()
	if !sc.asked || sc.running {
		sc.mu.Unlock()
		return
	}
	sc.asked, sc.running = false, true
	ended := sc.status.EndedMs
	sc.status = proto.ECScrubStatus{Running: true, StartedMs: time.Now().UnixMilli(), EndedMs: ended}
	sc.mu.Unlock()
	go func() {
		s.runECScrub(c)
		sc.mu.Lock()
		sc.running = false
		sc.status.Running = false
		sc.status.Percent = 100
		sc.status.EndedMs = time.Now().UnixMilli()
		sc.mu.Unlock()
	}()
}

// runECScrub checks every erasure-coded file, inodes in batches.
func (s *Service) runECScrub(c *client.Client) {
	v, _, _ := get(s.fsm.db, keyNextIno)
	last := max(decodeU64(v), 1)
	after := inoKey(0)
	for s.serving.Load() {
		batch, done := s.ecFilesAfter(after, 256)
		for _, ino := range batch {
			if !s.serving.Load() {
				return
			}
			st, err := c.RepairEC(ino, true)
			s.ecScrub.mu.Lock()
			x := &s.ecScrub.status
			if err == nil {
				x.Files++
			}
			x.Stripes += uint64(st.Stripes)
			x.Missing += uint64(st.Missing)
			x.Mismatched += uint64(st.Mismatched)
			x.Rebuilt += uint64(st.Rebuilt)
			x.Unreachable += uint64(st.Unreachable)
			x.Percent = uint32(min(99, ino*100/last))
			s.ecScrub.mu.Unlock()
			if err != nil {
				s.logf("erasure coding scrub of file %d: %v", ino, err)
			}
		}
		if done {
			return
		}
		after = inoKey(batch[len(batch)-1])
	}
}

// ecFilesAfter lists up to max erasure-coded files on targets with inode
// keys after the key after; done says the inodes ran out.
func (s *Service) ecFilesAfter(after []byte, max int) (out []uint64, done bool) {
	it, err := s.fsm.db.NewIter(&pebble.IterOptions{LowerBound: append(after, 0), UpperBound: prefixEnd([]byte{pInode})})
	if err != nil {
		return nil, true
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		r, err := unmarshalInode(it.Value())
		if err != nil || !r.isReg() || !r.Stripe.EC.On() || r.Inline {
			continue
		}
		out = append(out, r.Ino)
		if len(out) == max {
			return out, false
		}
	}
	return out, true
}

func (s *Service) ecScrubStatus() proto.ECScrubStatus {
	s.ecScrub.mu.Lock()
	defer s.ecScrub.mu.Unlock()
	return s.ecScrub.status
}
