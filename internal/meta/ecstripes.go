package meta

import (
	"encoding/binary"
	"math/bits"
	"syscall"

	"github.com/cockroachdb/pebble/v2"

	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
	"tandemfs/internal/wire"
)

// The stripe versions of erasure-coded files (proto/ec.go): which write
// generation holds each stripe, which of its shards were written, and how
// many bytes it holds. A stripe with no record is a hole.
//
//	e<ino:8><stripe:8>  gen (4), shard bitmap (4), length (4), encoded length (4)
//	v<ino:8>            the file's next write generation (4)
//	q<ino:8><index:8>   a version a commit or a truncate replaced: its shard
//	                    chunks (index gen<<32|stripe) on the file's chains go
//	                    in the background (gc.go)

//	r<ino:8><stripe:8>  a stripe whose version lacks shards that hold data:
//	                    the leader rebuilds them in the background (ecrepair.go)

const (
	pECStripe   = 'e'
	pECGen      = 'v'
	pECGarbage  = 'q'
	pECDegraded = 'r'
)

func ecDegradedKey(ino, stripe uint64) []byte {
	k := ecStripeKey(ino, stripe)
	k[0] = pECDegraded
	return k
}

// markDegraded records whether version v of a stripe of n lacks a shard
// that holds data.
func (t *tx) markDegraded(n *inodeRec, v *proto.ECStripe) {
	p := n.Stripe.EC
	cell := uint64(n.Stripe.ChunkSize)
	var want uint32
	for j := 0; j < p.Shards(); j++ {
		if ecShardHolds(j, int(p.Data), cell, uint64(v.Encoded)) {
			want |= 1 << j
		}
	}
	if v.Shards&want != want {
		t.b.Set(ecDegradedKey(n.Ino, v.Stripe), nil, nil)
	} else {
		t.b.Delete(ecDegradedKey(n.Ino, v.Stripe), nil)
	}
}

// ecShardHolds reports whether shard j of a stripe encoded with length
// bytes holds any (ec.Geometry.ShardLen > 0).
func ecShardHolds(j, data int, cell, length uint64) bool {
	if j >= data {
		return length > 0
	}
	return length > uint64(j)*cell
}

func ecGarbageKey(ino, index uint64) []byte {
	k := make([]byte, 17)
	k[0] = pECGarbage
	binary.BigEndian.PutUint64(k[1:], ino)
	binary.BigEndian.PutUint64(k[9:], index)
	return k
}

// replaced marks version v of a stripe of n as garbage.
func (t *tx) replaced(n *inodeRec, v proto.ECStripe) {
	if v.Gen != 0 {
		t.b.Set(ecGarbageKey(n.Ino, proto.ECChunkIndex(v.Gen, v.Stripe)), encodeChains(n.Chains), nil)
	}
}

func ecStripeKey(ino, stripe uint64) []byte {
	k := make([]byte, 17)
	k[0] = pECStripe
	binary.BigEndian.PutUint64(k[1:], ino)
	binary.BigEndian.PutUint64(k[9:], stripe)
	return k
}

func ecGenKey(ino uint64) []byte { return u64Key(pECGen, ino) }

func marshalECStripe(s *proto.ECStripe) []byte {
	b := make([]byte, 16)
	binary.BigEndian.PutUint32(b, s.Gen)
	binary.BigEndian.PutUint32(b[4:], s.Shards)
	binary.BigEndian.PutUint32(b[8:], s.Length)
	binary.BigEndian.PutUint32(b[12:], s.Encoded)
	return b
}

func unmarshalECStripe(key, v []byte) (proto.ECStripe, error) {
	if len(key) != 17 || len(v) != 16 {
		return proto.ECStripe{}, rpc.Errorf(syscall.EIO, "a stripe record of %d bytes under a key of %d", len(v), len(key))
	}
	return proto.ECStripe{Stripe: binary.BigEndian.Uint64(key[9:]), Gen: binary.BigEndian.Uint32(v),
		Shards: binary.BigEndian.Uint32(v[4:]), Length: binary.BigEndian.Uint32(v[8:]), Encoded: binary.BigEndian.Uint32(v[12:])}, nil
}

