package proto

import "tandemfs/internal/wire"

// Directory leases let a client answer "no such name" without asking.
//
// The kernel looks every new name up before it creates it, and compilers,
// Python and shells look up many names that do not exist. A client holding
// a lease on a directory knows every name in it: the leader sent the
// listing with the lease, and the client adds and removes the names of its
// own changes. In return the leader, before it answers a change to that
// directory made by anyone else, waits until the holder has seen the change
// on its watch (proto.WatchReq.After passes the change's index), or until
// the lease has run out. So a name created on one host and announced to
// another (an MPI barrier) is found there at once, as without leases.

// DirLeaseMs is how long a lease lasts on the leader once granted or
// extended. Holders count it from when they sent the request, and trust
// only nine tenths of it, so their leases end first.
const DirLeaseMs = 500

// MaxLeaseNames bounds the listing of a directory a lease is granted on.
const MaxLeaseNames = 4096

// Flags the leader appends to its replies to create, link, unlink and
// rename (after the reply proper), about the caller's leases.
const (
	// LeaseExtended: the caller's lease on the directory (directories,
	// for a rename) the change was in now runs DirLeaseMs from now.
	LeaseExtended uint8 = 1 << iota
	// LeaseNewDir: the caller made a directory and holds a lease on it;
	// it is empty.
	LeaseNewDir
)

// DirLeaseReq asks for a lease on directory Dir for client session
// Session.
type DirLeaseReq struct {
	Dir     uint64
	Session uint64
}

func (r *DirLeaseReq) Encode(e *wire.Enc) { e.U64(r.Dir); e.U64(r.Session) }
func (r *DirLeaseReq) Decode(d *wire.Dec) { r.Dir = d.U64(); r.Session = d.U64() }

// DirLeaseReply grants a lease, or refuses it (Granted false: the
// directory changed lately from elsewhere, or holds more than
// MaxLeaseNames names). Names is the whole listing as of change Index.
type DirLeaseReply struct {
	Granted bool
	Index   uint64
	Names   []string
}

func (r *DirLeaseReply) Encode(e *wire.Enc) {
	e.Bool(r.Granted)
	e.U64(r.Index)
	e.U32(uint32(len(r.Names)))
	for _, n := range r.Names {
		e.String(n)
	}
}

func (r *DirLeaseReply) Decode(d *wire.Dec) {
	r.Granted = d.Bool()
	r.Index = d.U64()
	n := d.Count(MaxLeaseNames, 4)
	r.Names = make([]string, n)
	for i := range r.Names {
		r.Names[i] = d.String(MaxName)
	}
}

// optionalSession reads a session that newer clients append to requests
// whose first form had none (and log entries written before carry none).
func optionalSession(d *wire.Dec) uint64 {
	if len(d.Rest()) >= 8 {
		return d.U64()
	}
	return 0
}
