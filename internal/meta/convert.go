package meta

import (
	"crypto/rand"
	"encoding/binary"
	"math/bits"
	"sync"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
	"tandemfs/internal/wire"
)

// Converting a file between copies and erasure coding (the contract is in
// proto/convert.go). The leader refuses a file any session holds open for
// writing (opens.go), hands out a token and the new layout, and swaps the
// layouts in one command once the converter has written the file's bytes
// in the new one: by compare-and-set on the inode's version, so that any
// change meanwhile fails the swap, and only if no writer announced itself
// since the begin. The old layout's chunks become garbage that waits
// until no session holds the file open (a reader keeps reading the old
// layout until it closes), then are deleted.

// pLayoutGarbage keys a replaced layout's chunks: ino, then the swap's
// inode version; the value is the chains and the chunk index range.
const pLayoutGarbage = 'L'

func layoutGarbageKey(ino, version uint64) []byte {
	k := make([]byte, 17)
	k[0] = pLayoutGarbage
	binary.BigEndian.PutUint64(k[1:], ino)
	binary.BigEndian.PutUint64(k[9:], version)
	return k
}

func marshalLayoutGarbage(chains []uint32, from, to uint64) []byte {
	b := binary.BigEndian.AppendUint64(nil, from)
	b = binary.BigEndian.AppendUint64(b, to)
	return append(b, encodeChains(chains)...)
}

func unmarshalLayoutGarbage(key, v []byte) (garbage, bool) {
	if len(key) != 17 || len(v) < 16 {
		return garbage{}, false
	}
	return garbage{ino: decodeU64(key[1:9]), from: binary.BigEndian.Uint64(v), to: binary.BigEndian.Uint64(v[8:]),
		chains: decodeChains(v[16:])}, true
}

// conversions are the leader's conversions in progress. mu is also held
// across a swap's proposal, so that a writer's announcement (openWrite)
// comes either before the swap, and aborts it, or after it, and reads the
// new layout.
type conversions struct {
	mu    sync.Mutex
	byIno map[uint64]*conversion

	// replacedSeen is when this leader first saw each replaced layout's
	// garbage (by key): it is not deleted before layoutGarbageGrace has
	// passed since, so that a client that opened the file just before
	// the swap has reported it open (guarded by mu).
	replacedSeen map[string]time.Time
}

// layoutGarbageGrace: a client reports a file it opened with its next
// watch request (within a watch round), and all its open files every
// proto.OpensReportMs; twice that covers both.
const layoutGarbageGrace = 2 * proto.OpensReportMs * time.Millisecond

// replacedAge is how long ago this leader first saw replaced layout key.
func (c *conversions) replacedAge(key []byte) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	first, ok := c.replacedSeen[string(key)]
	if !ok {
		c.replacedSeen[string(key)] = time.Now()
		return 0
	}
	return time.Since(first)
}

// forgetReplaced drops key from replacedSeen once its garbage goes.
func (c *conversions) forgetReplaced(key []byte) {
	c.mu.Lock()
	delete(c.replacedSeen, string(key))
	c.mu.Unlock()
}

type conversion struct {
	token   uint64
	aborted bool
}

func newConversions() *conversions {
	return &conversions{byIno: map[uint64]*conversion{}, replacedSeen: map[string]time.Time{}}
}

// abort aborts a conversion of ino in progress (mu held).
func (c *conversions) abortLocked(ino uint64) {
	if cv := c.byIno[ino]; cv != nil {
		cv.aborted = true
	}
}

// convertBegin answers OpConvertBegin.
func (s *Service) convertBegin(r *proto.ConvertBeginReq, out *wire.Enc) error {
	writers, _, ok := s.fileHolders(r.Ino)
	if !ok {
		return rpc.Errorf(syscall.EAGAIN, "the metadata leader took over lately and does not know yet which files clients hold open; try again in %v", s.cfg.SessionTimeout)
	}
	if len(writers) > 0 {
		return rpc.Errorf(syscall.EBUSY, "file %d is open for writing by %d client session(s) (%x): convert it once they close it", r.Ino, len(writers), writers[0])
	}
	n, err := loadInode(s.fsm.db, r.Ino)
	if err != nil {
		return err
	}
	reply := proto.ConvertBeginReply{Inode: n.Inode}
	if reply.Stripe, reply.Chains, err = s.newLayout(n, r.Stripe); err != nil {
		return err
	}
	if pending, err := hasPrefix(s.fsm.db, layoutGarbageKey(r.Ino, 0)[:9]); err != nil {
		return err
	} else if pending {
		return rpc.Errorf(syscall.EAGAIN, "file %d's layout before its last conversion is still to be deleted (it waits until no client holds the file open); try again later", r.Ino)
	}
	var tok [8]byte
	rand.Read(tok[:])
	reply.Token = binary.LittleEndian.Uint64(tok[:]) | 1
	s.convs.mu.Lock()
	s.convs.byIno[r.Ino] = &conversion{token: reply.Token}
	s.convs.mu.Unlock()
	reply.Encode(out)
	return nil
}

