package client

import (
	"math/bits"
	"syscall"

	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
	"tandemfs/internal/wire"
)

// Converting a file between copies and erasure coding (`tandem ec
// convert`; the contract is in proto/convert.go): the bytes are read in
// the file's layout and written in the new one beside it, made durable,
// and the metadata service swaps the layouts in one command. A writer
// that comes along meanwhile aborts the swap; the conversion starts again
// up to convertAttempts times, then gives way.

const convertAttempts = 3

// convertPiece is how many bytes a conversion reads and writes at a time:
// whole stripes of a coded layout, whole chunks of copies.
const convertPiece = 16 << 20

// Convert converts file ino to the pattern want (a coded pattern, or
// copies with want.Replicas). progress, if set, is told the bytes copied
// so far and the file's size.
func (c *Client) Convert(ino uint64, want proto.Stripe, progress func(done, size uint64)) (*proto.Inode, error) {
	var err error
	for attempt := 0; attempt < convertAttempts; attempt++ {
		var n *proto.Inode
		n, err = c.convertOnce(ino, want, progress)
		if errnoOf(err) != proto.ErrConvertAborted {
			return n, err
		}
	}
	return nil, rpc.Errorf(syscall.EBUSY, "file %d was written to during each of %d conversions: %v", ino, convertAttempts, err)
}

func (c *Client) convertOnce(ino uint64, want proto.Stripe, progress func(done, size uint64)) (*proto.Inode, error) {
	begin := proto.ConvertBeginReq{Ino: ino, Session: c.session, Stripe: want}
	var b proto.ConvertBeginReply
	if err := c.metaCall(proto.OpConvertBegin, begin.Encode, decodeInto(&b)); err != nil {
		return nil, err
	}
	old := b.Inode
	to := old
	to.Stripe, to.Chains = b.Stripe, b.Chains
	commit := proto.ConvertCommitReq{Ino: ino, Session: c.session, Token: b.Token, Version: old.Version,
		Stripe: b.Stripe, Chains: b.Chains}
	var err error
	switch {
	case old.Inline:
		// Its bytes are in the metadata: only the layout it takes when
		// it grows out of it changes.
	case to.Stripe.EC.On():
		commit.EC, err = c.copyToCoded(&old, &to, progress)
	default:
		err = c.copyToCopies(&old, &to, progress)
	}
	if err != nil {
		return nil, err
	}
	var n proto.Inode
	if err := c.metaCall(proto.OpConvertCommit, commit.Encode, func(d *wire.Dec) error { n.Decode(d); return nil }); err != nil {
		return nil, err
	}
	return &n, nil
}

// copyToCoded writes old's bytes as stripes of the coded layout to, under
// a generation of their own, makes them durable and returns their
// versions.
func (c *Client) copyToCoded(old, to *proto.Inode, progress func(done, size uint64)) ([]proto.ECStripe, error) {
	l, err := ecLayoutOf(to)
	if err != nil {
		return nil, err
	}
	gen, err := c.ECGen(old.Ino)
	if err != nil {
		return nil, err
	}
	stripeBytes := l.geo.StripeBytes()
	buf := make([]byte, stripeBytes)
	var versions []proto.ECStripe
	at := map[uint64]int{} // stripe → its place in versions (holes have none)
	written := map[uint32][]uint64{}
	for s := uint64(0); s*stripeBytes < old.Size; s++ {
		valid := min(stripeBytes, old.Size-s*stripeBytes)
		data := buf[:valid]
		if err := c.readPieces(old, s*stripeBytes, data); err != nil {
			return nil, err
		}
		if allZero(data) {
			continue // a hole stays one: no version, and it reads as zeros
		}
		shards := make([][]byte, l.geo.Shards())
		for j := 0; j < l.geo.Data; j++ {
			start := uint64(j) * l.geo.Cell
			shards[j] = buf[start : start+l.geo.ShardLen(j, valid)]
		}
		parity, err := l.codec.Encode(shards[:l.geo.Data], int(l.geo.ShardLen(l.geo.Data, valid)))
		if err != nil {
			return nil, rpc.Errorf(syscall.EIO, "file %d: %v", old.Ino, err)
		}
		copy(shards[l.geo.Data:], parity)
		index := proto.ECChunkIndex(gen, s)
		wrote, err := c.writeShards(l, index, l.chains, shards)
		if err != nil {
			return nil, err
		}
		for j := range shards {
			if wrote&(1<<j) != 0 && len(shards[j]) > 0 {
				written[l.chains[j]] = append(written[l.chains[j]], index)
			}
		}
		at[s] = len(versions)
		versions = append(versions, proto.ECStripe{Stripe: s, Gen: gen, Shards: wrote, Length: uint32(valid), Encoded: uint32(valid)})
		if progress != nil {
			progress(s*stripeBytes+valid, old.Size)
		}
	}
	failedChains, failed := c.syncShardChains(old.Ino, keysOf(written), written)
	for _, ch := range failedChains {
		for _, index := range written[ch] {
			versions[at[index&0xffffffff]].Shards &^= shardMask(l.chains, ch)
		}
	}
	for _, v := range versions {
		if bits.OnesCount32(v.Shards) < l.geo.Data {
			return nil, rpc.Errorf(syscall.EIO, "stripe %d of file %d: too few shards durable: %v", v.Stripe, old.Ino, failed)
		}
	}
	return versions, nil
}

// copyToCopies writes old's bytes to the chains of the layout of copies
// to, and makes them durable.
func (c *Client) copyToCopies(old, to *proto.Inode, progress func(done, size uint64)) error {
	buf := make([]byte, convertPiece)
	for off := uint64(0); off < old.Size; off += convertPiece {
		data := buf[:min(convertPiece, old.Size-off)]
		if err := c.readPieces(old, off, data); err != nil {
			return err
		}
		// Chunks of zeros are not written: a missing chunk is a hole.
		var pieces []piece
		written := map[chunkKey]struct{}{}
		for _, p := range splitRange(to, off, uint64(len(data))) {
			if !allZero(data[p.pos : p.pos+uint64(p.n)]) {
				pieces = append(pieces, p)
				written[chunkKey{p.chain, p.index}] = struct{}{}
			}
		}
		if err := c.writePieceList(to, pieces, data, false); err != nil {
			return err
		}
		if err := c.syncChunks(old.Ino, written); err != nil {
			return err
		}
		if progress != nil {
			progress(off+uint64(len(data)), old.Size)
		}
	}
	return nil
}

func keysOf(m map[uint32][]uint64) []uint32 {
	out := make([]uint32, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
