package proto

import (
	"syscall"

	"tandemfs/internal/wire"
)

// Converting a file between copies and erasure coding (`tandem ec
// convert`): the converter asks the leader to begin (OpConvertBegin),
// writes the file's bytes in the new layout beside the old one, and asks
// it to swap them (OpConvertCommit) in one command, by compare-and-set on
// the inode's version. A file open for writing anywhere is refused at the
// begin, and a writer that comes along before the swap aborts it
// (ErrConvertAborted): the converter gives way and starts again.

// ErrConvertAborted answers a commit whose conversion a writer aborted,
// or which the leader no longer knows (it changed since the begin).
const ErrConvertAborted = syscall.ECOMM

// ConvertBeginReq asks to convert file Ino to the pattern Stripe (an EC
// pattern, or none for copies with Stripe.Replicas; a ChunkSize of 0
// keeps the file's).
type ConvertBeginReq struct {
	Ino     uint64
	Session uint64
	Stripe  Stripe
}

func (r *ConvertBeginReq) Encode(e *wire.Enc) {
	e.U64(r.Ino)
	e.U64(r.Session)
	r.Stripe.Encode(e)
	r.Stripe.EC.Encode(e)
}

func (r *ConvertBeginReq) Decode(d *wire.Dec) {
	r.Ino = d.U64()
	r.Session = d.U64()
	r.Stripe.Decode(d)
	r.Stripe.EC.DecodeOptional(d)
}

// ConvertBeginReply: the conversion's token, the file as it is now, and
// the new layout (Stripe and Chains) to write it in.
type ConvertBeginReply struct {
	Token  uint64
	Inode  Inode
	Stripe Stripe
	Chains []uint32
}

func (r *ConvertBeginReply) Encode(e *wire.Enc) {
	e.U64(r.Token)
	r.Inode.Encode(e)
	r.Stripe.Encode(e)
	r.Stripe.EC.Encode(e)
	e.U32s(r.Chains)
}

func (r *ConvertBeginReply) Decode(d *wire.Dec) {
	r.Token = d.U64()
	r.Inode.Decode(d)
	r.Stripe.Decode(d)
	r.Stripe.EC.DecodeOptional(d)
	r.Chains = d.U32s(MaxChains)
}

// ConvertCommitReq swaps file Ino's layout for Stripe and Chains, with
// the stripe versions EC for a coded layout, if the inode is still at
// Version. The reply is the inode.
type ConvertCommitReq struct {
	Ino     uint64
	Session uint64
	Token   uint64
	Version uint64
	Stripe  Stripe
	Chains  []uint32
	EC      []ECStripe
}

func (r *ConvertCommitReq) Encode(e *wire.Enc) {
	e.U64(r.Ino)
	e.U64(r.Session)
	e.U64(r.Token)
	e.U64(r.Version)
	r.Stripe.Encode(e)
	r.Stripe.EC.Encode(e)
	e.U32s(r.Chains)
	e.U32(uint32(len(r.EC)))
	for i := range r.EC {
		r.EC[i].Encode(e)
	}
}

func (r *ConvertCommitReq) Decode(d *wire.Dec) {
	r.Ino = d.U64()
	r.Session = d.U64()
	r.Token = d.U64()
	r.Version = d.U64()
	r.Stripe.Decode(d)
	r.Stripe.EC.DecodeOptional(d)
	r.Chains = d.U32s(MaxChains)
	n := d.Count(MaxECStripe, 24)
	r.EC = make([]ECStripe, n)
	for i := range r.EC {
		r.EC[i].Decode(d)
	}
}
