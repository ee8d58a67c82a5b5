package meta

import (
	"context"
	"maps"
	"slices"
	"sync"
	"syscall"
	"time"

	"tandemfs/internal/fence"
	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
	"tandemfs/internal/wire"
)

// NFS gateway heads hold service addresses by leases kept in the state
// machine, as NSS-HA's pair holds its service IP through Pacemaker: one
// head serves an address at a time. A head renews its lease every quarter
// of its duration and stops serving, on its own clock, before the lease
// can have run out here (internal/nfsha). Another head gets the address
// only once the lease has run out by the leader's clock, the leader has
// led for a whole lease duration (a lease granted by an earlier leader
// has run out by then too), and the old head is fenced if fence agents
// are configured for it (keyed by head ID), as NSS-HA fences before it
// fails over. The grant is a Raft command that checks the epoch the
// leader saw, so two heads racing for an address cannot both win.

func nfsLeaseKey(address string) []byte { return append([]byte("n/nfs/"), address...) }

var prefixNFSLease = []byte("n/nfs/")

// nfsLease is a service address's lease as stored.
type nfsLease struct {
	Address  string
	Head     string
	HeadAddr string
	Epoch    uint64
	Expires  int64    // unix ns, by the clock of the leader that granted it
	Clients  []string // the holder's client connections, as it last reported them
}

func (l *nfsLease) marshal() []byte {
	e := wire.NewEnc(nil)
	e.String(l.Address)
	e.String(l.Head)
	e.String(l.HeadAddr)
	e.U64(l.Epoch)
	e.I64(l.Expires)
	e.U32(uint32(len(l.Clients)))
	for _, c := range l.Clients {
		e.String(c)
	}
	return e.B
}

func unmarshalNFSLease(b []byte) (*nfsLease, error) {
	d := wire.NewDec(b)
	l := &nfsLease{Address: d.String(proto.MaxNFSName), Head: d.String(proto.MaxNFSName),
		HeadAddr: d.String(proto.MaxNFSName), Epoch: d.U64(), Expires: d.I64()}
	if n := d.Count(proto.MaxNFSClients, 4); n > 0 {
		l.Clients = make([]string, n)
		for i := range l.Clients {
			l.Clients[i] = d.String(proto.MaxNFSName)
		}
	}
	return l, d.Finish()
}

func loadNFSLease(r reader, address string) (*nfsLease, error) {
	v, ok, err := get(r, nfsLeaseKey(address))
	if err != nil || !ok {
		return &nfsLease{Address: address}, err
	}
	return unmarshalNFSLease(v)
}

// applyNFSLease is the state machine's side: renew for the holder, give
// back, or grant to the asker if the epoch is still the one the leader
// decided on. A grant that starts a new epoch hands the last holder's
// client connections to the new one, which resets them: a head cut off
// from the network could not close them itself.
func (t *tx) applyNFSLease(r *proto.NFSLeaseReq, expect uint64, out *wire.Enc) error {
	l, err := loadNFSLease(t.b, r.Address)
	if err != nil {
		return err
	}
	granted := false
	var handover []string
	switch {
	case r.Release:
		if l.Head == r.Head { // it closed its connections itself
			l.Head, l.HeadAddr, l.Expires, l.Clients = "", "", 0, nil
		}
	case l.Head == r.Head:
		if l.Expires < t.now {
			l.Epoch++ // it had lapsed: the head serves anew
			handover, l.Clients = l.Clients, nil
		}
		l.Expires, l.HeadAddr, granted = t.now+r.Duration, r.HeadAddr, true
	case l.Epoch == expect:
		handover, l.Clients = l.Clients, nil
		l.Head, l.HeadAddr, l.Epoch, l.Expires, granted = r.Head, r.HeadAddr, l.Epoch+1, t.now+r.Duration, true
	}
	if granted && r.SetClients {
		l.Clients = r.Clients
	}
	t.b.Set(nfsLeaseKey(r.Address), l.marshal(), nil)
	reply := proto.NFSLeaseReply{Granted: granted, Holder: l.Head, Epoch: l.Epoch, Clients: handover}
	reply.Encode(out)
	return nil
}