// newLayout is the pattern and chains file n gets in the conversion to
// want, or why it cannot be converted.
func (s *Service) newLayout(n *inodeRec, want proto.Stripe) (proto.Stripe, []uint32, error) {
	if !n.isReg() {
		return want, nil, rpc.Errorf(syscall.EINVAL, "inode %d is not a regular file", n.Ino)
	}
	if want.ChunkSize == 0 {
		want.ChunkSize = n.Stripe.ChunkSize
	}
	if want.EC.On() {
		if want.EC == n.Stripe.EC {
			return want, nil, rpc.Errorf(syscall.EALREADY, "file %d is coded %d+%d already", n.Ino, want.EC.Data, want.EC.Parity)
		}
		if err := s.fsm.checkECPattern(want.EC); err != nil {
			return want, nil, err
		}
		want.Count, want.Replicas = 0, 0
		chains, err := s.fsm.pickShards(n.Ino, want.EC)
		return want, chains, err
	}
	chains := s.fsm.pickChains(n.Ino, &want)
	if len(chains) == 0 {
		return want, nil, errNoTargets
	}
	if !n.Stripe.EC.On() && want.Replicas == n.Stripe.Replicas {
		return want, nil, rpc.Errorf(syscall.EALREADY, "file %d already has %d copies", n.Ino, want.Replicas)
	}
	return want, chains, nil
}

// convertCommit answers OpConvertCommit: the swap is proposed only for a
// conversion this leader began and no writer aborted, with no writer
// holding the file, under convs.mu (see conversions).
func (s *Service) convertCommit(r *proto.ConvertCommitReq, payload []byte, out *wire.Enc) error {
	s.convs.mu.Lock()
	defer s.convs.mu.Unlock()
	cv := s.convs.byIno[r.Ino]
	if cv == nil || cv.token != r.Token {
		return rpc.Errorf(proto.ErrConvertAborted, "file %d: no conversion of it in progress here (the leader changed, or another began)", r.Ino)
	}
	delete(s.convs.byIno, r.Ino)
	if writers, _, ok := s.fileHolders(r.Ino); cv.aborted || !ok || len(writers) > 0 {
		return rpc.Errorf(proto.ErrConvertAborted, "file %d was opened for writing during its conversion", r.Ino)
	}
	reply, err := s.propose(opConvertSwap, func(e *wire.Enc) { e.B = append(e.B, payload...) })
	if err != nil {
		return err
	}
	out.B = append(out.B, reply...)
	return nil
}

// convertSwap applies a conversion: the inode takes the new layout (and,
// coded, its stripe versions) if it is still at the version the copy was
// made from, and the old layout becomes garbage.
func (t *tx) convertSwap(r *proto.ConvertCommitReq, out *wire.Enc) error {
	n, err := t.inode(r.Ino)
	if err != nil {
		return err
	}
	if !n.isReg() {
		return rpc.Errorf(syscall.EINVAL, "inode %d is not a regular file", r.Ino)
	}
	if n.Version != r.Version {
		return rpc.Errorf(proto.ErrConvertAborted, "file %d changed during its conversion", r.Ino)
	}
	if err := t.validLayout(r); err != nil {
		return err
	}
	if n.Inline && len(r.EC) > 0 {
		return rpc.Errorf(syscall.EINVAL, "file %d is kept inline: it has no stripes to record", r.Ino)
	}
	// A file kept inline has never had bytes on targets: only the layout
	// it takes when it grows out of the metadata changes.
	if !n.Inline {
		if err := t.retireLayout(n, newGens(r.EC)); err != nil {
			return err
		}
	}
	n.Stripe, n.Chains = r.Stripe, r.Chains
	for i := range r.EC {
		v := r.EC[i]
		t.b.Set(ecStripeKey(n.Ino, v.Stripe), marshalECStripe(&v), nil)
		t.markDegraded(n, &v)
	}
	t.putInode(n)
	n.Inode.Encode(out)
	return nil
}