func loadECStripe(r reader, ino, stripe uint64) (proto.ECStripe, bool, error) {
	v, ok, err := get(r, ecStripeKey(ino, stripe))
	if err != nil || !ok {
		return proto.ECStripe{Stripe: stripe}, false, err
	}
	s, err := unmarshalECStripe(ecStripeKey(ino, stripe), v)
	return s, true, err
}

// ecFile loads the erasure-coded file ino, refusing anything else.
func (t *tx) ecFile(ino uint64) (*inodeRec, error) {
	n, err := t.inode(ino)
	if err != nil {
		return nil, err
	}
	if !n.isReg() || !n.Stripe.EC.On() {
		return nil, rpc.Errorf(syscall.EINVAL, "inode %d is not an erasure-coded file", ino)
	}
	return n, nil
}

// ecGen hands out the next write generation of file r.Ino. Generations
// are never reused, so no two writers ever write the same shard chunks,
// and a writer never writes over a version that is recorded.
func (t *tx) ecGen(r *proto.InoReq, out *wire.Enc) error {
	t.session = r.Session
	// A file of copies too: converting it to a coded layout writes its
	// stripes under a generation before the swap (convert.go).
	if n, err := t.inode(r.Ino); err != nil {
		return err
	} else if !n.isReg() {
		return rpc.Errorf(syscall.EINVAL, "inode %d is not a regular file", r.Ino)
	}
	next := uint32(1)
	if v, ok, err := get(t.b, ecGenKey(r.Ino)); err != nil {
		return err
	} else if ok && len(v) == 4 {
		next = binary.BigEndian.Uint32(v)
	}
	if next == 0 {
		return rpc.Errorf(syscall.EOVERFLOW, "file %d has used every write generation", r.Ino)
	}
	t.b.Set(ecGenKey(r.Ino), binary.BigEndian.AppendUint32(nil, next+1), nil)
	out.U32(next)
	return nil
}

// applyECUpdates records new stripe versions of n, all or none: an
// update built on a version that is no longer the recorded one fails the
// commit with ErrStripeChanged.
func (t *tx) applyECUpdates(n *inodeRec, us []proto.ECStripeUpdate) error {
	if len(us) == 0 {
		return nil
	}
	if !n.Stripe.EC.On() {
		return rpc.Errorf(syscall.EINVAL, "inode %d is not an erasure-coded file", n.Ino)
	}
	if n.Inline {
		return rpc.Errorf(syscall.EINVAL, "file %d is inline: its bytes move to its shards before stripes are committed", n.Ino)
	}
	p := n.Stripe.EC
	stripeBytes := uint64(p.Data) * uint64(n.Stripe.ChunkSize)
	allShards := uint32(1)<<p.Shards() - 1
	for _, u := range us {
		if err := t.movedShards(n, &u); err != nil {
			return err
		}
		switch {
		case u.Stripe > proto.MaxECStripe || u.Gen == 0:
			return rpc.Errorf(syscall.EINVAL, "stripe %d of generation %d cannot be recorded", u.Stripe, u.Gen)
		case uint64(u.Encoded) > stripeBytes || u.Length > u.Encoded:
			return rpc.Errorf(syscall.EINVAL, "stripe %d holds %d bytes encoded as %d; a stripe holds %d", u.Stripe, u.Length, u.Encoded, stripeBytes)
		case u.Shards&^allShards != 0 || bits.OnesCount32(u.Shards) < int(p.Data):
			return rpc.Errorf(syscall.EINVAL, "stripe %d written to shards %b: %d+%d needs at least %d of them", u.Stripe, u.Shards, p.Data, p.Parity, p.Data)
		}
		cur, _, err := loadECStripe(t.b, n.Ino, u.Stripe)
		if err != nil {
			return err
		}
		if cur.Gen != u.Base || cur.Length != u.BaseLength {
			return rpc.Errorf(proto.ErrStripeChanged, "stripe %d of file %d is at generation %d with %d bytes now, not %d with %d",
				u.Stripe, n.Ino, cur.Gen, cur.Length, u.Base, u.BaseLength)
		}
		if cur.Gen != u.Gen {
			t.replaced(n, cur)
		}
		t.b.Set(ecStripeKey(n.Ino, u.Stripe), marshalECStripe(&u.ECStripe), nil)
		t.markDegraded(n, &u.ECStripe)
	}
	return nil
}

