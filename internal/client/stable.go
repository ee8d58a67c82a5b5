package client

import (
	"time"

	"tandemfs/internal/proto"
)

// writeInPlace makes an O_SYNC (or NFS FILE_SYNC) write that lies inside
// the file durable in one round trip instead of two: the data goes to its
// chain, synced on every copy, while the new mtime is committed to the
// metadata service and its log synced. The size does not change, so a
// crash between the two exposes nothing that was not written: either
// the old bytes with a new mtime, or the new bytes with the old mtime,
// and the caller had no reply yet. A write that grows the file commits
// the size after its data instead (write).
//
// As ext4 and XFS keep timestamps at the granularity of the kernel's
// coarse clock (a jiffy, 4 ms at HZ=250), a write within mtimeGrain of the
// mtime the metadata service holds leaves that mtime, and then needs no
// commit at all, when the file is written whole (every byte counted in
// Written, so the write adds nothing to count): its data is durable when
// writePieces returns. Random synchronous writes then cost the metadata
// service one commit per grain instead of one each.
func (h *Handle) writeInPlace(layout *proto.Inode, off uint64, data []byte, size uint64) error {
	st := h.st
	mtime := time.Now().UnixNano()
	if since := mtime - layout.Mtime; since >= 0 && since < int64(mtimeGrain) && layout.Written >= layout.Size {
		return h.c.writePieces(layout, off, data, true)
	}
	type committed struct {
		n   *proto.Inode
		err error
	}
	done := make(chan committed, 1)
	go func() {
		r := proto.CommitWriteReq{Ino: st.ino, Size: size, Mtime: mtime, Written: uint64(len(data)),
			Session: h.c.session, Sync: true}
		n, err := h.c.inodeCall(proto.OpCommitWrite, r.Encode)
		done <- committed{n, err}
	}()
	err := h.c.writePieces(layout, off, data, true)
	c := <-done
	if err != nil {
		return err
	}
	if c.err != nil {
		return c.err
	}
	st.mu.Lock()
	if c.n.Version > st.inode.Version {
		st.inode = *c.n
	}
	st.mtime = max(st.mtime, mtime)
	st.mu.Unlock()
	return nil
}

// mtimeGrain is the granularity of the mtime of synchronous writes inside
// a file (writeInPlace).
const mtimeGrain = 4 * time.Millisecond
