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
// loses at most M shards of any stripe. A failure domain is a server, or
// a rack (the label a server registers with, tandem storage --rack; a
// server without one is a rack of its own).

// shardDomains groups the chains of one target by failure domain: the
// server of their target, or its rack. Domains in the order of their
// names, each one's chains in ID order.
func shardDomains(chains []proto.Chain, targets []proto.Target, servers []proto.Server, kind uint8) [][]uint32 {
	rackOf := map[uint32]string{}
	for _, s := range servers {
		rackOf[s.ID] = s.Rack
	}
	domainOf := map[uint32]string{} // target -> domain name
	for _, t := range targets {
		name := fmt.Sprintf("server %010d", t.Server)
		if rack := rackOf[t.Server]; kind == proto.DomainRack && rack != "" {
			name = "rack " + rack
		}
		domainOf[t.ID] = name
	}
	byDomain := map[string][]uint32{}
	for _, c := range chains {
		if len(c.Targets) == 1 {
			d := domainOf[c.Targets[0]]
			byDomain[d] = append(byDomain[d], c.ID)
		}
	}
	names := make([]string, 0, len(byDomain))
	for d := range byDomain {
		names = append(names, d)
	}
	slices.Sort(names)
	out := make([][]uint32, len(names))
	for i, d := range names {
		out[i] = byDomain[d]
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
	if p.Domain != proto.DomainServer && p.Domain != proto.DomainRack {
		return rpc.Errorf(syscall.EINVAL, "failure domain %d unknown", p.Domain)
	}
	f.chainsMu.Lock()
	domains := len(f.shardDomains[p.Domain])
	f.chainsMu.Unlock()
	if domains < s.Shards() {
		what := "servers with targets"
		if p.Domain == proto.DomainRack {
			what = "racks with targets (a server without a rack label is a rack of its own)"
		}
		return rpc.Errorf(syscall.EINVAL, "erasure coding %s puts each of %d shards on a %s of its own; the cluster has %d %s",
			s, s.Shards(), domainWord(p.Domain), domains, what)
	}
	return nil
}

func domainWord(d uint8) string {
	if d == proto.DomainRack {
		return "rack"
	}
	return "server"
}

// pickShards chooses the chains of a new erasure-coded file: one target
// in each of K+M servers, the first server rotating with the inode number
// (as pickChains rotates), and within each server a target rotating with
// it too. It depends only on replicated state, so every replica picks the
// same.
func (f *FSM) pickShards(ino uint64, p proto.ECPattern) ([]uint32, error) {
	f.chainsMu.Lock()
	domains := f.shardDomains[p.Domain]
	f.chainsMu.Unlock()
	n := p.Shards()
	if len(domains) < n {
		return nil, rpc.Errorf(syscall.ENOSPC, "erasure coding %d+%d needs %d %ss with targets; the cluster has %d", p.Data, p.Parity, n, domainWord(p.Domain), len(domains))
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
