package proto

import (
	"maps"
	"slices"

	"tandemfs/internal/wire"
)

// Target states.
const (
	TargetOnline  uint8 = 0 // heartbeating and serving
	TargetOffline uint8 = 1 // its server has been silent too long
	TargetFailed  uint8 = 2 // its disk failed; out of its chains until its server re-registers
)

// Server is a storage server in the cluster map.
type Server struct {
	ID   uint32
	UUID string
	Addr string // host:port clients connect to
	// Rack labels the server's failure domain above itself (tandem
	// storage --rack); "" for none. Erasure-coded files may spread their
	// shards one per rack.
	Rack string
}

// MaxRack bounds a rack label.
const MaxRack = 64

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
	// Device identifies the file system holding the target, across
	// machines (a hash of the machine's ID and the file system's device
	// number); targets sharing one are counted once in the capacity.
	Device uint64
}

// States of a target within a chain.
const (
	MemberServing uint8 = 0 // holds every acknowledged write
	MemberSyncing uint8 = 1 // takes new writes and is being copied up
	MemberOffline uint8 = 2 // failed; misses writes until it resyncs
)

// MemberStateName is the state's name as `tandem status` shows it.
func MemberStateName(s uint8) string {
	switch s {
	case MemberServing:
		return "serving"
	case MemberSyncing:
		return "syncing"
	case MemberOffline:
		return "offline"
	}
	return "unknown"
}

// Chain is an ordered list of targets on different servers that hold the
// same chunks. Its first serving member is the head: clients send it every
// request, and it forwards changes to the other serving and syncing
// members. Any change of membership or state bumps Version.
type Chain struct {
	ID      uint32
	Version uint32
	Targets []uint32
	// States has one entry per member of Targets.
	States []uint8
	// SinceMs is, per member, when it stopped holding every write (unix
	// ms, 0 while serving): a resync copies what changed after it.
	SinceMs []int64
}

// Head is the chain's first serving member.
func (c *Chain) Head() (uint32, bool) {
	for i, t := range c.Targets {
		if c.state(i) == MemberServing {
			return t, true
		}
	}
	return 0, false
}

// Serving counts the members that serve.
func (c *Chain) Serving() int {
	n := 0
	for _, st := range c.States {
		if st == MemberServing {
			n++
		}
	}
	return n
}

// State is the state of member t; ok is false if t is not a member.
func (c *Chain) State(t uint32) (state uint8, ok bool) {
	for i, m := range c.Targets {
		if m == t {
			return c.state(i), true
		}
	}
	return 0, false
}

func (c *Chain) state(i int) uint8 {
	if i < len(c.States) {
		return c.States[i]
	}
	return MemberServing
}

// Followers are the members, other than the head, that take writes: the
// serving and syncing ones.
func (c *Chain) Followers() []uint32 {
	head, _ := c.Head()
	var out []uint32
	for i, t := range c.Targets {
		if t != head && c.state(i) != MemberOffline {
			out = append(out, t)
		}
	}
	return out
}

func (c *Chain) Encode(e *wire.Enc) {
	e.U32(c.ID)
	e.U32(c.Version)
	e.U32s(c.Targets)
	e.U32(uint32(len(c.States)))
	for i := range c.States {
		e.U8(c.States[i])
		e.I64(c.sinceMs(i))
	}
}

func (c *Chain) Decode(d *wire.Dec) {
	c.ID = d.U32()
	c.Version = d.U32()
	c.Targets = d.U32s(8)
	n := d.Count(8, 9)
	c.States = make([]uint8, n)
	c.SinceMs = make([]int64, n)
	for i := range n {
		c.States[i] = d.U8()
		c.SinceMs[i] = d.I64()
	}
}

func (c *Chain) sinceMs(i int) int64 {
	if i < len(c.SinceMs) {
		return c.SinceMs[i]
	}
	return 0
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
		e.String(s.Rack)
	}
	e.U32(uint32(len(m.Targets)))
	for _, t := range m.Targets {
		t.Encode(e)
	}
	e.U32(uint32(len(m.Chains)))
	for i := range m.Chains {
		m.Chains[i].Encode(e)
	}
}

