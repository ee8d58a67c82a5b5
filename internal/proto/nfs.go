package proto

import "tandemfs/internal/wire"

// NFS gateway heads hold their service addresses by leases that the
// metadata leader grants through the Raft log (meta/nfslease.go): one head
// at a time serves an address, and another takes it only after the lease
// has run out and the old head is fenced.

// MaxNFSName bounds head IDs and addresses in NFS lease messages.
const MaxNFSName = 256

// MaxNFSClients bounds the client connections a head reports per service
// address; a head with more reports the first this many.
const MaxNFSClients = 4096

// NFSLeaseReq asks for the lease of a service address, renews it, or
// (Release) gives it back.
type NFSLeaseReq struct {
	Head     string // the asking head's ID
	HeadAddr string // where the head is reached when it is not serving (status)
	Address  string // the service address, host:port
	Duration int64  // ns the lease lasts from the leader's grant
	Release  bool
	// Clients, when SetClients, replaces the TCP peers (IP:port) the
	// holder has connections from. The head that takes the address next
	// gets them back, to reset connections its kernel knows nothing of
	// (internal/nfsha, "tickle ACKs").
	SetClients bool
	Clients    []string
}

func (r *NFSLeaseReq) Encode(e *wire.Enc) {
	e.String(r.Head)
	e.String(r.HeadAddr)
	e.String(r.Address)
	e.I64(r.Duration)
	e.Bool(r.Release)
	e.Bool(r.SetClients)
	encodeStrings(e, r.Clients)
}

func (r *NFSLeaseReq) Decode(d *wire.Dec) {
	r.Head = d.String(MaxNFSName)
	r.HeadAddr = d.String(MaxNFSName)
	r.Address = d.String(MaxNFSName)
	r.Duration = d.I64()
	r.Release = d.Bool()
	r.SetClients = d.Bool()
	r.Clients = decodeStrings(d, MaxNFSClients)
}

// NFSLeaseReply says whether the asking head holds the address, and who
// does. Epoch counts the address's changes of holder. A grant that starts
// a new epoch carries the client connections the last holder reported:
// the new holder resets them.
type NFSLeaseReply struct {
	Granted bool
	Holder  string
	Epoch   uint64
	Clients []string
}

func (r *NFSLeaseReply) Encode(e *wire.Enc) {
	e.Bool(r.Granted)
	e.String(r.Holder)
	e.U64(r.Epoch)
	encodeStrings(e, r.Clients)
}

func (r *NFSLeaseReply) Decode(d *wire.Dec) {
	r.Granted = d.Bool()
	r.Holder = d.String(MaxNFSName)
	r.Epoch = d.U64()
	r.Clients = decodeStrings(d, MaxNFSClients)
}

func encodeStrings(e *wire.Enc, ss []string) {
	e.U32(uint32(len(ss)))
	for _, s := range ss {
		e.String(s)
	}
}

func decodeStrings(d *wire.Dec, max int) []string {
	n := d.Count(max, 4)
	if n == 0 {
		return nil
	}
	ss := make([]string, n)
	for i := range ss {
		ss[i] = d.String(MaxNFSName)
	}
	return ss
}

// NFSService is a service address as `tandem status` shows it: which head
// serves it, and every head that asked for it.
type NFSService struct {
	Address   string
	Active    string // the head holding the lease; "" if none
	Epoch     uint64
	ExpiresMs int64 // unix ms when the lease runs out unless renewed
	Heads     []NFSHead
}

// NFSHead is one gateway head as the leader saw it.
type NFSHead struct {
	ID         string
	Addr       string
	LastSeenMs int64 // unix ms of its last lease request
}

func (s *NFSService) Encode(e *wire.Enc) {
	e.String(s.Address)
	e.String(s.Active)
	e.U64(s.Epoch)
	e.I64(s.ExpiresMs)
	e.U32(uint32(len(s.Heads)))
	for _, h := range s.Heads {
		e.String(h.ID)
		e.String(h.Addr)
		e.I64(h.LastSeenMs)
	}
}

func (s *NFSService) Decode(d *wire.Dec) {
	s.Address = d.String(MaxNFSName)
	s.Active = d.String(MaxNFSName)
	s.Epoch = d.U64()
	s.ExpiresMs = d.I64()
	s.Heads = make([]NFSHead, d.Count(1024, 16))
	for i := range s.Heads {
		s.Heads[i] = NFSHead{ID: d.String(MaxNFSName), Addr: d.String(MaxNFSName), LastSeenMs: d.I64()}
	}
}
