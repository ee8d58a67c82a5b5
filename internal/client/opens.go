package client

import (
	"slices"
	"syscall"
	"time"

	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
)

// The files this client holds open, told to the metadata leader (the
// contract is in proto/opens.go): the set rides on watch requests, and a
// file's first write of data to its targets is announced with a call
// whose reply is the file as it is then.
//
// opensGen counts changes of the set. Every change is made first and
// counted after, and a report reads the count before the set, so that a
// report numbered G shows every change counted up to G.

// opensChanged counts a change of the open set made just before.
func (c *Client) opensChanged() uint64 { return c.opensGen.Add(1) }

// openReport is the report of the open files for a watch request, or nil
// when the last one sent is current and recent (sent is when that was).
func (c *Client) openReport(lastGen uint64, sent time.Time) *proto.OpenFiles {
	gen := c.opensGen.Load()
	if gen == lastGen && time.Since(sent) < proto.OpensReportMs*time.Millisecond {
		return nil
	}
	r := &proto.OpenFiles{Gen: gen}
	c.filesMu.Lock()
	defer c.filesMu.Unlock()
	if len(c.files) > proto.MaxOpenReport {
		r.Overflow = true
		return r
	}
	for ino, st := range c.files {
		r.Files = append(r.Files, proto.OpenFile{Ino: ino, Writing: st.writing.Load()})
	}
	return r
}

// announceWriting tells the metadata leader, once per open state and
// before any of the file's data goes to its targets, that this client
// writes it, and takes the file's layout from the reply (st.mu held).
func (c *Client) announceWriting(st *fileState) error {
	if st.announced {
		return nil
	}
	st.writing.Store(true) // reported from now on, even if the call fails
	r := proto.OpenWriteReq{Ino: st.ino, Session: c.session, Gen: c.opensChanged()}
	n, err := c.inodeCall(proto.OpOpenWrite, r.Encode)
	if err != nil {
		return err
	}
	if !sameLayout(&st.inode, n) {
		if !st.followLayout(n) {
			return rpc.Errorf(syscall.ESTALE, "file %d was converted to another layout while this client wrote it: open it again", st.ino)
		}
		st.inode.Stripe, st.inode.Chains = n.Stripe, n.Chains
	}
	st.announced = true
	return nil
}

// sameLayout reports whether a and b place a file's bytes alike.
func sameLayout(a, b *proto.Inode) bool {
	return a.Stripe == b.Stripe && slices.Equal(a.Chains, b.Chains) && a.Inline == b.Inline
}

// followLayout readies the open state for n's layout where a conversion
// changed the file's pattern since the state took it (st.mu held), and
// reports whether the state may take n's layout: the caller then copies
// it. A state that wrote to the file's targets keeps its own; it cannot
// meet a conversion before its last close anyway, since it announced
// itself a writer first and no file with a writer is converted. (Writes
// buffered for a file kept inline are in pendingInline, not in ec.)
func (st *fileState) followLayout(n *proto.Inode) bool {
	if n.Stripe == st.inode.Stripe && n.Stripe.EC.On() == (st.ec.Load() != nil) {
		return true // the same pattern: at most a shard moved
	}
	if st.announced {
		return false
	}
	if n.Stripe.EC.On() {
		st.ec.Store(newECState()) // no stripe of the old pattern's
	} else {
		st.ec.Store(nil)
	}
	return true
}

// readConverted reads buf at off of a file whose pattern a conversion
// changed after in was taken (a reader that opened it before): with the
// file's present layout, which its open state here takes too.
func (c *Client) readConverted(in *proto.Inode, off uint64, buf []byte) error {
	var err error
	for attempt := 0; attempt < 3 && (attempt == 0 || errnoOf(err) == proto.ErrLayoutChanged); attempt++ {
		var n proto.Inode
		r := proto.InoReq{Ino: in.Ino}
		if err := c.metaCall(proto.OpGetAttr, r.Encode, decodeInode(&n)); err != nil {
			return err
		}
		if st := c.lookupState(in.Ino); st != nil {
			st.mu.Lock()
			if st.followLayout(&n) {
				st.inode.Stripe, st.inode.Chains = n.Stripe, n.Chains
			}
			st.mu.Unlock()
		}
		now := *in
		now.Stripe, now.Chains = n.Stripe, n.Chains
		err = c.readPiecesOf(&now, off, buf)
	}
	return err
}