// validLayout checks a conversion's new layout: chains for every shard,
// stripe versions a coded file can record.
func (t *tx) validLayout(r *proto.ConvertCommitReq) error {
	p := r.Stripe.EC
	if !p.On() {
		if len(r.EC) > 0 || len(r.Chains) == 0 {
			return rpc.Errorf(syscall.EINVAL, "a layout of copies with %d chains and %d stripe versions", len(r.Chains), len(r.EC))
		}
		return nil
	}
	if len(r.Chains) != p.Shards() {
		return rpc.Errorf(syscall.EINVAL, "%d chains for %d+%d shards", len(r.Chains), p.Data, p.Parity)
	}
	stripeBytes := uint64(p.Data) * uint64(r.Stripe.ChunkSize)
	for _, v := range r.EC {
		if v.Gen == 0 || uint64(v.Encoded) > stripeBytes || v.Length > v.Encoded || bits.OnesCount32(v.Shards) < int(p.Data) {
			return rpc.Errorf(syscall.EINVAL, "stripe %d of generation %d: %d bytes encoded as %d on shards %b cannot be recorded", v.Stripe, v.Gen, v.Length, v.Encoded, v.Shards)
		}
	}
	return nil
}

// newGens is the first generation a conversion's new coded layout uses
// (0: none, it is not coded or holds no stripes).
func newGens(vs []proto.ECStripe) uint32 {
	first := uint32(0)
	for _, v := range vs {
		if first == 0 || v.Gen < first {
			first = v.Gen
		}
	}
	return first
}

// retireLayout makes n's present layout garbage: a coded file's stripe
// records go, and their chunks are every generation's before keep (the
// new layout's first; 0: every one so far), a copied file's chunks up to
// its size. (From one coded layout to another the new shards may well be
// on the same targets as the old, under the conversion's generation.)
func (t *tx) retireLayout(n *inodeRec, keep uint32) error {
	if n.Stripe.EC.On() {
		gen := keep
		if gen == 0 {
			var err error
			if gen, err = t.nextECGen(n.Ino); err != nil {
				return err
			}
		}
		// Replaced versions waiting for the collector (q keys) stay its.
		for _, lo := range [][]byte{ecStripeKey(n.Ino, 0)[:9], ecDegradedKey(n.Ino, 0)[:9], ecMovedKey(n.Ino, 0)[:9]} {
			if err := t.deletePrefix(lo); err != nil {
				return err
			}
		}
		// The generation counter stays: the next coded layout's shards
		// take generations past every one retired here.
		t.b.Set(layoutGarbageKey(n.Ino, n.Version), marshalLayoutGarbage(n.Chains, proto.ECChunkIndex(1, 0), proto.ECChunkIndex(gen, 0)), nil)
		return nil
	}
	cs := uint64(max(n.Stripe.ChunkSize, 1))
	to := (max(n.Size, n.Written) + cs - 1) / cs
	t.b.Set(layoutGarbageKey(n.Ino, n.Version), marshalLayoutGarbage(n.Chains, 0, max(to, 1)), nil)
	return nil
}

// nextECGen is the generation file ino's next write would take.
func (t *tx) nextECGen(ino uint64) (uint32, error) {
	v, ok, err := get(t.b, ecGenKey(ino))
	if err != nil || !ok || len(v) != 4 {
		return 1, err
	}
	return binary.BigEndian.Uint32(v), nil
}

// deletePrefix deletes every key starting with lo.
func (t *tx) deletePrefix(lo []byte) error {
	it, err := t.b.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(lo)})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		t.b.Delete(append([]byte(nil), it.Key()...), nil)
	}
	return it.Close()
}

// hasPrefix reports whether db holds a key starting with lo.
func hasPrefix(db *pebble.DB, lo []byte) (bool, error) {
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(lo)})
	if err != nil {
		return false, err
	}
	found := it.First()
	return found, it.Close()
}

// collectReplacedLayouts deletes the chunks of layouts replaced by a
// conversion, each once no session holds its file open.
func (s *Service) collectReplacedLayouts(max int) {
	s.collect(pLayoutGarbage, max, opLayoutGCDone, func(k, v []byte) (garbageRecord, bool) {
		g, valid := unmarshalLayoutGarbage(k, v)
		if !valid {
			return garbageRecord{}, false
		}
		if s.convs.replacedAge(k) < layoutGarbageGrace {
			return garbageRecord{}, false // a reader may not have reported its open yet
		}
		if w, rd, judged := s.fileHolders(g.ino); !judged || len(w)+len(rd) > 0 {
			return garbageRecord{}, false // a reader may still read the old layout
		}
		s.convs.forgetReplaced(k)
		ino, version := g.ino, decodeU64(k[9:])
		return garbageRecord{g, func(e *wire.Enc) { e.U64(ino); e.U64(version) }}, true
	})
}
