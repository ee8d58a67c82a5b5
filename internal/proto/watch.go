package proto

import "tandemfs/internal/wire"

// Namespace change notification. Every change the metadata state machine
// applies carries its Raft log index; the leader keeps the recent changes
// in memory, and a client long-polls for those after the last index it has
// seen. A client that misses nothing may keep what it has learnt for
// longer than a timeout, dropping exactly what changed.

// WatchReq asks for the changes after index After of the event stream
// Stream (0: none yet). The leader answers at once if it has changes,
// and otherwise waits up to WaitMs for one.
//
// Session names the client: a request also tells the leader that the
// client has taken in every change up to After, which is what a change to
// a directory or file it holds a lease on waits for, and it renews the
// session's file leases (lease.go).
//
// Opens, when set, is the session's report of the files it holds open
// (opens.go).
type WatchReq struct {
	Stream  uint64
	After   uint64
	WaitMs  uint32
	Session uint64
	Opens   *OpenFiles
}

func (r *WatchReq) Encode(e *wire.Enc) {
	e.U64(r.Stream)
	e.U64(r.After)
	e.U32(r.WaitMs)
	e.U64(r.Session)
	if r.Opens != nil {
		r.Opens.Encode(e)
	}
}

func (r *WatchReq) Decode(d *wire.Dec) {
	r.Stream = d.U64()
	r.After = d.U64()
	r.WaitMs = d.U32()
	r.Session = optionalSession(d)
	r.Opens = nil
	if len(d.Rest()) > 0 {
		r.Opens = &OpenFiles{}
		r.Opens.Decode(d)
	}
}

// MaxWatchWait bounds how long a watch request may be held.
const MaxWatchWait = 10_000

// MaxWatchEvents bounds the changes in one watch reply.
const MaxWatchEvents = 1 << 14

// ChangeEvent names what one applied command changed: an inode (Name
// empty and Parent 0), the entry Name in directory Parent, or, with Ino
// and Parent both 0, the cluster map. Session is the client session that
// made a change to a directory entry, when it said (0 otherwise).
type ChangeEvent struct {
	Index   uint64
	Ino     uint64
	Parent  uint64
	Name    string
	Session uint64
}

// MapChanged reports whether the change is to the cluster map.
func (ev *ChangeEvent) MapChanged() bool { return ev.Ino == 0 && ev.Parent == 0 }

// WatchReply holds every change with an index in (After, Upto] when Lost
// is false. Lost means changes the client asked for are gone (another
// leader took over, so Stream differs, or the client fell too far behind):
// it must forget everything it learnt and go on from Upto.
type WatchReply struct {
	Stream uint64
	Upto   uint64
	Lost   bool
	Events []ChangeEvent
}

func (r *WatchReply) Encode(e *wire.Enc) {
	e.U64(r.Stream)
	e.U64(r.Upto)
	e.Bool(r.Lost)
	e.U32(uint32(len(r.Events)))
	for i := range r.Events {
		ev := &r.Events[i]
		e.U64(ev.Index)
		e.U64(ev.Ino)
		e.U64(ev.Parent)
		e.String(ev.Name)
		e.U64(ev.Session)
	}
}

func (r *WatchReply) Decode(d *wire.Dec) {
	r.Stream = d.U64()
	r.Upto = d.U64()
	r.Lost = d.Bool()
	n := d.Count(MaxWatchEvents, 36)
	r.Events = make([]ChangeEvent, n)
	for i := range r.Events {
		ev := &r.Events[i]
		ev.Index = d.U64()
		ev.Ino = d.U64()
		ev.Parent = d.U64()
		ev.Name = d.String(MaxName)
		ev.Session = d.U64()
	}
}
