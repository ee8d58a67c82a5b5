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
	// LeaseNewFile: the caller made a regular file and holds a file
	// lease on it, as of the create.
	LeaseNewFile
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

// File leases let a client open a file without asking for its size.
//
// Opening a file asks the leader for its attributes (close-to-open
// consistency: a job sees the whole of a file another host closed before
// it opened it). A client holding a lease on a regular file knows its
// attributes are current and opens it without a call. The leader, before
// it answers any change to the file by another session (a write's commit,
// a truncate, a chmod, an unlink), waits until the holder's watch has
// passed the change, or until the lease has run out, as for directories.
//
// Unlike a directory lease, a file lease is renewed by the holder's watch:
// every watch request (proto.WatchReq) renews all the leases of its
// session, so a client that opens a file again and again asks for it
// about once a minute (FileLeaseLifeMs). A lease lasts FileLeaseMs past the later of
// its grant and the session's last watch request, and no longer than
// FileLeaseLifeMs after its grant. The holder counts from when it sent
// the requests, trusts nine tenths, and asks the leader to hold its watch
// requests at most FileLeaseWatchMs, so that a live watch renews its
// leases before they end.

// FileLeaseMs is how long a file lease lasts past its last renewal.
const FileLeaseMs = 750

// FileLeaseLifeMs bounds a file lease's life: the leader forgets leases
// nobody asked for lately without being told.
const FileLeaseLifeMs = 60_000

// FileLeaseWatchMs is the longest wait a client holding file leases asks
// for in a watch request.
const FileLeaseWatchMs = 250

// MaxFileLeases bounds the file leases one session holds. A client that
// reaches it stops trusting its oldest leases and gives them back
// (OpFileLeaseRelease), so that the leader grants it new ones: a client
// that made more files than this in a minute (every create brings a
// lease) would otherwise get none until the old ones ran out.
const MaxFileLeases = 1 << 16

// MaxFileLeaseRelease bounds the files of one OpFileLeaseRelease.
const MaxFileLeaseRelease = 1 << 16

// FileLeaseRelease gives back Session's leases on Files, which it trusts
// no more.
type FileLeaseRelease struct {
	Session uint64
	Files   []uint64
}

func (r *FileLeaseRelease) Encode(e *wire.Enc) { e.U64(r.Session); e.U64s(r.Files) }
func (r *FileLeaseRelease) Decode(d *wire.Dec) {
	r.Session = d.U64()
	r.Files = d.U64s(MaxFileLeaseRelease)
}

// FileLeaseReply answers OpFileLease (an InoReq with the caller's
// session): the inode, whether a lease on it was granted, and the change
// index the inode is current as of. A lease is refused for anything but
// a regular file, for a file changed lately by another session, and past
// MaxFileLeases.
type FileLeaseReply struct {
	Inode   Inode
	Granted bool
	Index   uint64
}

func (r *FileLeaseReply) Encode(e *wire.Enc) { r.Inode.Encode(e); e.Bool(r.Granted); e.U64(r.Index) }
func (r *FileLeaseReply) Decode(d *wire.Dec) {
	r.Inode.Decode(d)
	r.Granted = d.Bool()
	r.Index = d.U64()
}

// optionalSession reads a session that newer clients append to requests
// whose first form had none (and log entries written before carry none).
func optionalSession(d *wire.Dec) uint64 {
	if len(d.Rest()) >= 8 {
		return d.U64()
	}
	return 0
}
