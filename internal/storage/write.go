package storage

import (
	"bytes"
	"fmt"
	"syscall"

	"tandemfs/internal/chunksum"
)

// Write stores p at offset off of chunk idx of file ino, creating the chunk
// if needed. On error the chunk still reads back as before the write or,
// block by block, as after it.
func (t *Target) Write(ino, idx uint64, off int64, p []byte) error {
	return t.write(ino, idx, off, p, nil, false)
}

// WriteUncached is Write for data this server keeps for durability rather
// than for readers (a resync's copies, a chain member's copy of a client's
// write): where the target cannot drop large writes behind (dropbehind.go),
// large aligned pieces go to the disk with O_DIRECT (direct.go).
func (t *Target) WriteUncached(ino, idx uint64, off int64, p []byte) error {
	return t.write(ino, idx, off, p, nil, true)
}

// WriteChecked is Write (or WriteUncached, if uncached) of data that comes
// with its sender's checksum entries, sums (one per block of p, off a block
// boundary; the last block may be short, as at the end of a chunk): a
// block of p that matches neither checksum of its entry fails the write
// with EIO before anything is written.
func (t *Target) WriteChecked(ino, idx uint64, off int64, p, sums []byte, uncached bool) error {
	if off&blockMask != 0 || len(sums) != int(blocksIn(int64(len(p))))*entrySize {
		return fmt.Errorf("write of %d bytes at offset %d with %d bytes of checksums: they must start at a block and have an entry per block: %w",
			len(p), off, len(sums), syscall.EINVAL)
	}
	return t.write(ino, idx, off, p, sums, uncached)
}

func (t *Target) write(ino, idx uint64, off int64, p, sums []byte, uncached bool) error {
	if off < 0 || off+int64(len(p)) > MaxChunkSize {
		return fmt.Errorf("write of %d bytes at offset %d: beyond the %d-byte chunk limit: %w", len(p), off, int64(MaxChunkSize), syscall.EFBIG)
	}
	if len(p) == 0 {
		return nil
	}
	k := chunkKey{ino, idx}
	err := t.withChunk(k, true, true, func(ch *chunk) error { return t.writeLocked(ch, off, p, sums, uncached) })
	return t.chunkErr("write", k, err)
}

func (t *Target) chunkErr(op string, k chunkKey, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s chunk %d/%d on target %s: %w", op, k.ino, k.idx, t.dir, err)
}

// writeLocked writes p at off: the affected sidecar entries first, then the
// data as whole blocks (the boundary blocks merged with their verified old
// contents), so that an interruption leaves every block old or new. With
// sums (see WriteChecked) each block of p is checked against its entry
// there before anything is written.
func (t *Target) writeLocked(ch *chunk, off int64, p, sums []byte, uncached bool) error {
	oldSize := ch.size
	end := off + int64(len(p))
	bs := off &^ blockMask
	first, last := bs/BlockSize, (end-1)/BlockSize
	nb := int(last - first + 1)
	oldBlocks := blocksIn(oldSize)

	// Old bytes that share a block with the new ones must be kept; bytes
	// in a block past the old end are zeros and need no reading.
	headOld := off != bs && bs < oldSize
	tailOld := end&blockMask != 0 && end < oldSize
	ws, we := off, end // the range the data pwrite covers
	if headOld {
		ws = bs
	}
	if tailOld {
		we = min((last+1)*BlockSize, oldSize)
	}

	eb := getBuf(nb * entrySize)
	defer putBuf(eb)
	ents := *eb
	known := max(min(last+1, oldBlocks)-first, 0) // entries that describe data
	if err := ch.readEntries(ents[:known*entrySize], first); err != nil {
		return err
	}
	clear(ents[known*entrySize:])

	buf := p
	var headCRC, tailCRC uint32
	if headOld || tailOld {
		sb := getBuf(int(we - ws))
		defer putBuf(sb)
		buf = *sb
		var err error
		if headOld {
			n := min(BlockSize, oldSize-bs)
			if headCRC, err = t.readVerified(ch, buf[:n], bs, getEntry(ents, 0)); err != nil {
				return err
			}
			if n < off-ws { // the old end lies before off: zeros between
				clear(buf[n : off-ws])
			}
		}
		if tailOld && (last != first || !headOld) {
			ls := last * BlockSize
			if tailCRC, err = t.readVerified(ch, buf[ls-ws:we-ws], ls, getEntry(ents, nb-1)); err != nil {
				return err
			}
		} else if tailOld {
			tailCRC = headCRC
		}
		copy(buf[off-ws:], p)
	}

	for i := range nb {
		b := first + int64(i)
		// A block past the old end gets prev 0, not the checksum of
		// zeros: if the data pwrite never happens the block stays past
		// the end, where nothing is verified, and a block that later
		// reads as zeros (a lost write) is caught.
		var prev uint32
		switch {
		case i == 0 && headOld:
			prev = headCRC
		case i == nb-1 && tailOld:
			prev = tailCRC
		case b < oldBlocks:
			prev = getEntry(ents, i).contentCRC()
		}
		c := rangeCRC(buf, ws, we, b*BlockSize)
		if sums != nil {
			// Checked against p's own bytes: the checksum of the block
			// written covers old bytes past p's end where they are kept.
			sc := c
			pb := p[i*BlockSize : min((i+1)*BlockSize, len(p))]
			if i == nb-1 && tailOld {
				sc = blockCRC(pb)
			}
			if e := getEntry(sums, i); !e.check(sc, pb) {
				return t.mismatch(ch, b*BlockSize, sc, e)
			}
		}
		putEntry(ents, i, entry{prev, c})
	}

	// Entries past the old last block may be left over from a crash or a
	// failed write; the blocks this write extends over must read {0, 0}.
	if we > oldSize && ch.sumSize > oldBlocks*entrySize {
		if err := ch.cutSums(oldBlocks * entrySize); err != nil {
			return t.resync(ch, err)
		}
	}
	if err := ch.writeEntries(ents, first); err != nil {
		// Entries written so far read {old, new} over old data: valid.
		return t.resync(ch, err)
	}
	if err := t.writeData(ch, buf, ws, uncached); err != nil {
		t.settle(ch, oldSize, first, ents, buf, ws)
		return err
	}
	ch.size = max(oldSize, we)
	return nil
}