// nfsHeads is the leader's memory of the heads that asked for leases, for
// status, and of fences run against them.
type nfsHeads struct {
	mu      sync.Mutex
	seen    map[string]map[string]proto.NFSHead // address -> head ID -> head
	fenced  map[string]uint64                   // head ID -> epoch it was fenced at
	tried   map[string]time.Time                // head ID -> last failed fence
	takeMus map[string]*sync.Mutex              // address -> serializes takeovers
}

func newNFSHeads() *nfsHeads {
	return &nfsHeads{seen: map[string]map[string]proto.NFSHead{}, fenced: map[string]uint64{},
		tried: map[string]time.Time{}, takeMus: map[string]*sync.Mutex{}}
}

func (h *nfsHeads) saw(r *proto.NFSLeaseReq) *sync.Mutex {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.seen[r.Address] == nil {
		h.seen[r.Address] = map[string]proto.NFSHead{}
		h.takeMus[r.Address] = &sync.Mutex{}
	}
	h.seen[r.Address][r.Head] = proto.NFSHead{ID: r.Head, Addr: r.HeadAddr, LastSeenMs: time.Now().UnixMilli()}
	return h.takeMus[r.Address]
}

func (h *nfsHeads) list(address string) []proto.NFSHead {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.seen[address]
	var out []proto.NFSHead
	for _, id := range slices.Sorted(maps.Keys(m)) {
		out = append(out, m[id])
	}
	return out
}

// nfsFenceRetry is how long a head whose fence failed is left before the
// next attempt.
const nfsFenceRetry = 5 * time.Second

// nfsLease serves a head's request on the leader.
func (s *Service) nfsLease(r *proto.NFSLeaseReq, out *wire.Enc) error {
	if r.Head == "" || r.Address == "" || r.Duration <= 0 {
		return rpc.Errorf(syscall.EINVAL, "an NFS lease request needs a head, an address and a duration")
	}
	mu := s.nfsHeads.saw(r)
	mu.Lock()
	defer mu.Unlock()
	l, err := loadNFSLease(s.fsm.db, r.Address)
	if err != nil {
		return err
	}
	now := time.Now()
	if !r.Release && l.Head != "" && l.Head != r.Head {
		led := now.Sub(time.Unix(0, s.leaderSince.Load()))
		if now.UnixNano() <= l.Expires || led < time.Duration(r.Duration) || !s.fenceHead(l) {
			reply := proto.NFSLeaseReply{Holder: l.Head, Epoch: l.Epoch}
			reply.Encode(out)
			return nil
		}
	}
	reply, err := s.propose(opNFSLease, func(e *wire.Enc) { r.Encode(e); e.U64(l.Epoch) })
	if err != nil {
		return err
	}
	out.B = append(out.B, reply...)
	return nil
}

// fenceHead runs the fence agents configured for the head holding l, once
// per epoch, and reports whether the address may move: the head is
// fenced, or no agents are configured for it.
func (s *Service) fenceHead(l *nfsLease) bool {
	h := s.nfsHeads
	h.mu.Lock()
	done := h.fenced[l.Head] == l.Epoch && l.Epoch != 0
	recent := time.Since(h.tried[l.Head]) < nfsFenceRetry
	h.mu.Unlock()
	if done {
		return true
	}
	agents := s.cfg.Fence.AgentsFor(l.Head, "")
	if len(agents) == 0 {
		return true
	}
	if recent {
		return false
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := s.cfg.Fence.Fence(ctx, fence.Server{UUID: l.Head, Addr: l.HeadAddr})
	s.fences.Record(o)
	countFence(o)
	s.logf("fencing NFS head %s before its address %s moves: %s", l.Head, l.Address, o)
	h.mu.Lock()
	if o.Fenced {
		h.fenced[l.Head] = l.Epoch
	} else {
		h.tried[l.Head] = time.Now()
	}
	h.mu.Unlock()
	return o.Fenced
}

// nfsStatus lists the service addresses and their heads.
func (s *Service) nfsStatus() ([]proto.NFSService, error) {
	var out []proto.NFSService
	err := scan(s.fsm.db, prefixNFSLease, func(v []byte) error {
		l, err := unmarshalNFSLease(v)
		if err != nil {
			return err
		}
		svc := proto.NFSService{Address: l.Address, Epoch: l.Epoch, ExpiresMs: l.Expires / 1e6, Heads: s.nfsHeads.list(l.Address)}
		if l.Expires >= time.Now().UnixNano() {
			svc.Active = l.Head
		}
		out = append(out, svc)
		return nil
	})
	return out, err
}
