// Package chunksum checks chunk data against the checksum entries a storage
// target keeps for it (the sidecar format in internal/storage/doc.go): one
// 8-byte entry per 4 KiB block, two little-endian CRC32C values {prev, cur}.
// The storage servers check every block they read or are sent against them,
// and a client checks the blocks a server sent it without reading them.
package chunksum

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
)

// Geometry of the checksums.
const (
	BlockSize = 4096
	EntrySize = 8
)

var (
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
	zeroBlock  [BlockSize]byte
)

// BlockCRC is the checksum of a block given its bytes on disk, which are
// fewer than BlockSize for a chunk's last block: the rest counts as zeros.
func BlockCRC(b []byte) uint32 { return CRCAt(0, b) }

// CRCAt is the checksum of a block that holds b at offset off and zeros
// everywhere else (off+len(b) at most BlockSize): a block part of which a
// write has just filled, with a hole before it or the chunk's end after.
func CRCAt(off int, b []byte) uint32 {
	if off == 0 && len(b) == BlockSize {
		return crc32.Checksum(b, castagnoli)
	}
	c := crc32.Update(0, castagnoli, zeroBlock[:off])
	c = crc32.Update(c, castagnoli, b)
	return crc32.Update(c, castagnoli, zeroBlock[:BlockSize-off-len(b)])
}

// Matches reports whether block contents b, whose checksum is c, are what
// the entry {prev, cur} vouches for: either checksum, or, for an entry
// never written (both 0), a block of zeros (a hole).
func Matches(prev, cur, c uint32, b []byte) bool {
	if c == cur || c == prev {
		return true
	}
	return prev == 0 && cur == 0 && bytes.Equal(b, zeroBlock[:len(b)])
}

// Check checks data, whole blocks from a block boundary of a chunk (the last
// one may be short where the chunk ends), against entries, one per block.
// It returns the index of the first block that does not match, or -1.
func Check(entries, data []byte) int {
	for i := 0; i*BlockSize < len(data); i++ {
		if (i+1)*EntrySize > len(entries) {
			return i
		}
		b := data[i*BlockSize : min((i+1)*BlockSize, len(data))]
		e := entries[i*EntrySize:]
		prev, cur := binary.LittleEndian.Uint32(e), binary.LittleEndian.Uint32(e[4:])
		if !Matches(prev, cur, BlockCRC(b), b) {
			return i
		}
	}
	return -1
}
