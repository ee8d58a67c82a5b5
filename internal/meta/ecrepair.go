package meta

import (
	"encoding/binary"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"tandemfs/internal/client"
	"tandemfs/internal/proto"
)

// Stripes written while a shard's target did not answer are recorded
// without that shard (ecstripes.go, the r keys): they survive one failure
// fewer. The leader rebuilds such shards in the background, as a client
// of its own service (internal/client: RepairECStripes reads the stripe
// from the shards it has, writes the missing ones to their targets and
// records them), and `tandem status` shows how many wait and the rate.

// ecRetryAfter is how long a stripe whose repair found a target still
// silent waits before the next try.
const ecRetryAfter = 10 * time.Second

// ecRepairer is the leader's background repair and its progress.
type ecRepairer struct {
	mu          sync.Mutex
	evacuated   time.Time // the last look for shards on retired targets
	evacuating  int       // files found with shards there then, to move
	unplaceable int       // and with no failure domain to move them to
	client      *client.Client
	retry       map[[2]uint64]time.Time // (ino, stripe) -> not before
	online      string                  // the targets online at the last round (onlineTargets)
	repaired    uint64                  // shards rebuilt since this replica led
	bytes       uint64
	busy        time.Duration // spent repairing since this replica led: the rate's time
}

func (s *Service) ecRepairLoop() {
	s.every(2*time.Second, func() {
		if s.serving.Load() {
			s.retireSilent()
			s.evacuateNow()
			// Round after round while there is work (a tick's 64 stripes
			// capped a rebuild at 64 shards per 2 s).
			for i := 0; i < 1000 && s.serving.Load() && s.repairDegraded(64) > 0; i++ {
			}
			if c := s.ecClient(); c != nil {
				s.maybeECScrub(c)
			}
		}
	})
	s.ecRepair.mu.Lock()
	defer s.ecRepair.mu.Unlock()
	if s.ecRepair.client != nil {
		s.ecRepair.client.Close()
	}
}

// repairDegraded repairs up to max degraded stripes whose time has come,
// and returns how many stripes it rebuilt shards of.
func (s *Service) repairDegraded(max int) int {
	byIno := map[uint64][]uint64{}
	now := time.Now()
	r := &s.ecRepair
	online := s.onlineTargets()
	r.mu.Lock()
	if online != r.online {
		// A target came back (or went): stripes that waited for it are
		// tried at once, not ecRetryAfter after their last try.
		r.online = online
		clear(r.retry)
	}
	prefix := []byte{pECDegraded}
	it, err := s.fsm.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		r.mu.Unlock()
		return 0
	}
	n := 0
	for ok := it.First(); ok && n < max; ok = it.Next() {
		k := it.Key()
		if len(k) != 17 {
			continue
		}
		key := [2]uint64{decodeU64(k[1:9]), decodeU64(k[9:])}
		if now.Before(r.retry[key]) {
			continue
		}
		byIno[key[0]] = append(byIno[key[0]], key[1])
		n++
	}
	it.Close()
	r.mu.Unlock()
	if len(byIno) == 0 {
		return 0
	}
	c := s.ecClient()
	if c == nil {
		return 0
	}
	rebuilt := 0
	for ino, stripes := range byIno {
		began := time.Now()
		st, err := c.RepairECStripes(ino, stripes)
		r.mu.Lock()
		r.busy += time.Since(began)
		r.repaired += uint64(st.Rebuilt)
		r.bytes += st.RebuiltBytes
		if st.Rebuilt > 0 {
			rebuilt += len(stripes)
		}
		if err != nil || st.Unreachable > 0 || st.UnrecoverableErr != nil {
			for _, stripe := range stripes {
				r.retry[[2]uint64{ino, stripe}] = time.Now().Add(ecRetryAfter)
			}
		}
		r.mu.Unlock()
		if err != nil {
			s.logf("erasure coding repair of file %d: %v", ino, err)
		}
	}
	return rebuilt
}

// ecClient is the leader's client of its own service, for repairs and
// parity checks; nil if it cannot be made.
func (s *Service) ecClient() *client.Client {
	r := &s.ecRepair
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.client == nil {
		c, err := client.New(client.Config{MetaAddr: s.Addr(), Secret: s.cfg.Secret, GiveUp: 10 * time.Second,
			Logf: func(string, ...any) {}})
		if err != nil {
			s.logf("erasure coding repair: %v", err)
			return nil
		}
		r.client, r.retry = c, map[[2]uint64]time.Time{}
	}
	return r.client
}

// ecRepairStatus counts the degraded stripes (up to a million) and
// reports what the repair did.
func (s *Service) ecRepairStatus() proto.ECRepairStatus {
	var st proto.ECRepairStatus
	prefix := []byte{pECDegraded}
	if it, err := s.fsm.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)}); err == nil {
		for ok := it.First(); ok && st.Degraded < 1_000_000; ok = it.Next() {
			st.Degraded++
		}
		it.Close()
	}
	r := &s.ecRepair
	r.mu.Lock()
	defer r.mu.Unlock()
	st.Rebuilt, st.RebuiltBytes = r.repaired, r.bytes
	st.Evacuating, st.Unplaceable = uint64(r.evacuating), uint64(r.unplaceable)
	if secs := r.busy.Seconds(); secs > 0 {
		st.BytesPerSec = uint64(float64(r.bytes) / secs)
	}
	return st
}

// onlineTargets names the targets online in the cluster map, as a string
// to compare from one repair round to the next.
func (s *Service) onlineTargets() string {
	m, err := s.clusterMap()
	if err != nil {
		return ""
	}
	var b []byte
	for _, t := range m.Targets {
		if t.State == proto.TargetOnline {
			b = binary.AppendUvarint(b, uint64(t.ID))
		}
	}
	return string(b)
}

// evacuateNow moves shards off retired targets, looking every 10 s at
// most (it walks every inode).
func (s *Service) evacuateNow() {
	r := &s.ecRepair
	r.mu.Lock()
	due := time.Since(r.evacuated) >= 10*time.Second
	if due {
		r.evacuated = time.Now()
	}
	r.mu.Unlock()
	if !due {
		return
	}
	left, unplaceable := s.evacuate(1024)
	r.mu.Lock()
	r.evacuating, r.unplaceable = left, unplaceable
	r.mu.Unlock()
}
