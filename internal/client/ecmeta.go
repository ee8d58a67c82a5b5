package client

import (
	"tandemfs/internal/proto"
	"tandemfs/internal/wire"
)

// The metadata calls of erasure-coded files (proto/ec.go).

// ECGen returns a write generation of erasure-coded file ino that no
// other writer has: the shard chunks of the stripes this client writes
// under it are its own until it commits them.
func (c *Client) ECGen(ino uint64) (uint32, error) {
	var gen uint32
	r := proto.InoReq{Ino: ino, Session: c.session}
	err := c.metaCall(proto.OpECGen, r.Encode, func(d *wire.Dec) error { gen = d.U32(); return nil })
	return gen, err
}

// ECStripes lists the recorded stripes of erasure-coded file ino from
// stripe from on, every one of them (in calls of at most
// proto.MaxECStripesList).
func (c *Client) ECStripes(ino, from uint64) ([]proto.ECStripe, error) {
	return c.listECStripes(proto.ECStripesReq{Ino: ino, From: from})
}

// ecStripesOf is ECStripes of file in as its layout stands in in: a file
// converted since fails with proto.ErrLayoutChanged.
func (c *Client) ecStripesOf(in *proto.Inode, from uint64) ([]proto.ECStripe, error) {
	return c.listECStripes(proto.ECStripesReq{Ino: in.Ino, From: from, Stripe: in.Stripe})
}

func (c *Client) listECStripes(r proto.ECStripesReq) ([]proto.ECStripe, error) {
	var out []proto.ECStripe
	r.Count = proto.MaxECStripesList
	for {
		var reply proto.ECStripesReply
		if err := c.metaCall(proto.OpECStripes, r.Encode, decodeInto(&reply)); err != nil {
			return nil, err
		}
		out = append(out, reply.Stripes...)
		if !reply.More || len(reply.Stripes) == 0 {
			return out, nil
		}
		r.From = reply.Stripes[len(reply.Stripes)-1].Stripe + 1
	}
}

// CommitEC commits new versions of stripes of erasure-coded file ino with
// its size, mtime and bytes written (all or none), durably when sync.
// An update whose base another writer or a truncate changed fails the
// whole commit with proto.ErrStripeChanged.
func (c *Client) CommitEC(r *proto.CommitWriteReq) (*proto.Inode, error) {
	r.Session = c.session
	return c.inodeCall(proto.OpCommitWrite, r.Encode)
}

// decodeInto decodes a reply into v.
func decodeInto[T interface{ Decode(*wire.Dec) }](v T) func(*wire.Dec) error {
	return func(d *wire.Dec) error { v.Decode(d); return nil }
}

// ecLayoutNow asks the metadata service for file ino's layout as it is
// now. Unlike FreshAttr it neither caches the inode nor overlays the open
// file's state, so it may be called with the file's st.mu held.
func (c *Client) ecLayoutNow(ino uint64) ([]uint32, error) {
	var n proto.Inode
	r := proto.InoReq{Ino: ino}
	if err := c.metaCall(proto.OpGetAttr, r.Encode, decodeInode(&n)); err != nil {
		return nil, err
	}
	return n.Chains, nil
}
