package fuse

import (
	"fmt"

	"tandemfs/internal/ec"
	"tandemfs/internal/proto"
)

// Failure domains as the layout attribute names them.
var failureDomains = map[uint8]string{proto.DomainServer: "server", proto.DomainRack: "rack"}

// ecPattern reads the erasure coding a stripe attribute asks for ("" for
// none): "K+M" and a failure domain ("" is server).
func ecPattern(scheme, domain string) (proto.ECPattern, error) {
	if scheme == "" {
		if domain != "" {
			return proto.ECPattern{}, fmt.Errorf("a failure domain without erasure coding")
		}
		return proto.ECPattern{}, nil
	}
	s, err := ec.Parse(scheme)
	if err != nil {
		return proto.ECPattern{}, err
	}
	p := proto.ECPattern{Data: uint8(s.Data), Parity: uint8(s.Parity)}
	switch domain {
	case "", "server":
	case "rack":
		p.Domain = proto.DomainRack
	default:
		return proto.ECPattern{}, fmt.Errorf("failure domain %q: give server or rack", domain)
	}
	return p, nil
}

// domainsWithTargets counts the servers that have targets, and their
// racks (a server without a rack label is a rack of its own).
func domainsWithTargets(m proto.ClusterMap) (servers, racks int) {
	rackOf := map[uint32]string{}
	for _, s := range m.Servers {
		rackOf[s.ID] = s.Rack
	}
	seen, rackSeen := map[uint32]bool{}, map[string]bool{}
	for _, t := range m.Targets {
		seen[t.Server] = true
		rack := rackOf[t.Server]
		if rack == "" {
			rack = fmt.Sprintf("\x00server %d", t.Server)
		}
		rackSeen[rack] = true
	}
	return len(seen), len(rackSeen)
}

// ecLayout describes n's erasure coding and, for a file on its shards,
// where each shard lives.
func ecLayout(m proto.ClusterMap, n *proto.Inode) *ECLayout {
	p := n.Stripe.EC
	l := &ECLayout{Data: int(p.Data), Parity: int(p.Parity), FailureDomain: failureDomains[p.Domain]}
	if n.Inline || len(n.Chains) != p.Shards() {
		return l
	}
	target := map[uint32]proto.Target{}
	for _, t := range m.Targets {
		target[t.ID] = t
	}
	addr, rack := map[uint32]string{}, map[uint32]string{}
	for _, s := range m.Servers {
		addr[s.ID], rack[s.ID] = s.Addr, s.Rack
	}
	for j, chain := range n.Chains {
		kind := "data"
		if j >= int(p.Data) {
			kind = "parity"
		}
		sh := ShardLayout{Shard: j, Kind: kind}
		for _, ch := range m.Chains {
			if ch.ID == chain && len(ch.Targets) == 1 {
				t := target[ch.Targets[0]]
				sh.Target, sh.Server, sh.Addr, sh.Rack = t.ID, t.Server, addr[t.Server], rack[t.Server]
			}
		}
		l.Shards = append(l.Shards, sh)
	}
	return l
}
