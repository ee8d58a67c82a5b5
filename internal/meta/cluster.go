package meta

import (
	"slices"
	"syscall"

	"github.com/cockroachdb/pebble/v2"

	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
	"tandemfs/internal/wire"
)

// The cluster map (servers, targets, chains) lives in the same state
// machine as the namespace, so a file's layout and the chains it names are
// always consistent. Capacity and liveness change every heartbeat and are
// kept in memory on the leader only (see liveness.go).

func loadServers(r reader) ([]proto.Server, error) { return loadAll(r, prefixServer, unmarshalServer) }
func loadTargets(r reader) ([]proto.Target, error) { return loadAll(r, prefixTarget, unmarshalTarget) }
func loadChains(r reader) ([]proto.Chain, error)   { return loadAll(r, prefixChain, unmarshalChain) }

// loadAll decodes every record under prefix.
func loadAll[T any](r reader, prefix []byte, decode func([]byte) (T, error)) ([]T, error) {
	var out []T
	err := scan(r, prefix, func(v []byte) error {
		x, err := decode(v)
		out = append(out, x)
		return err
	})
	return out, err
}

func scan(r reader, prefix []byte, fn func(v []byte) error) error {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return err
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		if err := fn(it.Value()); err != nil {
			return err
		}
	}
	return it.Error()
}

func (t *tx) counter(key []byte) (uint32, error) {
	v, ok, err := get(t.b, key)
	if err != nil {
		return 0, err
	}
	n := uint64(1)
	if ok {
		n = decodeU64(v)
	}
	t.b.Set(key, u64Bytes(n+1), nil)
	return uint32(n), nil
}

// bumpMapVersion marks a change of the cluster map, which watching
// clients hear of at once (a failover moves the heads they write to).
func (t *tx) bumpMapVersion() error {
	_, err := t.counter(keyMapVersion)
	t.changed(0, 0, "")
	return err
}

// registerServer records a storage server and its targets. It is
// idempotent: known UUIDs keep their IDs, so a restarted server finds its
// targets (and the chunks on them) where the layouts expect them.
func (t *tx) registerServer(r *proto.RegisterServerReq, out *wire.Enc) error {
	if r.UUID == "" || r.Addr == "" {
		return rpc.Errorf(syscall.EINVAL, "server registration needs a UUID and an address")
	}
	servers, err := loadServers(t.b)
	if err != nil {
		return err
	}
	targets, err := loadTargets(t.b)
	if err != nil {
		return err
	}
	var srv *proto.Server
	for i := range servers {
		if servers[i].UUID == r.UUID {
			srv = &servers[i]
		}
	}
	if srv == nil {
		id, err := t.counter(keyNextServer)
		if err != nil {
			return err
		}
		srv = &proto.Server{ID: id, UUID: r.UUID}
	}
	srv.Addr, srv.Rack = r.Addr, r.Rack
	t.b.Set(u32Key(prefixServer, srv.ID), marshalServer(srv), nil)
	reply := proto.RegisterServerReply{ServerID: srv.ID}
	for _, ti := range r.Targets {
		var tg *proto.Target
		for i := range targets {
			if targets[i].UUID == ti.UUID {
				tg = &targets[i]
			}
		}
		if tg == nil {
			id, err := t.counter(keyNextTarget)
			if err != nil {
				return err
			}
			tg = &proto.Target{ID: id, UUID: ti.UUID}
			// Every target is also a chain of one, under its own ID,
			// for files that want no replica.
			c := proto.Chain{ID: id, Version: 1, Targets: []uint32{id}, States: []uint8{proto.MemberServing}, SinceMs: []int64{0}}
			t.b.Set(u32Key(prefixChain, c.ID), marshalChain(&c), nil)
		}
		tg.Server = srv.ID
		tg.Path = ti.Path
		// A server registers when it starts: its administrator has
		// dealt with a failed disk, which may now rejoin its chains.
		t.b.Delete(u32Key(prefixFailed, tg.ID), nil)
		tg.TotalBytes, tg.FreeBytes = ti.TotalBytes, ti.FreeBytes
		t.b.Set(u32Key(prefixTarget, tg.ID), marshalTarget(tg), nil)
		reply.TargetIDs = append(reply.TargetIDs, tg.ID)
	}
	fresh := map[uint32]bool{}
	for i, ti := range r.Targets {
		fresh[reply.TargetIDs[i]] = ti.Fresh
	}
	if err := t.resyncTargets(srv.ID, func(_, target uint32) bool { return fresh[target] }); err != nil {
		return err
	}
	if err := t.formChains(); err != nil {
		return err
	}
	if err := t.bumpMapVersion(); err != nil {
		return err
	}
	t.unretire(reply.TargetIDs) // back: erasure-coded files may use them again
	t.onCommit(t.f.reloadChains)
	reply.Encode(out)
	return nil
}

