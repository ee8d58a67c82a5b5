package proto

import "tandemfs/internal/wire"

// Which files each client session holds open. Clients open files without
// asking the metadata service (file leases) and write a replicated file's
// data straight to its targets, so the service cannot see who holds a file;
// changing a file's layout (converting it between copies and erasure
// coding) must know who may still read or write the old one. Two messages
// tell it:
//
//   - a client's watch requests (WatchReq.Opens) carry every file it holds
//     open, whenever that set changed since the last report and every
//     OpensReportMs, numbered by a counter that grows with each change;
//   - before a client first writes a file's data to its targets it calls
//     OpOpenWrite, and the reply is the file as it is now (a file whose
//     layout changed since it was opened is written in the new one).
//
// The leader keeps both in memory only: a new leader hears every live
// session's report within a watch round and judges nothing before the
// session timeout has passed since it took over, as for orphaned files.

// OpensReportMs is the longest a client goes without reporting its open
// files, changed or not.
const OpensReportMs = 2000

// MaxOpenReport bounds the files in one report; a session holding more
// reports Overflow, and the leader takes it to hold every file open for
// writing.
const MaxOpenReport = 1 << 16

// OpenFile is one file a session holds open, and whether for writing.
type OpenFile struct {
	Ino     uint64
	Writing bool
}

// OpenFiles is a session's report: every file it holds open as of its
// change counter Gen.
type OpenFiles struct {
	Gen      uint64
	Overflow bool
	Files    []OpenFile
}

func (r *OpenFiles) Encode(e *wire.Enc) {
	e.U64(r.Gen)
	e.Bool(r.Overflow)
	e.U32(uint32(len(r.Files)))
	for _, f := range r.Files {
		e.U64(f.Ino)
		e.Bool(f.Writing)
	}
}

func (r *OpenFiles) Decode(d *wire.Dec) {
	r.Gen = d.U64()
	r.Overflow = d.Bool()
	n := d.Count(MaxOpenReport, 9)
	r.Files = make([]OpenFile, n)
	for i := range r.Files {
		r.Files[i] = OpenFile{Ino: d.U64(), Writing: d.Bool()}
	}
}

// OpenWriteReq (OpOpenWrite) tells the leader that session is about to
// write file Ino's data to its targets; Gen is the session's change
// counter with the file counted as open for writing. The reply is the
// file's Inode.
type OpenWriteReq struct {
	Ino     uint64
	Session uint64
	Gen     uint64
}

func (r *OpenWriteReq) Encode(e *wire.Enc) { e.U64(r.Ino); e.U64(r.Session); e.U64(r.Gen) }
func (r *OpenWriteReq) Decode(d *wire.Dec) { r.Ino = d.U64(); r.Session = d.U64(); r.Gen = d.U64() }
