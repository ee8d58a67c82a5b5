package chunksum

import (
	"encoding/binary"
	"hash/crc32"
	"testing"
)

func entries(pairs ...uint32) []byte {
	b := make([]byte, 0, len(pairs)*4)
	for _, v := range pairs {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	return b
}

func block(fill byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = fill
	}
	return b
}

func TestAShortLastBlockIsCheckedAsIfPaddedWithZeros(t *testing.T) {
	short := block(7, 1000)
	padded := append(block(7, 1000), make([]byte, BlockSize-1000)...)
	if BlockCRC(short) != crc32.Checksum(padded, crc32.MakeTable(crc32.Castagnoli)) {
		t.Fatal("a short block's checksum is not that of the block padded with zeros")
	}
}

func TestEachBlockMatchesEitherOfItsTwoChecksums(t *testing.T) {
	a, b := block(1, BlockSize), block(2, BlockSize)
	data := append(append([]byte{}, a...), b...)
	// Block 0 vouched for by cur, block 1 by prev (a write in flight).
	e := entries(99, BlockCRC(a), BlockCRC(b), 98)
	if bad := Check(e, data); bad != -1 {
		t.Fatalf("block %d reported bad", bad)
	}
	data[BlockSize+5] ^= 1
	if bad := Check(e, data); bad != 1 {
		t.Fatalf("a changed byte in block 1: Check says %d, want 1", bad)
	}
}

func TestANeverWrittenEntryVouchesOnlyForZeros(t *testing.T) {
	zeros := make([]byte, BlockSize)
	if bad := Check(entries(0, 0), zeros); bad != -1 {
		t.Fatal("a hole's zeros do not match the empty entry")
	}
	if bad := Check(entries(0, 0), block(3, BlockSize)); bad != 0 {
		t.Fatal("data matched an entry never written")
	}
}

func TestMissingEntriesMakeTheirBlocksBad(t *testing.T) {
	a := block(4, BlockSize)
	data := append(append([]byte{}, a...), a...)
	if bad := Check(entries(0, BlockCRC(a)), data); bad != 1 {
		t.Fatalf("Check says %d for a block without an entry, want 1", bad)
	}
}

func TestAPartlyWrittenBlockIsCheckedAsIfZerosSurroundedIt(t *testing.T) {
	table := crc32.MakeTable(crc32.Castagnoli)
	data := block(9, 700)
	for _, off := range []int{0, 1, 100, BlockSize - 700} {
		whole := make([]byte, BlockSize)
		copy(whole[off:], data)
		if got, want := CRCAt(off, data), crc32.Checksum(whole, table); got != want {
			t.Errorf("CRCAt(%d, 700 bytes) = %08x, want the padded block's %08x", off, got, want)
		}
	}
	full := block(3, BlockSize)
	if CRCAt(0, full) != crc32.Checksum(full, table) {
		t.Error("a whole block's checksum is not its plain CRC32C")
	}
	if CRCAt(0, nil) != crc32.Checksum(make([]byte, BlockSize), table) {
		t.Error("an empty block's checksum is not that of a block of zeros")
	}
}