// reloadChains refreshes the in-memory index of the chains new files are
// striped over, by replication factor.
func (f *FSM) reloadChains() {
	chains, err := loadChains(f.db)
	if err != nil {
		f.logf("loading chains: %v", err)
		return
	}
	targets, err := loadTargets(f.db)
	if err != nil {
		f.logf("loading targets: %v", err)
		return
	}
	servers, err := loadServers(f.db)
	if err != nil {
		f.logf("loading servers: %v", err)
		return
	}
	retired, err := loadRetired(f.db)
	if err != nil {
		f.logf("loading retired targets: %v", err)
		return
	}
	byReplicas := spreadChains(chains, targets)
	serving := slices.DeleteFunc(slices.Clone(chains), func(c proto.Chain) bool {
		return len(c.Targets) == 1 && retired[c.Targets[0]]
	})
	byServer := shardDomains(serving, targets, servers, proto.DomainServer)
	byRack := shardDomains(serving, targets, servers, proto.DomainRack)
	f.chainsMu.Lock()
	f.chainsByReplicas = byReplicas
	f.shardDomains = map[uint8][][]uint32{proto.DomainServer: byServer, proto.DomainRack: byRack}
	f.chainsMu.Unlock()
}

// spreadChains groups chains by replication factor, each group in the
// order pickChains takes them from: by the server of each chain's first
// target in turn, so that consecutive chains start on different servers
// wherever there are several. A file with one copy striped over two of
// four targets on two servers then gets one target on each, not, for half
// of the files, both on one server.
func spreadChains(chains []proto.Chain, targets []proto.Target) map[int][]uint32 {
	serverOf := map[uint32]uint32{}
	for _, t := range targets {
		serverOf[t.ID] = t.Server
	}
	// factor -> server of the head -> chain IDs
	groups := map[int]map[uint32][]uint32{}
	for _, c := range chains {
		if len(c.Targets) == 0 {
			continue
		}
		r := len(c.Targets)
		if groups[r] == nil {
			groups[r] = map[uint32][]uint32{}
		}
		srv := serverOf[c.Targets[0]]
		groups[r][srv] = append(groups[r][srv], c.ID)
	}
	byReplicas := map[int][]uint32{}
	for r, byServer := range groups {
		servers := make([]uint32, 0, len(byServer))
		for srv, ids := range byServer {
			slices.Sort(ids)
			servers = append(servers, srv)
		}
		slices.Sort(servers)
		for i := 0; ; i++ {
			took := false
			for _, srv := range servers {
				if ids := byServer[srv]; i < len(ids) {
					byReplicas[r] = append(byReplicas[r], ids[i])
					took = true
				}
			}
			if !took {
				break
			}
		}
	}
	return byReplicas
}

// pickChains chooses the chains of a new file and records in s the
// replication factor it got: s.Replicas, or when that is 0 (the default)
// 2 if the cluster has replicated chains and 1 otherwise; a factor the
// cluster cannot provide falls back to the largest one below it. It takes
// Count consecutive chains starting at a position that rotates with the
// inode number, so that files spread evenly over the targets. It depends
// only on replicated state, so every replica picks the same.
func (f *FSM) pickChains(ino uint64, s *proto.Stripe) []uint32 {
	f.chainsMu.Lock()
	byReplicas := f.chainsByReplicas
	f.chainsMu.Unlock()
	r := int(proto.ReplicasFor(s.Replicas, func(r uint32) bool { return len(byReplicas[int(r)]) > 0 }))
	ids := byReplicas[r]
	n := len(ids)
	if n == 0 {
		return nil
	}
	s.Replicas = uint32(r)
	count := int(s.Count)
	if count <= 0 || count > n {
		count = n
	}
	out := make([]uint32, count)
	start := int(ino % uint64(n))
	for i := range out {
		out[i] = ids[(start+i)%n]
	}
	return out
}