func (m *ClusterMap) Decode(d *wire.Dec) {
	m.Version = d.U64()
	m.InlineLimit = d.U32()
	m.Servers = make([]Server, d.Count(MaxList, 16))
	for i := range m.Servers {
		m.Servers[i].ID = d.U32()
		m.Servers[i].UUID = d.String(64)
		m.Servers[i].Addr = d.String(256)
		m.Servers[i].Rack = d.String(MaxRack)
	}
	m.Targets = make([]Target, d.Count(MaxList, 30))
	for i := range m.Targets {
		m.Targets[i].Decode(d)
	}
	m.Chains = make([]Chain, d.Count(MaxList, 16))
	for i := range m.Chains {
		m.Chains[i].Decode(d)
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
	Device     uint64 // the target's file system: see Target.Device
	// Fresh marks a new disk in place of a dead target: its chains copy
	// everything to it.
	Fresh bool
}

func (t *TargetInfo) Encode(e *wire.Enc) {
	e.String(t.UUID)
	e.String(t.Path)
	e.U64(t.TotalBytes)
	e.U64(t.FreeBytes)
	e.U64(t.Device)
	e.Bool(t.Fresh)
}

func (t *TargetInfo) Decode(d *wire.Dec) {
	t.UUID = d.String(64)
	t.Path = d.String(4096)
	t.TotalBytes = d.U64()
	t.FreeBytes = d.U64()
	t.Device = d.U64()
	t.Fresh = d.Bool()
}

// RegisterServerReq announces a storage server and its targets. It is sent
// at start-up and is idempotent: the same UUIDs get the same IDs back.
type RegisterServerReq struct {
	UUID    string
	Addr    string
	Rack    string // the server's rack label (after Known on the wire)
	Targets []TargetInfo
	// Known are the versions of its replicated chains the server last
	// served at: a member whose chain is still at that version missed
	// nothing (no write is acknowledged without a member unless the chain
	// changes first).
	Known []ChainVersion
}

// ChainVersion is the version of Chain that member Target last knew.
type ChainVersion struct {
	Chain, Target, Version uint32
}

func (r *RegisterServerReq) Encode(e *wire.Enc) {
	e.String(r.UUID)
	e.String(r.Addr)
	e.U32(uint32(len(r.Targets)))
	for i := range r.Targets {
		r.Targets[i].Encode(e)
	}
	e.U32(uint32(len(r.Known)))
	for _, k := range r.Known {
		e.U32(k.Chain)
		e.U32(k.Target)
		e.U32(k.Version)
	}
	e.String(r.Rack)
}

func (r *RegisterServerReq) Decode(d *wire.Dec) {
	r.UUID = d.String(64)
	r.Addr = d.String(256)
	r.Targets = make([]TargetInfo, d.Count(1024, 20))
	for i := range r.Targets {
		r.Targets[i].Decode(d)
	}
	r.Known = make([]ChainVersion, d.Count(MaxList, 12))
	for i := range r.Known {
		r.Known[i] = ChainVersion{d.U32(), d.U32(), d.U32()}
	}
	if len(d.Rest()) > 0 { // log entries from before racks end here
		r.Rack = d.String(MaxRack)
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

// Networks a heartbeat can travel over.
const (
	NetPublic  uint8 = 0 // the network clients reach the server on
	NetPrivate uint8 = 1 // the servers' back-end network
)

// HeartbeatReq is sent by each storage server every heartbeat interval,
// over each network it has.
type HeartbeatReq struct {
	ServerID uint32
	Network  uint8
	Targets  []TargetInfo
	Resyncs  []ResyncProgress
	Scrubs   []ScrubProgress
	Caches   []CacheReport
}

func (r *HeartbeatReq) Encode(e *wire.Enc) {
	e.U32(r.ServerID)
	e.U8(r.Network)
	e.U32(uint32(len(r.Targets)))
	for i := range r.Targets {
		r.Targets[i].Encode(e)
	}
	e.U32(uint32(len(r.Resyncs)))
	for i := range r.Resyncs {
		r.Resyncs[i].Encode(e)
	}
	encodeScrubs(e, r.Scrubs)
	encodeCaches(e, r.Caches)
}

func (r *HeartbeatReq) Decode(d *wire.Dec) {
	r.ServerID = d.U32()
	r.Network = d.U8()
	r.Targets = make([]TargetInfo, d.Count(1024, 20))
	for i := range r.Targets {
		r.Targets[i].Decode(d)
	}
	r.Resyncs = make([]ResyncProgress, d.Count(1024, 40))
	for i := range r.Resyncs {
		r.Resyncs[i].Decode(d)
	}
	r.Scrubs = decodeScrubs(d)
	r.Caches = decodeCaches(d)
}

// ScrubProgress is a storage server's report on the scrub of one store:
// a target's own chunks (Chain == Target, a chain of one) or its copy of
// a replicated chain.
type ScrubProgress struct {
	Target, Chain uint32
	Running       bool
	Chunks        uint64 // chunks read back: by the pass running, else the last
	Bytes         uint64 // bytes read back and verified, likewise
	BadBlocks     uint64 // failed their checksum in the last complete pass (the first pass: so far)
	Unrepaired    uint64 // of those, left bad: no good copy could be had
	Repaired      uint64 // blocks rewritten from a good copy since the server started
	StartedMs     int64  // start of the pass running or last started
	LastDoneMs    int64  // end of the last complete pass, 0 if none
	Buckets       uint32 // of the store's 256 buckets of chunks, those the pass running has done
}

func (p *ScrubProgress) Encode(e *wire.Enc) {
	e.U32(p.Target)
	e.U32(p.Chain)
	e.Bool(p.Running)
	e.U64(p.Chunks)
	e.U64(p.Bytes)
	e.U64(p.BadBlocks)
	e.U64(p.Repaired)
	e.U64(p.Unrepaired)
	e.I64(p.StartedMs)
	e.I64(p.LastDoneMs)
	e.U32(p.Buckets)
}

func (p *ScrubProgress) Decode(d *wire.Dec) {
	p.Target, p.Chain, p.Running = d.U32(), d.U32(), d.Bool()
	p.Chunks, p.Bytes, p.BadBlocks, p.Repaired, p.Unrepaired = d.U64(), d.U64(), d.U64(), d.U64(), d.U64()
	p.StartedMs, p.LastDoneMs = d.I64(), d.I64()
	p.Buckets = d.U32()
}

func encodeScrubs(e *wire.Enc, ps []ScrubProgress) {
	e.U32(uint32(len(ps)))
	for i := range ps {
		ps[i].Encode(e)
	}
}

func decodeScrubs(d *wire.Dec) []ScrubProgress {
	ps := make([]ScrubProgress, d.Count(MaxList, 61))
	for i := range ps {
		ps[i].Decode(d)
	}
	return ps
}

// HeartbeatReply tells a storage server the current map version (it
// reloads the map when it changed) and how long it may keep serving
// replicated chains without another acknowledged heartbeat.
type HeartbeatReply struct {
	MapVersion uint64
	LeaseMs    uint32
}

func (r *HeartbeatReply) Encode(e *wire.Enc) { e.U64(r.MapVersion); e.U32(r.LeaseMs) }
func (r *HeartbeatReply) Decode(d *wire.Dec) { r.MapVersion = d.U64(); r.LeaseMs = d.U32() }

// ResyncProgress is how far a chain's head got in copying a member.
type ResyncProgress struct {
	Chain, Target uint32
	Buckets       uint32 // of 256 done
	Chunks        uint64 // chunks examined
	Copied        uint64 // chunks copied
	Bytes         uint64 // bytes copied
	StartedMs     int64
}

func (p *ResyncProgress) Encode(e *wire.Enc) {
	e.U32(p.Chain)
	e.U32(p.Target)
	e.U32(p.Buckets)
	e.U64(p.Chunks)
	e.U64(p.Copied)
	e.U64(p.Bytes)
	e.I64(p.StartedMs)
}

func (p *ResyncProgress) Decode(d *wire.Dec) {
	p.Chain, p.Target, p.Buckets = d.U32(), d.U32(), d.U32()
	p.Chunks, p.Copied, p.Bytes = d.U64(), d.U64(), d.U64()
	p.StartedMs = d.I64()
}

// TargetFailedReq reports that a target's disk keeps failing.
type TargetFailedReq struct {
	Target uint32
	Reason string
}

func (r *TargetFailedReq) Encode(e *wire.Enc) { e.U32(r.Target); e.String(r.Reason) }
func (r *TargetFailedReq) Decode(d *wire.Dec) { r.Target = d.U32(); r.Reason = d.String(1024) }

// TargetRecoveredReq reports that a failed target serves again: its
// storage server set aside the chunks that lacked writes (Reason says
// how many), which the chains' resyncs copy back.
type TargetRecoveredReq struct {
	Target uint32
	Reason string
}

func (r *TargetRecoveredReq) Encode(e *wire.Enc) { e.U32(r.Target); e.String(r.Reason) }
func (r *TargetRecoveredReq) Decode(d *wire.Dec) { r.Target = d.U32(); r.Reason = d.String(1024) }

// FenceEvent is the outcome of running a server's fence agents.
type FenceEvent struct {
	ServerID uint32
	AtMs     int64
	Fenced   bool
	Summary  string // one line: which agents ran, which one fenced it
}

// ResyncDoneReq reports that Target holds every chunk of Chain as of
// chain version Version; the metadata leader then makes it serving.
type ResyncDoneReq struct {
	Chain, Target, Version uint32
}

func (r *ResyncDoneReq) Encode(e *wire.Enc) { e.U32(r.Chain); e.U32(r.Target); e.U32(r.Version) }
func (r *ResyncDoneReq) Decode(d *wire.Dec) {
	r.Chain, r.Target, r.Version = d.U32(), d.U32(), d.U32()
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
	Resyncs     []ResyncProgress
	Scrubs      []ScrubProgress
	// Fencing is the latest fencing of each server that was fenced.
	Fencing []FenceEvent
	// PrivateSeenMs is, per server ID, the last heartbeat over the
	// private network (unix ms); absent for servers without one.
	PrivateSeenMs map[uint32]int64
	// Locks counts the file locks held, on LockedFiles files.
	Locks, LockedFiles uint32
	// DirLeases counts the directory leases clients hold (lease.go), on
	// LeasedDirs directories.
	DirLeases, LeasedDirs uint32
	// FileLeases counts the file leases clients hold (lease.go), on
	// LeasedFiles files.
	FileLeases, LeasedFiles uint32
	// NFS lists the NFS gateway's service addresses (absent from older
	// replies).
	NFS []NFSService
	// ECRepair is the background repair of erasure-coded stripes written
	// without a shard (absent from older replies).
	ECRepair ECRepairStatus
	// ECScrub is the leader's parity check of every erasure-coded file
	// (absent from older replies).
	ECScrub ECScrubStatus
	// Caches are the flash caches of the storage servers' targets, from
	// their last heartbeats (absent from older replies).
	Caches []CacheReport
}

// ECScrubStatus is the progress of a parity check of every erasure-coded
// file (`tandem scrub`), or of the last one.
type ECScrubStatus struct {
	Running     bool
	Percent     uint32 // of the inodes looked at
	Files       uint64 // erasure-coded files checked
	Stripes     uint64
	Missing     uint64 // shards absent, short or not written
	Mismatched  uint64 // shards that disagreed with parity
	Rebuilt     uint64
	Unreachable uint64
	StartedMs   int64 // unix ms; 0: none yet since this leader took over
	EndedMs     int64 // unix ms of the end of the last pass; 0: none
}

func (s *ECScrubStatus) Encode(e *wire.Enc) {
	e.Bool(s.Running)
	e.U32(s.Percent)
	for _, v := range []uint64{s.Files, s.Stripes, s.Missing, s.Mismatched, s.Rebuilt, s.Unreachable} {
		e.U64(v)
	}
	e.I64(s.StartedMs)
	e.I64(s.EndedMs)
}

func (s *ECScrubStatus) Decode(d *wire.Dec) {
	s.Running, s.Percent = d.Bool(), d.U32()
	s.Files, s.Stripes, s.Missing, s.Mismatched, s.Rebuilt, s.Unreachable = d.U64(), d.U64(), d.U64(), d.U64(), d.U64(), d.U64()
	s.StartedMs, s.EndedMs = d.I64(), d.I64()
}

// ECRepairStatus: stripes that lack a shard, and the shards the leader
// rebuilt since it took over.
type ECRepairStatus struct {
	Degraded     uint64
	Rebuilt      uint64
	RebuiltBytes uint64
	BytesPerSec  uint64 // rebuilt bytes per second of repair work since the leader took over
	Evacuating   uint64 // coded files with shards still on retired targets, to move
	Unplaceable  uint64 // ... with no failure domain left to move them to
}

func (r *StatusReply) Encode(e *wire.Enc) {
	r.Map.Encode(e)
	e.String(r.MetaAddr)
	e.String(r.RaftState)
	e.U64(r.RaftIndex)
	e.U64(r.Inodes)
	e.U32(r.InlineLimit)
	e.U32(r.Sessions)
	e.U32(uint32(len(r.Resyncs)))
	for i := range r.Resyncs {
		r.Resyncs[i].Encode(e)
	}
	e.U32(uint32(len(r.Fencing)))
	for i := range r.Fencing {
		f := &r.Fencing[i]
		e.U32(f.ServerID)
		e.I64(f.AtMs)
		e.Bool(f.Fenced)
		e.String(f.Summary)
	}
	e.U32(uint32(len(r.PrivateSeenMs)))
	for _, id := range slices.Sorted(maps.Keys(r.PrivateSeenMs)) { // deterministic bytes
		e.U32(id)
		e.I64(r.PrivateSeenMs[id])
	}
	encodeScrubs(e, r.Scrubs)
	e.U32(r.Locks)
	e.U32(r.LockedFiles)
	e.U32(r.DirLeases)
	e.U32(r.LeasedDirs)
	e.U32(r.FileLeases)
	e.U32(r.LeasedFiles)
	e.U32(uint32(len(r.NFS)))
	for i := range r.NFS {
		r.NFS[i].Encode(e)
	}
	e.U64(r.ECRepair.Degraded)
	e.U64(r.ECRepair.Rebuilt)
	e.U64(r.ECRepair.RebuiltBytes)
	e.U64(r.ECRepair.BytesPerSec)
	r.ECScrub.Encode(e)
	e.U64(r.ECRepair.Evacuating)
	e.U64(r.ECRepair.Unplaceable)
	encodeCaches(e, r.Caches)
}

func (r *StatusReply) Decode(d *wire.Dec) {
	r.Map.Decode(d)
	r.MetaAddr = d.String(256)
	r.RaftState = d.String(64)
	r.RaftIndex = d.U64()
	r.Inodes = d.U64()
	r.InlineLimit = d.U32()
	r.Sessions = d.U32()
	r.Resyncs = make([]ResyncProgress, d.Count(MaxList, 40))
	for i := range r.Resyncs {
		r.Resyncs[i].Decode(d)
	}
	r.Fencing = make([]FenceEvent, d.Count(MaxList, 17))
	for i := range r.Fencing {
		f := &r.Fencing[i]
		f.ServerID, f.AtMs, f.Fenced, f.Summary = d.U32(), d.I64(), d.Bool(), d.String(4096)
	}
	n := d.Count(MaxList, 12)
	r.PrivateSeenMs = make(map[uint32]int64, n)
	for range n {
		id := d.U32()
		r.PrivateSeenMs[id] = d.I64()
	}
	r.Scrubs = decodeScrubs(d)
	r.Locks, r.LockedFiles = d.U32(), d.U32()
	r.DirLeases, r.LeasedDirs = d.U32(), d.U32()
	r.FileLeases, r.LeasedFiles = d.U32(), d.U32()
	if len(d.Rest()) >= 4 {
		r.NFS = make([]NFSService, d.Count(1024, 32))
		for i := range r.NFS {
			r.NFS[i].Decode(d)
		}
	}
	if len(d.Rest()) >= 32 {
		r.ECRepair = ECRepairStatus{Degraded: d.U64(), Rebuilt: d.U64(), RebuiltBytes: d.U64(), BytesPerSec: d.U64()}
	}
	if len(d.Rest()) >= 69 {
		r.ECScrub.Decode(d)
	}
	if len(d.Rest()) >= 16 {
		r.ECRepair.Evacuating, r.ECRepair.Unplaceable = d.U64(), d.U64()
	}
	r.Caches = decodeCaches(d)
}

// Capacity sums the space of the online targets, counting each file
// system once however many targets it holds (Target.Device names it, on
// its machine): a one-machine cluster keeps every target on the same
// disk, and it has that disk's size, not a multiple of it. Offline and
// failed targets do not count: their space cannot be written.
func Capacity(targets []Target) (total, free uint64) {
	c := CapacityOf(targets)
	return c.Total, c.Free
}

// ClusterCapacity is the space of a set of targets.
type ClusterCapacity struct {
	Total, Free uint64
	FileSystems int      // distinct file systems of online targets
	Offline     []uint32 // targets whose space is not counted
}

// CapacityOf is Capacity with the file systems counted and the targets
// left out named.
func CapacityOf(targets []Target) ClusterCapacity {
	var c ClusterCapacity
	seen := map[uint64]bool{}
	for _, t := range targets {
		if t.State != TargetOnline {
			c.Offline = append(c.Offline, t.ID)
			continue
		}
		if t.Device != 0 && seen[t.Device] {
			continue
		}
		seen[t.Device] = true
		c.FileSystems++
		c.Total += t.TotalBytes
		c.Free += t.FreeBytes
	}
	return c
}

// ReplicasFor is the replication factor a new file gets whose pattern asks
// for asked copies: asked (2 when 0, the default), or the largest factor
// below it that chains exist for (has says whether chains of r members
// exist); 1 when none exists. The metadata service places files by it,
// and clients tell their users what it gives.
func ReplicasFor(asked uint32, has func(r uint32) bool) uint32 {
	r := asked
	if r == 0 {
		r = 2
	}
	for r > 1 && !has(r) {
		r--
	}
	return r
}
