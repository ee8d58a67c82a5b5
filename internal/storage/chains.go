package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"tandemfs/internal/epoch"
	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
	"tandemfs/internal/wire"
)

// A chain of one target stores its chunks in the target itself. A chain
// with replicas stores them in a separate store inside each member target,
// <target>/chains/<chain ID>, so that a resync can list and copy exactly
// the chain's chunks (a target is a member of several chains).

// chainView is the server's copy of the routing part of the cluster map.
type chainView struct {
	version uint64
	chains  map[uint32]proto.Chain
	addrs   map[uint32]string // target ID -> address of its server
}

func newChainView(m *proto.ClusterMap) *chainView {
	v := &chainView{version: m.Version, chains: map[uint32]proto.Chain{}, addrs: map[uint32]string{}}
	for _, c := range m.Chains {
		v.chains[c.ID] = c
	}
	servers := map[uint32]string{}
	for _, srv := range m.Servers {
		servers[srv.ID] = srv.Addr
	}
	for _, t := range m.Targets {
		v.addrs[t.ID] = servers[t.Server]
	}
	return v
}

// chainState is the service's replication state.
type chainState struct {
	view       atomicView
	refreshMu  sync.Mutex // one map fetch at a time
	leaseUntil atomicTime // replicated chains are served until then
	epochs     epoch.Set  // end forwards routed by an old chain version

	storesMu sync.Mutex
	stores   map[uint32]*storeSlot // chain stores by chain ID

	// Head-side locks: a chunk lock orders the changes to one chunk, so
	// every member applies them in the same order, and a resync copies a
	// chunk between two of them; an ino lock is held shared by those and
	// exclusively by deletions of a whole range of chunks.
	chunkLocks [4096]sync.Mutex
	inoLocks   [256]sync.RWMutex
	// inflight counts the changes being applied, for changeBarrier.
	inflight *changesInFlight

	peersMu sync.Mutex
	peers   map[string]*rpc.Client
}

// refreshView loads the cluster map from the metadata service, unless a
// concurrent caller already loaded one at least as new as want.
func (s *Service) refreshView(want uint64) error {
	s.cs.refreshMu.Lock()
	defer s.cs.refreshMu.Unlock()
	if v := s.cs.view.Load(); v != nil && want != 0 && v.version >= want {
		return nil
	}
	var m proto.ClusterMap
	if _, err := s.callMeta(proto.OpClusterMap, nil, func(d *wire.Dec) error { m.Decode(d); return d.Err() }); err != nil {
		return err
	}
	if v := s.cs.view.Load(); v == nil || m.Version >= v.version {
		nv := newChainView(&m)
		s.cs.view.Store(nv)
		s.cs.epochs.Update(m.Chains)
		s.observeMap(nv)
		s.recordVersions(nv)
	}
	return nil
}

// chainOf returns the chain rt names, reloading the map once if the sender
// knows a newer version than this server.
func (s *Service) chainOf(rt *proto.Routing) (proto.Chain, bool) {
	v := s.cs.view.Load()
	var c proto.Chain
	ok := false
	if v != nil {
		c, ok = v.chains[rt.Chain]
	}
	if !ok || rt.Version > c.Version {
		if err := s.refreshView(0); err != nil {
			s.logf("storage: reloading the cluster map: %v", explainMetaErr(err))
		}
		if v = s.cs.view.Load(); v != nil {
			c, ok = v.chains[rt.Chain]
		}
	}
	return c, ok
}

// ServedTwice reports whether two or more members of chain serve, as this
// server last saw the cluster map: a flash cache may then write the
// chain's chunks back, each write sitting on the flash of two servers
// before it is acknowledged (internal/flashcache).
func (s *Service) ServedTwice(chain uint32) bool {
	v := s.cs.view.Load()
	if v == nil {
		return false
	}
	c, ok := v.chains[chain]
	if !ok {
		return false
	}
	return c.Serving() >= 2
}

// admit checks that this server may serve rt and returns the store that
// holds the chain's chunks here and the chain as this server knows it.
func (s *Service) admit(rt *proto.Routing) (*Target, proto.Chain, error) {
	tg, err := s.target(rt.Target)
	if err != nil {
		return nil, proto.Chain{}, err
	}
	c, ok := s.chainOf(rt)
	if !ok {
		if rt.Chain == rt.Target {
			// The map is not loaded yet (metadata service down since
			// we started), but a target's own chain needs none of it.
			return tg, proto.Chain{ID: rt.Chain, Targets: []uint32{rt.Target}}, nil
		}
		return nil, c, rpc.Errorf(syscall.ESTALE, "storage server %s knows no chain %d", s.addr, rt.Chain)
	}
	if len(c.Targets) == 1 {
		if c.Targets[0] != rt.Target {
			return nil, c, rpc.Errorf(syscall.ESTALE, "chain %d is on target %d, not %d", c.ID, c.Targets[0], rt.Target)
		}
		return tg, c, nil
	}
	if err := s.checkReplicated(rt, &c); err != nil {
		return nil, c, err
	}
	if err := s.failed.get(rt.Target); err != nil {
		return nil, c, rpc.Errorf(syscall.EAGAIN, "target %d failed (%v); waiting for failover", rt.Target, err)
	}
	store, err := s.chainStore(tg, c.ID)
	return store, c, err
}

