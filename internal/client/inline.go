package client

import (
	"time"

	"tandemfs/internal/proto"
)

// Writes to an inline file (one whose bytes live in the metadata) are
// buffered by the client, like writes to chunks, and go to the metadata
// service with the commit of size and mtime at the next close, fsync,
// truncate, lock release or growth past the inline limit: one call
// through the metadata log per close instead of one per write. Until then
// this client reads them from inlineImage; other clients see them after
// the close (close-to-open, as for every buffered write). O_DIRECT and
// O_SYNC writes still go to the metadata service before returning.
//
// The commit carries the writes themselves, in order, not the file's
// whole content, so that writes other clients made to other bytes of the
// file meanwhile are kept.

// writeInline writes data at off into the inline file, with st.mu held;
// it unlocks st.mu.
func (h *Handle) writeInline(off uint64, data []byte) (int, error) {
	st, c := h.st, h.c
	if !h.direct {
		st.bufferInline(off, data)
		st.mu.Unlock()
		return len(data), nil
	}
	err := c.commitLocked(st, false) // buffered writes before this one
	if err == nil {
		err = c.sendInline(st, off, data)
	}
	st.mu.Unlock()
	if err == nil && h.sync {
		err = c.SyncMeta()
	}
	if err != nil {
		return 0, err
	}
	return len(data), nil
}

// bufferInline records a write to the inline file; st.mu is held.
func (st *fileState) bufferInline(off uint64, data []byte) {
	if len(data) == 0 {
		return
	}
	end := off + uint64(len(data))
	if st.inlineImage == nil {
		st.inlineImage = append([]byte{}, st.inode.InlineData...)
	}
	if end > uint64(len(st.inlineImage)) {
		st.inlineImage = append(st.inlineImage, make([]byte, end-uint64(len(st.inlineImage)))...)
	}
	copy(st.inlineImage[off:], data)

	pending := 0
	for _, w := range st.pendingInline {
		pending += len(w.Data)
	}
	switch k := len(st.pendingInline); {
	case pending+len(data) > len(st.inlineImage):
		// Rewrites of the same bytes: one write of the whole file
		// says the same in bounded space.
		st.pendingInline = []proto.InlineWrite{{Off: 0, Data: append([]byte{}, st.inlineImage...)}}
	case k > 0 && st.pendingInline[k-1].Off+uint64(len(st.pendingInline[k-1].Data)) == off:
		st.pendingInline[k-1].Data = append(st.pendingInline[k-1].Data, data...)
	default:
		st.pendingInline = append(st.pendingInline, proto.InlineWrite{Off: off, Data: append([]byte{}, data...)})
	}
	st.size = max(st.size, uint64(len(st.inlineImage)))
	st.mtime = time.Now().UnixNano()
	st.dirty = true
}

// inlineBytes is the inline file's content as this client sees it;
// st.mu is held.
func (st *fileState) inlineBytes() []byte {
	if st.inlineImage != nil {
		return st.inlineImage
	}
	return st.inode.InlineData
}

// sendInline writes into an inline file's bytes in the metadata at once.
// st.mu is held.
func (c *Client) sendInline(st *fileState, off uint64, data []byte) error {
	r := proto.WriteInlineReq{Ino: st.ino, Off: off, Data: data, Session: c.session}
	np, err := c.inodeCall(proto.OpWriteInline, r.Encode)
	if err != nil {
		return err
	}
	n := *np
	st.inode = n
	if n.Size > st.size || !st.dirty {
		st.size = n.Size
	}
	st.mtime = n.Mtime
	return nil
}

// movedLayout fetches the inode of a file the metadata service says is no
// longer inline, after a write into its inline bytes was refused.
func (c *Client) movedLayout(ino uint64) (*proto.Inode, error) {
	get := proto.InoReq{Ino: ino}
	n, err := c.inodeCall(proto.OpGetAttr, get.Encode)
	if err != nil {
		return nil, err
	}
	if n.Inline {
		return nil, errIO("file %d: a write refused as no longer inline, yet inline", ino)
	}
	return n, nil
}

// reloadMoved takes the layout of a file moved to its chains, after a
// direct write to it was refused.
func (c *Client) reloadMoved(st *fileState) error {
	n, err := c.movedLayout(st.ino)
	if err != nil {
		return err
	}
	st.mu.Lock()
	st.inode = *n
	st.mu.Unlock()
	return nil
}

// commitMovedInlineEC is commitMovedInline for an erasure-coded file: the
// buffered writes go into its stripes, committed with the size. st.mu is
// held.
func (c *Client) commitMovedInlineEC(st *fileState, r *proto.CommitWriteReq, sync bool) error {
	n, err := c.movedLayout(st.ino)
	if err != nil {
		return err
	}
	st.inode = *n
	for _, w := range r.Inline {
		if err := c.writeEC(st, n, w.Off, w.Data, false); err != nil {
			return err
		}
	}
	st.pendingInline, st.inlineImage = nil, nil
	return c.commitECLocked(st, sync)
}

// commitMovedInline commits r after another client moved the file from
// the metadata to chains while this one buffered writes to it: they go to
// the file's chunks, and the commit records only size and mtime.
// st.mu is held.
func (c *Client) commitMovedInline(st *fileState, r *proto.CommitWriteReq) (*proto.Inode, error) {
	n, err := c.movedLayout(st.ino)
	if err != nil {
		return nil, err
	}
	for _, w := range r.Inline {
		// With r.Sync (an fsync) the chunks are synced as they are
		// written: the fsync's own chunk sync ran before this commit.
		if err := c.writePieces(n, w.Off, w.Data, r.Sync); err != nil {
			return nil, err
		}
		for _, p := range splitRange(n, w.Off, uint64(len(w.Data))) {
			st.written[chunkKey{p.chain, p.index}] = struct{}{}
		}
	}
	r.Inline = nil
	return c.inodeCall(proto.OpCommitWrite, r.Encode)
}
