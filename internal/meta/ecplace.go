package meta

import (
	"fmt"
	"slices"
	"syscall"

	"tandemfs/internal/ec"
	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
)

// Erasure-coded files (internal/ec) put shard j of every stripe on the
// j'th chain of their layout, and each of those chains is a chain of one
// target (every target is one, with the target's ID). The K+M targets of
// a file are in K+M different failure domains, so losing any M domains
// loses at most M shards of any stripe. A failure domain is a server;
// racks are named by no server yet, so a pattern asking for racks is
// refused.

// shardDomains groups the chains of one target by the server of their
// target: servers in ID order, each one's chains in ID order.
func shardDomains(chains []proto.Chain, targets []proto.Target) [][]uint32 {
	serverOf := map[uint32]uint32{}
	for _, t := range targets {
		serverOf[t.ID] = t.Server
	}
	byServer := map[uint32][]uint32{}
	for _, c := range chains {
		if len(c.Targets) == 1 {
			srv := serverOf[c.Targets[0]]
			byServer[srv] = append(byServer[srv], c.ID)
		}
	}
	servers := make([]uint32, 0, len(byServer))
	for srv := range byServer {
		servers = append(servers, srv)
	}
	slices.Sort(servers)
	out := make([][]uint32, len(servers))
	for i, srv := range servers {
		out[i] = byServer[srv]
		slices.Sort(out[i])
	}
	return out
}

// checkECPattern refuses a pattern the cluster cannot place, naming why.
func (f *FSM) checkECPattern(p proto.ECPattern) error {
	s := ec.Scheme{Data: int(p.Data), Parity: int(p.Parity)}
	if err := s.Check(); err != nil {
		return rpc.Errorf(syscall.EINVAL, "%v", err)
	}
	switch p.Domain {
	case proto.DomainServer:
	case proto.DomainRack:
		return rpc.Errorf(syscall.EINVAL, "erasure coding %s over racks: no storage server carries a rack label", s)
	default:
		return rpc.Errorf(syscall.EINVAL, "failure domain %d unknown", p.Domain)
	}
	f.chainsMu.Lock()
	domains := len(f.shardDomains)
	f.chainsMu.Unlock()
	if domains < s.Shards() {
		return rpc.Errorf(syscall.EINVAL, "erasure coding %s puts each of %d shards on a server of its own; the cluster has %d servers with targets", s, s.Shards(), domains)
	}
	return nil
}

// pickShards chooses the chains of a new erasure-coded file: one target
// in each of K+M servers, the first server rotating with the inode number
// (as pickChains rotates), and within each server a target rotating with
// it too. It depends only on replicated state, so every replica picks the
// same.
func (f *FSM) pickShards(ino uint64, p proto.ECPattern) ([]uint32, error) {
	f.chainsMu.Lock()
	domains := f.shardDomains
	f.chainsMu.Unlock()
	n := p.Shards()
	if len(domains) < n {
		return nil, rpc.Errorf(syscall.ENOSPC, "erasure coding %d+%d needs %d servers with targets; the cluster has %d", p.Data, p.Parity, n, len(domains))
	}
	start := ino % uint64(len(domains))
	turn := ino / uint64(len(domains))
	out := make([]uint32, n)
	for i := range out {
		d := domains[(start+uint64(i))%uint64(len(domains))]
		out[i] = d[turn%uint64(len(d))]
	}
	return out, nil
}

// assignChains gives a regular file its layout's chains by its pattern.
func (t *tx) assignChains(n *inodeRec) error {
	if n.Stripe.EC.On() {
		chains, err := t.f.pickShards(n.Ino, n.Stripe.EC)
		if err != nil {
			return err
		}
		n.Chains = chains
		return nil
	}
	n.Chains = t.f.pickChains(n.Ino, &n.Stripe)
	if len(n.Chains) == 0 {
		return errNoTargets
	}
	return nil
}

// ecPatternText is a pattern as an administrator writes it, for messages.
func ecPatternText(p proto.ECPattern) string {
	return fmt.Sprintf("%d+%d", p.Data, p.Parity)
}
