package client

import (
	"bytes"
	"os"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func blocksOf(c byte, n int) []byte { return bytes.Repeat([]byte{c}, n*cacheBlock) }

func TestBlockCacheAnswersOnlyWhenItHasEveryBlock(t *testing.T) {
	bc := newBlockCache(1 << 20)
	bc.insert(7, 0, blocksOf('a', 2), bc.begin())
	got := make([]byte, 2*cacheBlock)
	if !bc.read(7, 0, got) || !bytes.Equal(got, blocksOf('a', 2)) {
		t.Fatalf("two blocks inserted: read %v, %q", bc.read(7, 0, got), got[:4])
	}
	if bc.read(7, cacheBlock, make([]byte, 2*cacheBlock)) {
		t.Fatal("answered a read of blocks 1-2 with only block 1 held")
	}
	if bc.read(8, 0, make([]byte, cacheBlock)) {
		t.Fatal("answered a read of a file never inserted")
	}
}

func TestBlockCacheKeepsNothingAnIOBroughtAcrossADrop(t *testing.T) {
	for _, tc := range []struct {
		name string
		drop func(bc *blockCache)
	}{
		{"a write to the range", func(bc *blockCache) { bc.dropRange(7, 0, 1) }},
		{"a write elsewhere in the file", func(bc *blockCache) { bc.dropRange(7, 100*cacheBlock, 1) }},
		{"a change of the file", func(bc *blockCache) { bc.dropFile(7) }},
		{"a lost watch", func(bc *blockCache) { bc.dropAll() }},
	} {
		for _, held := range []bool{false, true} {
			bc := newBlockCache(1 << 20)
			if held { // the file has other blocks here
				bc.insert(7, 50*cacheBlock, blocksOf('h', 1), bc.begin())
			}
			gen := bc.begin()
			tc.drop(bc)
			bc.insert(7, 0, blocksOf('a', 1), gen)
			if bc.read(7, 0, make([]byte, cacheBlock)) {
				t.Errorf("%s (other blocks held: %v): a read begun before it was kept", tc.name, held)
			}
		}
	}
}

func TestBlockCacheKeepsWhatAWriteBroughtUnlessAnotherDropFollowed(t *testing.T) {
	bc := newBlockCache(1 << 20)
	gen := bc.dropRange(7, 0, cacheBlock)
	bc.insert(7, 0, blocksOf('w', 1), gen)
	if !bc.read(7, 0, make([]byte, cacheBlock)) {
		t.Fatal("a write's blocks were not kept")
	}
	first := bc.dropRange(7, cacheBlock, cacheBlock)
	second := bc.dropRange(7, cacheBlock, cacheBlock)
	bc.insert(7, cacheBlock, blocksOf('1', 1), first)
	bc.insert(7, cacheBlock, blocksOf('2', 1), second)
	got := make([]byte, cacheBlock)
	if !bc.read(7, cacheBlock, got) || got[0] != '2' {
		t.Fatalf("two writes of a block: kept %q, want only the later one's", got[:1])
	}
	// A drop of another file, while this one has blocks, does not void
	// this file's inserts.
	gen = bc.begin()
	bc.dropFile(9)
	bc.insert(7, 2*cacheBlock, blocksOf('r', 1), gen)
	if !bc.read(7, 2*cacheBlock, got) {
		t.Fatal("a read of a held file was not kept after another file's drop")
	}
}

func TestBlockCacheStaysWithinItsSizeAndKeepsBlocksInUse(t *testing.T) {
	const size = 2 * slabBlocks * cacheBlock
	bc := newBlockCache(size)
	hot := blocksOf('h', 1)
	bc.insert(1, 0, hot, bc.begin())
	for i := range 4 * slabBlocks {
		bc.insert(2, uint64(i)*cacheBlock, blocksOf(byte(i), 1), bc.begin())
		if !bc.read(1, 0, make([]byte, cacheBlock)) {
			t.Fatalf("a block read between every insert was evicted after %d inserts", i)
		}
	}
	if s := bc.stats(); s.Bytes != size {
		t.Fatalf("holds %d bytes after filling, want %d", s.Bytes, size)
	}
	if len(bc.slabs.mem) != 2 {
		t.Fatalf("%d slabs of memory for a cache of two", len(bc.slabs.mem))
	}
	bc.dropAll()
	if s := bc.stats(); s.Bytes != 0 {
		t.Fatalf("holds %d bytes after dropping all", s.Bytes)
	}
	bc.insert(3, 0, blocksOf('n', 3), bc.begin())
	if len(bc.slabs.mem) != 2 || !bc.read(3, 0, make([]byte, 3*cacheBlock)) {
		t.Fatal("dropped memory was not reused")
	}
}

func TestAnIOIsCacheableOnlyInWholeSmallBlocks(t *testing.T) {
	for _, tc := range []struct {
		off  uint64
		n    int
		want bool
	}{
		{0, cacheBlock, true},
		{cacheBlock, cacheMaxIO, true},
		{0, cacheMaxIO + cacheBlock, false},
		{100, cacheBlock, false},
		{0, 3000, false},
		{0, 0, false},
	} {
		if got := cacheableIO(tc.off, tc.n); got != tc.want {
			t.Errorf("cacheableIO(%d, %d) = %v", tc.off, tc.n, got)
		}
	}
}

func TestBlockCacheEvictingAFilesLastBlockForItsNextKeepsTheNext(t *testing.T) {
	bc := newBlockCache(cacheBlock) // one block
	bc.insert(5, 0, blocksOf('0', 1), bc.begin())
	bc.insert(5, cacheBlock, blocksOf('1', 1), bc.begin())
	got := make([]byte, cacheBlock)
	if bc.read(5, 0, got) || !bc.read(5, cacheBlock, got) || got[0] != '1' {
		t.Fatalf("one-block cache after two inserts: block 1 read %q", got[:1])
	}
}

func TestAReadWithoutALeaseAsksForOneOnlyForCachedFilesAndNotOften(t *testing.T) {
	bc := newBlockCache(1 << 20)
	now := time.Now()
	if bc.wantsLease(7, now) {
		t.Fatal("asks for a lease on a file with no blocks here")
	}
	bc.insert(7, 0, blocksOf('a', 1), bc.begin())
	if !bc.wantsLease(7, now) {
		t.Fatal("does not ask for a lease on a file with blocks here")
	}
	if bc.wantsLease(7, now.Add(leaseRetry/2)) {
		t.Fatal("asks again within leaseRetry")
	}
	if !bc.wantsLease(7, now.Add(leaseRetry)) {
		t.Fatal("does not ask again after leaseRetry")
	}
}

func TestAMissBringsItsLineWhileTheCacheHasRoom(t *testing.T) {
	const line = cacheLineBytes
	const chunk = 4 * line
	for _, tc := range []struct{ off, n, size, chunk, lo, hi uint64 }{
		{0, cacheBlock, 10 * line, chunk, 0, line},
		{line + 5*cacheBlock, 2 * cacheBlock, 10 * line, chunk, line, 2 * line},
		{line - cacheBlock, 2 * cacheBlock, 10 * line, chunk, 0, 2 * line},                          // across two lines
		{2 * line, cacheBlock, 2*line + 3*cacheBlock + 100, chunk, 2 * line, 2*line + 3*cacheBlock}, // whole blocks below the end
		{line + 5*cacheBlock, cacheBlock, 10 * line, line / 4, line, line + line/4},                 // chunks smaller than a line: the chunk
		{line + 5*cacheBlock, cacheBlock, 10 * line, 0, line, 2 * line},                             // no chunk size known: a line
	} {
		if lo, hi := cacheLine(tc.off, tc.n, tc.size, tc.chunk); lo != tc.lo || hi != tc.hi {
			t.Errorf("cacheLine(%d, %d, %d, %d) = [%d, %d), want [%d, %d)", tc.off, tc.n, tc.size, tc.chunk, lo, hi, tc.lo, tc.hi)
		}
	}
	bc := newBlockCache(2 * line)
	if !bc.hasRoom(int(2 * line / cacheBlock)) {
		t.Fatal("an empty cache has no room for its size")
	}
	bc.insert(1, 0, blocksOf('a', int(line/cacheBlock)+1), bc.begin())
	if bc.hasRoom(int(line / cacheBlock)) {
		t.Fatal("room for a line where less is left")
	}
	bc.dropFile(1)
	if !bc.hasRoom(int(2 * line / cacheBlock)) {
		t.Fatal("dropped blocks are not room")
	}
}

func TestASlabIsZeroedWritableMemoryOnAHugePageBoundary(t *testing.T) {
	mem, unmap := newSlab()
	defer unmap()
	if len(mem) != slabBytes {
		t.Fatalf("a slab of %d bytes, want %d", len(mem), slabBytes)
	}
	if addr := uintptr(unsafe.Pointer(&mem[0])); addr%slabBytes != 0 {
		t.Fatalf("slab at %#x, not on a %d-byte boundary", addr, slabBytes)
	}
	for _, i := range []int{0, slabBytes / 2, slabBytes - 1} {
		if mem[i] != 0 {
			t.Fatalf("byte %d of a new slab is %d", i, mem[i])
		}
		mem[i] = 0xa5
	}
}

func TestForgettingAFileFreesItsBlocksButKeepsInsertsInFlight(t *testing.T) {
	bc := newBlockCache(1 << 20)
	bc.insert(7, 0, blocksOf('a', 4), bc.begin())
	gen := bc.begin() // a read of file 8 starts
	bc.forget(7)
	if s := bc.stats(); s.Bytes != 0 {
		t.Fatalf("holds %d bytes of a forgotten file", s.Bytes)
	}
	if bc.read(7, 0, make([]byte, cacheBlock)) {
		t.Fatal("answers for a forgotten file")
	}
	bc.insert(8, 0, blocksOf('b', 1), gen)
	if !bc.read(8, 0, make([]byte, cacheBlock)) {
		t.Fatal("forgetting one file voided another file's insert")
	}
}

func TestACacheNoLongerReachableGivesItsSlabsBack(t *testing.T) {
	// msync fails with ENOMEM on a range that is not wholly mapped.
	mapped := func(slab unsafe.Pointer) bool {
		return unix.Msync(unsafe.Slice((*byte)(slab), slabBytes), 0) == nil
	}
	bc := newBlockCache(1 << 20)
	bc.insert(1, 0, blocksOf('s', 1), bc.begin())
	slab := unsafe.Pointer(&bc.slabs.mem[0][0]) // outside the Go heap: it keeps nothing alive
	if !mapped(slab) {
		t.Fatalf("the slab at %p is not mapped", slab)
	}
	bc = nil
	for deadline := time.Now().Add(5 * time.Second); mapped(slab) && time.Now().Before(deadline); {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if mapped(slab) {
		t.Fatalf("the slab at %p is still mapped after its cache was collected", slab)
	}
}

func TestPrefaultBacksEverySlabWithMemoryAndKeepsWhatTheCacheHolds(t *testing.T) {
	const slabs = 4
	bc := newBlockCache(slabs * slabBytes)
	bc.insert(7, 0, blocksOf('k', 3), bc.begin()) // in use before the prefault
	if !bc.prefault() {
		t.Fatal("prefault failed (a kernel before 5.14?)")
	}
	if n := len(bc.slabs.mem); n != slabs {
		t.Fatalf("prefault mapped %d slabs, want %d (the cache's size)", n, slabs)
	}
	for i, mem := range bc.slabs.mem {
		vec := make([]byte, slabBytes/os.Getpagesize())
		if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&mem[0])), uintptr(len(mem)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
			t.Fatalf("mincore: %v", errno)
		}
		for p, v := range vec {
			if v&1 == 0 {
				t.Fatalf("page %d of slab %d is not in memory after prefault", p, i)
			}
		}
	}
	got := make([]byte, 3*cacheBlock)
	if !bc.read(7, 0, got) || !bytes.Equal(got, blocksOf('k', 3)) {
		t.Fatalf("blocks held before the prefault read back %q", got[:4])
	}
	// Filling the cache uses the slabs prefault mapped, and maps no more.
	for b := uint64(3); b < slabs*slabBlocks; b++ {
		bc.insert(7, b*cacheBlock, blocksOf(byte(b), 1), bc.begin())
	}
	if n := len(bc.slabs.mem); n != slabs {
		t.Fatalf("a full cache has %d slabs, want %d", n, slabs)
	}
	last := uint64(slabs*slabBlocks - 1)
	if !bc.read(7, last*cacheBlock, got[:cacheBlock]) || !bytes.Equal(got[:cacheBlock], blocksOf(byte(last), 1)) {
		t.Fatal("the cache's last block did not read back")
	}
}