// checkReplicated applies the fencing rules of replicated chains: a valid
// lease, the current chain version, and a member entitled to the request.
func (s *Service) checkReplicated(rt *proto.Routing, c *proto.Chain) error {
	if until := s.cs.leaseUntil.Load(); time.Now().After(until) {
		return rpc.Errorf(syscall.EAGAIN, "storage server %s is fenced: no heartbeat acknowledged by the metadata leader since %s", s.addr, until.Format(time.TimeOnly))
	}
	if rt.Version != c.Version {
		return rpc.Errorf(syscall.ESTALE, "chain %d is at version %d here, the request was routed by version %d", c.ID, c.Version, rt.Version)
	}
	state, member := c.State(rt.Target)
	switch {
	case !member:
		return rpc.Errorf(syscall.ESTALE, "target %d is not a member of chain %d", rt.Target, c.ID)
	case rt.Forwarded && state == proto.MemberOffline:
		return rpc.Errorf(syscall.ESTALE, "target %d is offline in chain %d", rt.Target, c.ID)
	case !rt.Forwarded:
		if head, _ := c.Head(); head != rt.Target {
			return rpc.Errorf(syscall.ESTALE, "target %d is not the head of chain %d (target %d is)", rt.Target, c.ID, head)
		}
	}
	return nil
}

// storeSlot holds a chain's store once it is open. Its mutex is held while
// the store is opened, so that requests for that chain wait for it while
// those for chains already open do not.
type storeSlot struct {
	mu sync.Mutex
	st atomic.Pointer[Target]
}

// chainStore opens (once) the store of chain id inside target tg.
func (s *Service) chainStore(tg *Target, id uint32) (*Target, error) {
	slot := s.storeSlot(id)
	if st := slot.st.Load(); st != nil {
		return st, nil
	}
	slot.mu.Lock()
	defer slot.mu.Unlock()
	if st := slot.st.Load(); st != nil {
		return st, nil
	}
	dir := chainStoreDir(tg, id)
	if err := s.cfg.FS.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("store of chain %d on target %s: %w", id, tg.Dir(), err)
	}
	// A server killed while it formatted the store left it without its
	// target.json: it holds no chunk yet, and is formatted again.
	st, err := OpenTarget(dir, Options{FS: s.cfg.FS, MaxOpenChunks: s.cfg.MaxOpenChunks, Logf: s.logf, FinishFormat: true})
	if err != nil {
		return nil, fmt.Errorf("store of chain %d: %w", id, err)
	}
	slot.st.Store(st)
	return st, nil
}

// storeSlot returns chain id's slot, made empty if there was none.
func (s *Service) storeSlot(id uint32) *storeSlot {
	s.cs.storesMu.Lock()
	defer s.cs.storesMu.Unlock()
	slot := s.cs.stores[id]
	if slot == nil {
		slot = &storeSlot{}
		s.cs.stores[id] = slot
	}
	return slot
}

// chainStoreDir is the directory of target tg's store of chain id.
func chainStoreDir(tg *Target, id uint32) string {
	return filepath.Join(tg.Dir(), "chains", strconv.FormatUint(uint64(id), 10))
}

// chainStoreIDs lists the replicated chains target tg holds a store of
// (none, without an error, before the first one is made).
func (s *Service) chainStoreIDs(tg *Target) ([]uint32, error) {
	names, err := s.cfg.FS.ReadDirNames(filepath.Join(tg.Dir(), "chains"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []uint32
	for _, n := range names {
		if id, err := strconv.ParseUint(n, 10, 32); err == nil {
			ids = append(ids, uint32(id))
		}
	}
	slices.Sort(ids)
	return ids, nil
}

func (s *Service) closeChainStores() {
	s.cs.storesMu.Lock()
	defer s.cs.storesMu.Unlock()
	for _, slot := range s.cs.stores {
		slot.mu.Lock()
		if st := slot.st.Load(); st != nil {
			st.Close()
		}
		slot.mu.Unlock()
	}
}

// peer is the RPC client for another storage server.
func (s *Service) peer(addr string) *rpc.Client {
	s.cs.peersMu.Lock()
	defer s.cs.peersMu.Unlock()
	c := s.cs.peers[addr]
	if c == nil {
		c = rpc.NewClient(addr, s.cfg.Secret)
		c.MaxIdle = 64
		c.CallTimeout = 30 * time.Second
		c.Observer = peerCallMetrics
		s.cs.peers[addr] = c
	}
	return c
}

func (s *Service) closePeers() {
	s.cs.peersMu.Lock()
	defer s.cs.peersMu.Unlock()
	for _, c := range s.cs.peers {
		c.Close()
	}
}

type atomicView = atomic.Pointer[chainView]

// atomicTime is a time.Time readable and writable concurrently.
type atomicTime struct{ ns atomic.Int64 }

func (t *atomicTime) Load() time.Time   { return time.Unix(0, t.ns.Load()) }
func (t *atomicTime) Store(v time.Time) { t.ns.Store(v.UnixNano()) }
