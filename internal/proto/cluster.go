package proto

import "tandemfs/internal/wire"

// Target states.
const (
	TargetOnline  uint8 = 0 // heartbeating and serving
	TargetOffline uint8 = 1 // its server has been silent too long
)

// Server is a storage server in the cluster map.
type Server struct {
	ID   uint32
	UUID string
	Addr string // host:port clients connect to
}

// Target is a storage target (a directory on a server's local disk).
type Target struct {
	ID         uint32
	UUID       string
	Server     uint32
	Path       string
	State      uint8
	TotalBytes uint64
	FreeBytes  uint64
	LastSeenMs int64 // unix ms of the last heartbeat, 0 if never
	// Device identifies the file system holding the target on its
	// server; targets sharing one are counted once in the capacity.
	Device uint64
}

// Chain is an ordered list of targets that hold the same chunks.
type Chain struct {
	ID      uint32
	Version uint32
	Targets []uint32
}

// ClusterMap is the part of the cluster state clients need to route I/O.
type ClusterMap struct {
	Version uint64
	// InlineLimit is the largest file kept inline in its inode.
	InlineLimit uint32
	Servers     []Server
	Targets     []Target
	Chains      []Chain
}

func (m *ClusterMap) Encode(e *wire.Enc) {
	e.U64(m.Version)
	e.U32(m.InlineLimit)
	e.U32(uint32(len(m.Servers)))
	for _, s := range m.Servers {
		e.U32(s.ID)
		e.String(s.UUID)
		e.String(s.Addr)
	}
	e.U32(uint32(len(m.Targets)))
	for _, t := range m.Targets {
		t.Encode(e)
	}
	e.U32(uint32(len(m.Chains)))
	for _, c := range m.Chains {
		e.U32(c.ID)
		e.U32(c.Version)
		e.U32s(c.Targets)
	}
}

func (m *ClusterMap) Decode(d *wire.Dec) {
	m.Version = d.U64()
	m.InlineLimit = d.U32()
	m.Servers = make([]Server, d.Count(MaxList, 12))
	for i := range m.Servers {
		m.Servers[i].ID = d.U32()
		m.Servers[i].UUID = d.String(64)
		m.Servers[i].Addr = d.String(256)
	}
	m.Targets = make([]Target, d.Count(MaxList, 30))
	for i := range m.Targets {
		m.Targets[i].Decode(d)
	}
	m.Chains = make([]Chain, d.Count(MaxList, 12))
	for i := range m.Chains {
		m.Chains[i].ID = d.U32()
		m.Chains[i].Version = d.U32()
		m.Chains[i].Targets = d.U32s(8)
	}
}

func (t *Target) Encode(e *wire.Enc) {
	e.U32(t.ID)
	e.String(t.UUID)
	e.U32(t.Server)
	e.String(t.Path)
	e.U8(t.State)
	e.U64(t.TotalBytes)
	e.U64(t.FreeBytes)
	e.I64(t.LastSeenMs)
	e.U64(t.Device)
}

func (t *Target) Decode(d *wire.Dec) {
	t.ID = d.U32()
	t.UUID = d.String(64)
	t.Server = d.U32()
	t.Path = d.String(4096)
	t.State = d.U8()
	t.TotalBytes = d.U64()
	t.FreeBytes = d.U64()
	t.LastSeenMs = d.I64()
	t.Device = d.U64()
}

// TargetInfo is what a storage server reports about one of its targets.
type TargetInfo struct {
	UUID       string
	Path       string
	TotalBytes uint64
	FreeBytes  uint64
	Device     uint64 // st_dev of the target directory
}

func (t *TargetInfo) Encode(e *wire.Enc) {
	e.String(t.UUID)
	e.String(t.Path)
	e.U64(t.TotalBytes)
	e.U64(t.FreeBytes)
	e.U64(t.Device)
}

func (t *TargetInfo) Decode(d *wire.Dec) {
	t.UUID = d.String(64)
	t.Path = d.String(4096)
	t.TotalBytes = d.U64()
	t.FreeBytes = d.U64()
	t.Device = d.U64()
}

// RegisterServerReq announces a storage server and its targets. It is sent
// at start-up and is idempotent: the same UUIDs get the same IDs back.
type RegisterServerReq struct {
	UUID    string
	Addr    string
	Targets []TargetInfo
}

func (r *RegisterServerReq) Encode(e *wire.Enc) {
	e.String(r.UUID)
	e.String(r.Addr)
	e.U32(uint32(len(r.Targets)))
	for i := range r.Targets {
		r.Targets[i].Encode(e)
	}
}

func (r *RegisterServerReq) Decode(d *wire.Dec) {
	r.UUID = d.String(64)
	r.Addr = d.String(256)
	r.Targets = make([]TargetInfo, d.Count(1024, 20))
	for i := range r.Targets {
		r.Targets[i].Decode(d)
	}
}

// RegisterServerReply gives the server's ID and its targets' IDs, in the
// order of the request.
type RegisterServerReply struct {
	ServerID  uint32
	TargetIDs []uint32
}

func (r *RegisterServerReply) Encode(e *wire.Enc) { e.U32(r.ServerID); e.U32s(r.TargetIDs) }
func (r *RegisterServerReply) Decode(d *wire.Dec) {
	r.ServerID = d.U32()
	r.TargetIDs = d.U32s(1024)
}

// HeartbeatReq is sent by each storage server every heartbeat interval.
type HeartbeatReq struct {
	ServerID uint32
	Targets  []TargetInfo
}

func (r *HeartbeatReq) Encode(e *wire.Enc) {
	e.U32(r.ServerID)
	e.U32(uint32(len(r.Targets)))
	for i := range r.Targets {
		r.Targets[i].Encode(e)
	}
}

func (r *HeartbeatReq) Decode(d *wire.Dec) {
	r.ServerID = d.U32()
	r.Targets = make([]TargetInfo, d.Count(1024, 20))
	for i := range r.Targets {
		r.Targets[i].Decode(d)
	}
}

// StatusReply is what `tandem status` shows.
type StatusReply struct {
	Map         ClusterMap
	MetaAddr    string
	RaftState   string
	RaftIndex   uint64
	Inodes      uint64
	InlineLimit uint32
	Sessions    uint32
}

func (r *StatusReply) Encode(e *wire.Enc) {
	r.Map.Encode(e)
	e.String(r.MetaAddr)
	e.String(r.RaftState)
	e.U64(r.RaftIndex)
	e.U64(r.Inodes)
	e.U32(r.InlineLimit)
	e.U32(r.Sessions)
}

func (r *StatusReply) Decode(d *wire.Dec) {
	r.Map.Decode(d)
	r.MetaAddr = d.String(256)
	r.RaftState = d.String(64)
	r.RaftIndex = d.U64()
	r.Inodes = d.U64()
	r.InlineLimit = d.U32()
	r.Sessions = d.U32()
}

// Capacity sums the space of targets, counting a file system shared by
// several targets of one server once (a one-machine cluster keeps every
// target on the same disk).
func Capacity(targets []Target) (total, free uint64) {
	type fsKey struct {
		server uint32
		device uint64
	}
	seen := map[fsKey]bool{}
	for _, t := range targets {
		k := fsKey{t.Server, t.Device}
		if t.Device != 0 && seen[k] {
			continue
		}
		seen[k] = true
		total += t.TotalBytes
		free += t.FreeBytes
	}
	return total, free
}
