package storage

import (
	"encoding/binary"
	"fmt"
	"syscall"

	"tandemfs/internal/chunksum"
)

// Checksum geometry; see the package documentation for the format.
const (
	BlockSize = 4096
	entrySize = 8
	blockMask = BlockSize - 1
)

// crcZero is the checksum of a block of zeros: the checksum of a hole.
var crcZero = chunksum.BlockCRC(nil)

// entry is one sidecar entry: the checksums of a block's previous and
// current contents.
type entry struct{ prev, cur uint32 }

func getEntry(b []byte, i int) entry {
	return entry{binary.LittleEndian.Uint32(b[i*entrySize:]), binary.LittleEndian.Uint32(b[i*entrySize+4:])}
}

func putEntry(b []byte, i int, e entry) {
	binary.LittleEndian.PutUint32(b[i*entrySize:], e.prev)
	binary.LittleEndian.PutUint32(b[i*entrySize+4:], e.cur)
}

// blockCRC is the checksum of a block given its bytes on disk (see
// chunksum.BlockCRC).
func blockCRC(b []byte) uint32 { return chunksum.BlockCRC(b) }

// contentCRC is the checksum of the contents entry e vouches for, as the
// prev slot of the next write to the block: cur, or for a block never
// written (both slots 0, a hole inside the chunk) the checksum of zeros.
func (e entry) contentCRC() uint32 {
	if e.prev == 0 && e.cur == 0 {
		return crcZero
	}
	return e.cur
}

// valid reports whether block contents b (len ≤ BlockSize) match entry e.
func (e entry) valid(b []byte) bool { return e.check(blockCRC(b), b) }

// check is valid for contents b whose checksum c is already known.
func (e entry) check(c uint32, b []byte) bool { return chunksum.Matches(e.prev, e.cur, c, b) }

// ChecksumError reports a block whose contents match neither checksum of
// its entry. It unwraps to syscall.EIO, the errno the application sees.
type ChecksumError struct {
	Target string // target directory
	Ino    uint64
	Index  uint64
	Off    int64 // offset of the block inside the chunk
	Got    uint32
	Want   entry
}

func (e *ChecksumError) Error() string {
	return fmt.Sprintf("checksum mismatch on target %s chunk %d/%d block at offset %d: crc32c %08x, entry {%08x %08x}",
		e.Target, e.Ino, e.Index, e.Off, e.Got, e.Want.prev, e.Want.cur)
}

func (e *ChecksumError) Unwrap() error { return syscall.EIO }
