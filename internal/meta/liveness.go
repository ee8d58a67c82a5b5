package meta

import (
	"maps"
	"slices"
	"sync"
	"time"

	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
)

// liveness is the leader's in-memory view of storage heartbeats: when each
// server was last heard from on each network, the capacity of its targets
// and the progress of the resyncs its targets run.
type liveness struct {
	mu      sync.Mutex
	public  map[uint32]time.Time // by server ID
	private map[uint32]time.Time
	targets map[string]proto.TargetInfo      // by target UUID
	resyncs map[uint32]resyncsSeen           // by the server running them
	scrubs  map[uint32][]proto.ScrubProgress // by server, from its last heartbeat
	caches  map[uint32][]proto.CacheReport   // likewise
}

// resyncsSeen are the resyncs a server reported in its last heartbeat.
type resyncsSeen struct {
	list []proto.ResyncProgress
	at   time.Time
}

func newLiveness() *liveness {
	return &liveness{
		public: map[uint32]time.Time{}, private: map[uint32]time.Time{},
		targets: map[string]proto.TargetInfo{}, resyncs: map[uint32]resyncsSeen{},
		scrubs: map[uint32][]proto.ScrubProgress{}, caches: map[uint32][]proto.CacheReport{},
	}
}

func (l *liveness) heartbeat(r *proto.HeartbeatReq) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if r.Network == proto.NetPrivate {
		l.private[r.ServerID] = now
	} else {
		l.public[r.ServerID] = now
	}
	for _, t := range r.Targets {
		l.targets[t.UUID] = t
	}
	// Each heartbeat lists every resync the server runs: finished ones
	// drop out.
	l.resyncs[r.ServerID] = resyncsSeen{r.Resyncs, now}
	l.scrubs[r.ServerID] = r.Scrubs
	if r.Network != proto.NetPrivate {
		l.caches[r.ServerID] = r.Caches
	}
}

// cacheReports are the flash cache reports of every server, from its
// last heartbeat on the public network.
func (l *liveness) cacheReports() []proto.CacheReport {
	l.mu.Lock()
	defer l.mu.Unlock()
	return byServer(l.caches)
}

// byServer lists the reports of every server, in the order of their IDs.
func byServer[T any](m map[uint32][]T) []T {
	var out []T
	for _, id := range slices.Sorted(maps.Keys(m)) {
		out = append(out, m[id]...)
	}
	return out
}

// scrubReports are the scrub reports of every server, from its last
// heartbeat (a server that stopped keeps its last report: the state of its
// disks when it was last heard from).
func (l *liveness) scrubReports() []proto.ScrubProgress {
	l.mu.Lock()
	defer l.mu.Unlock()
	return byServer(l.scrubs)
}

// lastPublic is when server id was last heard from on the network clients
// use; zero if never (since this replica leads).
func (l *liveness) lastPublic(id uint32) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.public[id]
}

// annotate fills in the live state and capacity of targets.
func (l *liveness) annotate(ts []proto.Target, deadAfter time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	for i := range ts {
		t := &ts[i]
		seen, ok := l.public[t.Server]
		t.State = proto.TargetOffline
		if ok {
			t.LastSeenMs = seen.UnixMilli()
			if now.Sub(seen) < deadAfter {
				t.State = proto.TargetOnline
			}
		}
		if info, ok := l.targets[t.UUID]; ok {
			t.TotalBytes, t.FreeBytes, t.Device = info.TotalBytes, info.FreeBytes, info.Device
		}
	}
}

// privateSeen is when each server was last heard from on the private
// network, for `tandem status`.
func (l *liveness) privateSeen() map[uint32]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[uint32]int64, len(l.private))
	for id, t := range l.private {
		out[id] = t.UnixMilli()
	}
	return out
}

// activeResyncs are the resyncs reported within the last window.
func (l *liveness) activeResyncs(window time.Duration) []proto.ResyncProgress {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []proto.ResyncProgress
	for id, r := range l.resyncs {
		if time.Since(r.at) > window {
			delete(l.resyncs, id)
			continue
		}
		out = append(out, r.list...)
	}
	return out
}

// sessions tracks when each client session was last heard from.
type sessions struct {
	mu   sync.Mutex
	seen map[uint64]time.Time
}

func newSessions() *sessions { return &sessions{seen: map[uint64]time.Time{}} }

func (s *sessions) touch(id uint64) {
	s.mu.Lock()
	s.seen[id] = time.Now()
	s.mu.Unlock()
}

func (s *sessions) lastSeen(id uint64) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.seen[id]
	return t, ok
}

func (s *sessions) count(within time.Duration) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for id, t := range s.seen {
		if time.Since(t) < within {
			n++
		} else if time.Since(t) > 10*within {
			delete(s.seen, id)
		}
	}
	return n
}

// storageClients keeps one RPC client per storage server address, for the
// service's own calls (deleting chunks of removed files).
type storageClients struct {
	secret  rpc.Secret
	mu      sync.Mutex
	clients map[string]*rpc.Client
}

func (c *storageClients) get(addr string) *rpc.Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl, ok := c.clients[addr]
	if !ok {
		cl = rpc.NewClient(addr, c.secret)
		cl.CallTimeout = 30 * time.Second
		cl.Observer = storageCallMetrics
		c.clients[addr] = cl
	}
	return cl
}

func (c *storageClients) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cl := range c.clients {
		cl.Close()
	}
}
