package storage

import (
	"fmt"
	"syscall"
)

// Read reads chunk idx of file ino at off into p and returns how many bytes
// it read. Fewer than len(p) means the chunk ends there (the rest is a hole,
// read as zeros by the client); a missing chunk reads 0 bytes. Every block
// the range touches is verified; a block that fails makes Read return a
// *ChecksumError (EIO) and no data.
func (t *Target) Read(ino, idx uint64, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("read at offset %d: %w", off, syscall.EINVAL)
	}
	if len(p) == 0 || off >= MaxChunkSize {
		return 0, nil
	}
	k := chunkKey{ino, idx}
	var n int
	err := t.withChunk(k, false, false, func(ch *chunk) error {
		if ch == nil {
			return nil
		}
		var err error
		n, err = t.readLocked(ch, p, off)
		return err
	})
	return n, t.chunkErr("read", k, err)
}

func (t *Target) readLocked(ch *chunk, p []byte, off int64) (int, error) {
	size := ch.size
	if off >= size {
		return 0, nil
	}
	end := min(off+int64(len(p)), size)
	bs := off &^ blockMask
	be := min((end+blockMask)&^blockMask, size)
	nb := int(blocksIn(be - bs))

	eb := getBuf(nb * entrySize)
	defer putBuf(eb)
	if err := ch.readEntries(*eb, bs/BlockSize); err != nil {
		return 0, err
	}
	// Aligned reads go straight into p; others read whole blocks into a
	// scratch buffer, since only whole blocks can be verified.
	buf := p[:end-off]
	direct := bs == off && be == end
	if !direct {
		sb := getBuf(int(be - bs))
		defer putBuf(sb)
		buf = *sb
	}
	if err := ch.readData(buf, bs); err != nil {
		return 0, err
	}
	for i := range nb {
		blk := buf[i*BlockSize : min((i+1)*BlockSize, len(buf))]
		if e := getEntry(*eb, i); !e.valid(blk) {
			return 0, t.corrupt(ch, bs+int64(i)*BlockSize, blockCRC(blk), e)
		}
	}
	if !direct {
		copy(p, buf[off-bs:end-bs])
	}
	return int(end - off), nil
}

// VerifyChunk reads back every block of chunk idx of file ino and returns
// the numbers of the blocks that fail their checksum, and how many bytes
// it read. It reads from the disk, not the page cache (where the chunk's
// clean pages are dropped first), a piece at a time under the chunk's read
// lock, and calls wait, if not nil, with the bytes of each piece outside
// the lock; an error from wait ends the verification with that error. A
// missing chunk has nothing to verify.
func (t *Target) VerifyChunk(ino, idx uint64, wait func(n int) error) (bad []uint64, n int64, err error) {
	k := chunkKey{ino, idx}
	bp := getBuf(scrubPiece)
	defer putBuf(bp)
	for off := int64(0); ; {
		var got int64
		err := t.withChunk(k, false, false, func(ch *chunk) error {
			if ch == nil || off >= ch.size {
				return nil
			}
			if off == 0 {
				dropCache(ch.data)
			}
			end := min(off+scrubPiece, ch.size)
			b, err := verifyBlocks(ch, (*bp)[:end-off], off)
			bad = append(bad, b...)
			checksumErrors.Add(float64(len(b)))
			got = end - off
			return err
		})
		if err != nil {
			return bad, n, t.chunkErr("verify", k, err)
		}
		if got == 0 {
			return bad, n, nil
		}
		off += got
		n += got
		if wait != nil {
			if err := wait(int(got)); err != nil {
				return bad, n, err
			}
		}
	}
}

// verifyBlocks reads the blocks of buf's length at off (a block boundary)
// and returns the numbers of those that fail their checksum.
func verifyBlocks(ch *chunk, buf []byte, off int64) ([]uint64, error) {
	nb := int(blocksIn(int64(len(buf))))
	eb := getBuf(nb * entrySize)
	defer putBuf(eb)
	if err := ch.readEntries(*eb, off/BlockSize); err != nil {
		return nil, err
	}
	if err := ch.readData(buf, off); err != nil {
		return nil, err
	}
	var bad []uint64
	for i := range nb {
		blk := buf[i*BlockSize : min((i+1)*BlockSize, len(buf))]
		if !getEntry(*eb, i).valid(blk) {
			bad = append(bad, uint64(off/BlockSize)+uint64(i))
		}
	}
	return bad, nil
}
