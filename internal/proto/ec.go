package proto

import (
	"syscall"

	"tandemfs/internal/wire"
)

// Erasure-coded files are written copy-on-write, stripe by stripe: a
// writer puts a stripe's K+M shards under a write generation of its own
// (chunk index ECChunkIndex(gen, stripe) on each shard's target), syncs
// them, and only then commits the stripe's new version with the file's
// size (CommitWriteReq.EC). Readers read the version the metadata
// service recorded. A stripe's data and parity therefore never disagree:
// a version becomes visible whole, after all its shards are durable, or
// not at all (docs/architecture.md, "Erasure coding").

// ECStripe is the recorded version of one stripe of an erasure-coded
// file.
type ECStripe struct {
	Stripe uint64
	Gen    uint32 // the write generation whose shards hold it
	Shards uint32 // bit j: shard j holds this version (a shard missing was not written)
	// Length is how many bytes of the file, from the stripe's start, the
	// stripe holds; past it the stripe reads as zeros (a truncate cuts it
	// without touching the shards).
	Length uint32
	// Encoded is the Length the shards were encoded with (never less than
	// Length): each shard holds ec.Geometry.ShardLen of it, and reads as
	// zeros past that, whatever a truncate cut since.
	Encoded uint32
}

func (s *ECStripe) Encode(e *wire.Enc) {
	e.U64(s.Stripe)
	e.U32(s.Gen)
	e.U32(s.Shards)
	e.U32(s.Length)
	e.U32(s.Encoded)
}
func (s *ECStripe) Decode(d *wire.Dec) {
	s.Stripe, s.Gen, s.Shards, s.Length, s.Encoded = d.U64(), d.U32(), d.U32(), d.U32(), d.U32()
}

// ECStripeUpdate is a stripe written in a new generation, to commit.
// Base and BaseLength are the version the writer built it on (what it
// read of the stripe; 0 and 0 for a stripe it found empty): the commit
// fails with ErrStripeChanged if another writer committed the stripe, or
// a truncate cut it, since.
type ECStripeUpdate struct {
	ECStripe
	Base       uint32
	BaseLength uint32
	// Written is a generation the writer took before it wrote the shards
	// (its own Gen, or for a repair a fresh one): a shard moved to another
	// target after that was written to the old one (0: Gen).
	Written uint32
}

// ErrStripeChanged is the errno of a commit whose stripe another writer
// committed first: the writer reads that version and writes its bytes
// over it again. Not retried as it stands.
const ErrStripeChanged = syscall.EBADE

// MaxECStripe is the last stripe number (the chunk index keeps 32 bits
// for it: with 1 MiB cells and K=2, files of 8 PiB).
const MaxECStripe = 1<<32 - 1

// MaxECUpdates bounds the stripes one commit carries.
const MaxECUpdates = 4096

// ECChunkIndex is the chunk index shard data of a stripe's version is
// stored under on its target.
func ECChunkIndex(gen uint32, stripe uint64) uint64 { return uint64(gen)<<32 | stripe }

// ECStripesReq lists the recorded stripes of file Ino from stripe From,
// at most Count of them. A caller that reads or repairs the stripes with
// a layout it holds names its pattern (Stripe, as the inode had it): if
// the file has another pattern now (a conversion swapped its layout; a
// conversion always changes the pattern), the reply is ErrLayoutChanged,
// not versions of the other layout, which the caller would read with the
// wrong geometry. A shard moved off a retired target changes the chains,
// not the pattern: the old chains still read (the moved shard is left
// out of every version). A zero Stripe is not checked.
type ECStripesReq struct {
	Ino    uint64
	From   uint64
	Count  uint32
	Stripe Stripe
}

func (r *ECStripesReq) Encode(e *wire.Enc) {
	e.U64(r.Ino)
	e.U64(r.From)
	e.U32(r.Count)
	r.Stripe.Encode(e)
	r.Stripe.EC.Encode(e)
}

func (r *ECStripesReq) Decode(d *wire.Dec) {
	r.Ino, r.From, r.Count = d.U64(), d.U64(), d.U32()
	r.Stripe.Decode(d)
	r.Stripe.EC.Decode(d)
}

// ErrLayoutChanged answers a call made with a layout of a file that it no
// longer has (ECStripesReq): the caller fetches the inode and goes on in
// its present layout.
const ErrLayoutChanged = syscall.EREMCHG

// MaxECStripesList bounds one ECStripesReply.
const MaxECStripesList = 4096

// ECStripesReply is the stripes found, in order; More says the list was
// cut at Count (a stripe not listed before the last one listed is a
// hole: it reads as zeros).
type ECStripesReply struct {
	Stripes []ECStripe
	More    bool
}

func (r *ECStripesReply) Encode(e *wire.Enc) {
	e.U32(uint32(len(r.Stripes)))
	for i := range r.Stripes {
		r.Stripes[i].Encode(e)
	}
	e.Bool(r.More)
}

func (r *ECStripesReply) Decode(d *wire.Dec) {
	r.Stripes = make([]ECStripe, d.Count(MaxECStripesList, 24))
	for i := range r.Stripes {
		r.Stripes[i].Decode(d)
	}
	r.More = d.Bool()
}

func encodeECUpdates(e *wire.Enc, us []ECStripeUpdate) {
	e.U32(uint32(len(us)))
	for i := range us {
		us[i].Encode(e)
		e.U32(us[i].Base)
		e.U32(us[i].BaseLength)
		e.U32(us[i].Written)
	}
}

func decodeECUpdates(d *wire.Dec) []ECStripeUpdate {
	n := d.Count(MaxECUpdates, 36)
	if n == 0 {
		return nil
	}
	us := make([]ECStripeUpdate, n)
	for i := range us {
		us[i].Decode(d)
		us[i].Base, us[i].BaseLength, us[i].Written = d.U32(), d.U32(), d.U32()
	}
	return us
}