// rangeCRC is the checksum of block bS after writing buf over [ws, we):
// bytes of the block outside that range are zeros (a hole before ws, past
// the end of the chunk after we).
func rangeCRC(buf []byte, ws, we, bS int64) uint32 {
	lo, hi := max(bS, ws), min(bS+BlockSize, we)
	return chunksum.CRCAt(int(lo-bS), buf[lo-ws:hi-ws])
}

// readVerified reads the block contents at off into b, checks them against
// e and returns their checksum.
func (t *Target) readVerified(ch *chunk, b []byte, off int64, e entry) (uint32, error) {
	if err := ch.readData(b, off); err != nil {
		return 0, err
	}
	c := blockCRC(b)
	if !e.check(c, b) {
		return 0, t.corrupt(ch, off, c, e)
	}
	return c, nil
}

func (t *Target) corrupt(ch *chunk, off int64, got uint32, e entry) error {
	err := &ChecksumError{Target: t.dir, Ino: ch.key.ino, Index: ch.key.idx, Off: off, Got: got, Want: e}
	checksumErrors.Inc()
	t.logf("storage: %v", err)
	return err
}

// mismatch reports a block whose new contents match neither checksum the
// sender gave for them: damaged on the sender's disk or on the way.
func (t *Target) mismatch(ch *chunk, off int64, got uint32, e entry) error {
	checksumErrors.Inc()
	err := fmt.Errorf("the data sent for chunk %d/%d block at %d does not match the sender's checksums (crc %#08x, sender's %#08x/%#08x): %w",
		ch.key.ino, ch.key.idx, off, got, e.prev, e.cur, syscall.EIO)
	t.logf("storage: target %s: %v", t.dir, err)
	return err
}

// resync reloads the sizes (and sidecar mirror) of ch after a failed call,
// since the call may have changed them partly; if even that fails the handle
// is retired. It returns err.
func (t *Target) resync(ch *chunk, err error) error {
	if rerr := ch.refreshSizes(); rerr != nil {
		ch.dead.Store(true)
	}
	return err
}

// settle cleans up after a data pwrite of buf at ws that failed part way
// (EIO, ENOSPC). It gives back what the write allocated past the old end,
// and pins the entry of each touched block to the contents the block now
// holds (the old bytes, or the new ones, cut at the old end), so that the
// {prev, cur} of the next write to it is truthful again. A block holding
// neither keeps its entry and will fail verification.
func (t *Target) settle(ch *chunk, oldSize, first int64, ents, buf []byte, ws int64) {
	defer t.resync(ch, nil)
	k := ch.key
	if size, err := ch.data.Size(); err == nil && size > oldSize {
		if err := ch.data.Truncate(oldSize); err != nil {
			t.logf("storage: target %s chunk %d/%d: cutting back a failed write: %v", t.dir, k.ino, k.idx, err)
		}
	}
	oldBlocks := blocksIn(oldSize)
	if cur, err := ch.sum.Size(); err == nil && cur > oldBlocks*entrySize {
		ch.sum.Truncate(oldBlocks * entrySize)
	}
	n := int(min(int64(len(ents)/entrySize), oldBlocks-first))
	if n <= 0 {
		return
	}
	bp := getBuf(BlockSize)
	defer putBuf(bp)
	for i := range n {
		bS := (first + int64(i)) * BlockSize
		bE := min(bS+BlockSize, oldSize)
		blk := (*bp)[:bE-bS]
		if ch.readData(blk, bS) != nil {
			return
		}
		c, e := blockCRC(blk), getEntry(ents, i)
		written := bS >= ws && bE-ws <= int64(len(buf)) && bytes.Equal(blk, buf[bS-ws:bE-ws])
		if c == e.prev || written {
			putEntry(ents, i, entry{c, c})
		}
	}
	if _, err := ch.sum.WriteAt(ents[:n*entrySize], first*entrySize); err != nil {
		t.logf("storage: target %s chunk %d/%d: settling checksums after a failed write: %v", t.dir, k.ino, k.idx, err)
	}
}

// writeData writes buf at off of a chunk's data file: large writes with
// RWF_DONTCACHE where the target can (dropbehind.go); where it cannot,
// uncached ones with O_DIRECT when they are large and aligned and the file
// can (direct.go); the rest through the page cache, whose writeback starts
// early (writeback.go).
func (t *Target) writeData(ch *chunk, buf []byte, off int64, uncached bool) error {
	if done, err := t.writeDropBehind(ch, buf, off); done {
		return err
	}
	if d, ok := ch.data.(directWriter); ok && uncached && canWriteDirect(off, len(buf)) {
		_, err := d.WriteDirect(buf, off)
		return err
	}
	if _, err := ch.data.WriteAt(buf, off); err != nil {
		return err
	}
	noteDirty(ch, len(buf))
	return nil
}