// truncateECStripes cuts n's stripes to size: records past it go (their
// stripes are holes), and the last one keeps only the bytes below size,
// so that growing the file again reads zeros there, never old bytes.
func (t *tx) truncateECStripes(n *inodeRec, size uint64) error {
	stripeBytes := uint64(n.Stripe.EC.Data) * uint64(n.Stripe.ChunkSize)
	if stripeBytes == 0 {
		return nil
	}
	last := size / stripeBytes
	lo := ecStripeKey(n.Ino, last)
	it, err := t.b.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(ecStripeKey(n.Ino, 0)[:9])})
	if err != nil {
		return err
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		s, err := unmarshalECStripe(it.Key(), it.Value())
		if err != nil {
			return err
		}
		keep := uint64(0) // bytes of the stripe below size
		if start := s.Stripe * stripeBytes; size > start {
			keep = size - start
		}
		switch {
		case keep == 0:
			t.b.Delete(ecStripeKey(n.Ino, s.Stripe), nil)
			t.b.Delete(ecDegradedKey(n.Ino, s.Stripe), nil)
			t.replaced(n, s)
		case uint64(s.Length) > keep:
			s.Length = uint32(keep)
			t.b.Set(ecStripeKey(n.Ino, s.Stripe), marshalECStripe(&s), nil)
		}
	}
	return it.Error()
}

// dropECStripes forgets the stripe records, replaced versions and
// generation counter of a removed file (its chunks, of every generation,
// go with its garbage record).
func (t *tx) dropECStripes(ino uint64) error {
	for _, lo := range [][]byte{ecStripeKey(ino, 0)[:9], ecGarbageKey(ino, 0)[:9], ecDegradedKey(ino, 0)[:9], ecMovedKey(ino, 0)[:9]} {
		it, err := t.b.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(lo)})
		if err != nil {
			return err
		}
		for ok := it.First(); ok; ok = it.Next() {
			t.b.Delete(append([]byte(nil), it.Key()...), nil)
		}
		if err := it.Close(); err != nil {
			return err
		}
	}
	t.b.Delete(ecGenKey(ino), nil)
	return nil
}

// ecStripes lists file r.Ino's recorded stripes from r.From.
func (s *Service) ecStripes(r *proto.ECStripesReq, out *wire.Enc) error {
	n, err := loadInode(s.fsm.db, r.Ino)
	if err != nil {
		return err
	}
	if r.Stripe != (proto.Stripe{}) && n.isReg() && n.Stripe != r.Stripe {
		return rpc.Errorf(proto.ErrLayoutChanged, "file %d was converted to another layout since the caller read it", r.Ino)
	}
	if !n.isReg() || !n.Stripe.EC.On() {
		return rpc.Errorf(syscall.EINVAL, "inode %d is not an erasure-coded file", r.Ino)
	}
	limit := int(min(max(r.Count, 1), proto.MaxECStripesList))
	lo := ecStripeKey(r.Ino, r.From)
	it, err := s.fsm.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(lo[:9])})
	if err != nil {
		return err
	}
	var reply proto.ECStripesReply
	for ok := it.First(); ok; ok = it.Next() {
		if len(reply.Stripes) == limit {
			reply.More = true
			break
		}
		st, err := unmarshalECStripe(it.Key(), it.Value())
		if err != nil {
			it.Close()
			return err
		}
		reply.Stripes = append(reply.Stripes, st)
	}
	if err := it.Close(); err != nil {
		return err
	}
	reply.Encode(out)
	return nil
}
