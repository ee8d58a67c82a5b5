package storage

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestDataWrittenAtAnyOffsetReadsBack(t *testing.T) {
	tg := openTestTarget(t, Options{})
	offsets := []int64{0, 1, 511, 4095, 4096, 4097, 8191, 12345, 1<<20 - 3, 3 << 20}
	lengths := []int{1, 100, 4095, 4096, 4097, 8192, 65536 + 7, 1 << 20}
	ino := uint64(1)
	for _, off := range offsets {
		for _, n := range lengths {
			ino++
			p := pattern(ino, n)
			mustWrite(t, tg, ino, 0, off, p)
			got := make([]byte, n)
			if k, err := tg.Read(ino, 0, got, off); err != nil || k != n {
				t.Fatalf("off %d len %d: read %d bytes, err %v", off, n, k, err)
			}
			assertSame(t, fmt.Sprintf("off %d len %d", off, n), got, p)
			// The bytes before the write are a hole: zeros.
			var want model
			want.write(int(off), p)
			assertSame(t, fmt.Sprintf("whole chunk, off %d len %d", off, n), readAll(t, tg, ino, 0, int(off)+n+10), want)
		}
	}
}

func TestHolesReadAsZerosAndChunksEndShort(t *testing.T) {
	tg := openTestTarget(t, Options{})

	p := make([]byte, 100)
	if n, err := tg.Read(7, 3, p, 0); n != 0 || err != nil {
		t.Fatalf("missing chunk: read %d bytes, err %v; want 0, nil", n, err)
	}
	if _, err := os.Stat(tg.dataPath(7, 3)); !os.IsNotExist(err) {
		t.Fatalf("reading a missing chunk created it: %v", err)
	}

	data := pattern(1, 5000)
	mustWrite(t, tg, 7, 3, 100000, data)
	got := make([]byte, 110000)
	n, err := tg.Read(7, 3, got, 0)
	if err != nil || n != 105000 {
		t.Fatalf("read %d bytes, err %v; want 105000 (the chunk's end)", n, err)
	}
	assertSame(t, "hole before the data", got[:100000], make([]byte, 100000))
	assertSame(t, "data after the hole", got[100000:n], data)

	if n, err := tg.Read(7, 3, got, 105000); n != 0 || err != nil {
		t.Fatalf("read at the end: %d bytes, err %v; want 0, nil", n, err)
	}
	if n, err := tg.Read(7, 3, got[:10], 104995); n != 5 || err != nil {
		t.Fatalf("read across the end: %d bytes, err %v; want 5, nil", n, err)
	}
}

func TestUnalignedOverwritesKeepTheirNeighbours(t *testing.T) {
	tg := openTestTarget(t, Options{})
	var want model
	base := pattern(1, 64<<10)
	mustWrite(t, tg, 1, 0, 0, base)
	want.write(0, base)
	for i, w := range []struct{ off, n int }{
		{1, 1}, {4095, 2}, {4000, 200}, {8191, 4098}, {100, 4096}, {12288, 4096}, {65535, 10}, {70000, 3},
	} {
		p := pattern(uint64(i+10), w.n)
		mustWrite(t, tg, 1, 0, int64(w.off), p)
		want.write(w.off, p)
		assertSame(t, fmt.Sprintf("after overwrite %d at %d", w.n, w.off), readAll(t, tg, 1, 0, 1<<20), want)
	}
}

// A random mix of writes and truncates must always read back like a plain
// byte slice does, for chunks whose sidecar is mirrored in memory and for
// bigger ones whose sidecar is read from disk (and for chunks changing from
// one to the other, as the small open-chunk cache reopens them).
func TestRandomWritesAndTruncatesMatchAModel(t *testing.T) {
	for _, max := range []int{256 << 10, 3 * maxCachedSums / entrySize * BlockSize / 2} {
		t.Run(fmt.Sprintf("chunks up to %d KiB", max>>10), func(t *testing.T) {
			testRandomOps(t, max)
		})
	}
}

func testRandomOps(t *testing.T, max int) {
	tg := openTestTarget(t, Options{MaxOpenChunks: 1})
	r := rand.New(rand.NewPCG(1, 2))
	var want model
	for i := range 400 {
		switch r.IntN(6) {
		case 0:
			n := r.IntN(max)
			if err := tg.Truncate(5, 1, int64(n)); err != nil {
				t.Fatal(err)
			}
			want.truncate(n)
		default:
			off, n := r.IntN(max), 1+r.IntN(20000)
			p := pattern(uint64(i), n)
			mustWrite(t, tg, 5, 1, int64(off), p)
			want.write(off, p)
		}
		if i%20 == 0 {
			assertSame(t, fmt.Sprintf("step %d", i), readAll(t, tg, 5, 1, 2*max), want)
			mustWrite(t, tg, 6, 0, 0, []byte("x")) // evict chunk 5/1
		}
	}
	assertSame(t, "end", readAll(t, tg, 5, 1, 2*max), want)
}

func TestTruncateShrinksAndGrows(t *testing.T) {
	tg := openTestTarget(t, Options{})
	data := pattern(3, 20000)
	mustWrite(t, tg, 2, 0, 0, data)

	if err := tg.Truncate(2, 0, 6000); err != nil {
		t.Fatal(err)
	}
	assertSame(t, "shrunk inside a block", readAll(t, tg, 2, 0, 30000), data[:6000])

	// Growing again must show zeros where the cut bytes were, and the
	// new last block must verify both before and after growing.
	if err := tg.Truncate(2, 0, 15000); err != nil {
		t.Fatal(err)
	}
	var want model
	want.write(0, data[:6000])
	want.truncate(15000)
	assertSame(t, "grown", readAll(t, tg, 2, 0, 30000), want)

	if err := tg.Truncate(2, 0, 8192); err != nil {
		t.Fatal(err)
	}
	want.truncate(8192)
	assertSame(t, "shrunk to a block boundary", readAll(t, tg, 2, 0, 30000), want)
	if fi, err := os.Stat(tg.dataPath(2, 0) + ".sum"); err != nil || fi.Size() != 2*entrySize {
		t.Fatalf("sidecar after truncating to 2 blocks: %v, %v; want 16 bytes", fi.Size(), err)
	}

	if err := tg.Truncate(2, 0, 0); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, tg, 2, 0, 100); len(got) != 0 {
		t.Fatalf("truncated to 0 but read %d bytes", len(got))
	}
	if err := tg.Truncate(9, 9, 0); err != nil {
		t.Fatalf("truncating a missing chunk to 0: %v", err)
	}
	if err := tg.Truncate(9, 9, 5000); err != nil {
		t.Fatal(err)
	}
	assertSame(t, "missing chunk grown", readAll(t, tg, 9, 9, 10000), make([]byte, 5000))
}

func TestDeleteRemovesChunksFromIndex(t *testing.T) {
	tg := openTestTarget(t, Options{})
	for idx := range uint64(5) {
		mustWrite(t, tg, 300, idx, 0, pattern(idx, 5000))
	}
	if err := tg.Delete(300, 3); err != nil {
		t.Fatal(err)
	}
	for idx := range uint64(5) {
		got := readAll(t, tg, 300, idx, 10000)
		if idx < 3 {
			assertSame(t, fmt.Sprintf("kept chunk %d", idx), got, pattern(idx, 5000))
		} else if len(got) != 0 {
			t.Fatalf("deleted chunk %d still reads %d bytes", idx, len(got))
		}
	}
	if err := tg.Delete(300, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tg.inoDir(300)); !os.IsNotExist(err) {
		t.Fatalf("file directory left after deleting every chunk: %v", err)
	}
	if err := tg.Delete(300, 0); err != nil {
		t.Fatalf("deleting a file with no chunks: %v", err)
	}
}

// A write after a delete must land in a new chunk, not in the deleted file
// through a descriptor the cache kept open.
func TestWriteAfterDeleteStartsAFreshChunk(t *testing.T) {
	tg := openTestTarget(t, Options{})
	mustWrite(t, tg, 4, 0, 0, pattern(1, 8192))
	if err := tg.Delete(4, 0); err != nil {
		t.Fatal(err)
	}
	p := pattern(2, 100)
	mustWrite(t, tg, 4, 0, 4096, p)
	var want model
	want.write(4096, p)
	assertSame(t, "after delete and rewrite", readAll(t, tg, 4, 0, 10000), want)
	if fi, err := os.Stat(tg.dataPath(4, 0)); err != nil || fi.Size() != 4196 {
		t.Fatalf("chunk file on disk: %v %v", fi, err)
	}
}

func TestConcurrentWritersToDifferentChunks(t *testing.T) {
	tg := openTestTarget(t, Options{MaxOpenChunks: 8}) // small: exercise eviction
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				idx := uint64(w*100 + i)
				p := pattern(idx, 3000+i*100)
				if err := tg.Write(uint64(w), idx, int64(i*777), p); err != nil {
					t.Error(err)
					return
				}
				got := make([]byte, len(p))
				if n, err := tg.Read(uint64(w), idx, got, int64(i*777)); err != nil || n != len(p) {
					t.Errorf("read back: %d %v", n, err)
					return
				}
				assertSame(t, "concurrent chunk", got, p)
			}
		}()
	}
	wg.Wait()
	tg.cache.mu.Lock()
	open := len(tg.cache.m)
	tg.cache.mu.Unlock()
	if open > 8 {
		t.Fatalf("%d chunks open, bound is 8", open)
	}
}

// Writers sharing blocks of one chunk (each owns an unaligned slice of it)
// must not lose each other's bytes, and readers running alongside must never
// see a block fail verification.
func TestConcurrentWritersToOneChunkShareBlocks(t *testing.T) {
	tg := openTestTarget(t, Options{})
	const writers, seg, rounds = 6, 1000, 30
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var rwg sync.WaitGroup
	rwg.Add(1)
	go func() {
		defer rwg.Done()
		p := make([]byte, writers*seg)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := tg.Read(1, 0, p, 0); err != nil {
				t.Error("reader:", err)
				return
			}
		}
	}()
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				if err := tg.Write(1, 0, int64(w*seg), pattern(uint64(w*1000+r), seg)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	rwg.Wait()
	var want model
	for w := range writers {
		want.write(w*seg, pattern(uint64(w*1000+rounds-1), seg))
	}
	assertSame(t, "after concurrent writers", readAll(t, tg, 1, 0, 1<<16), want)
}

func flipBit(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x10
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func wantChecksumError(t *testing.T, err error, blockOff int64) {
	t.Helper()
	var ce *ChecksumError
	if !errors.As(err, &ce) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("got %v, want a checksum error (EIO)", err)
	}
	if ce.Off != blockOff {
		t.Fatalf("checksum error names block at %d, want %d", ce.Off, blockOff)
	}
}

func TestBitFlipInDataIsDetected(t *testing.T) {
	tg := openTestTarget(t, Options{})
	mustWrite(t, tg, 1, 0, 0, pattern(1, 5*BlockSize+100))
	flipBit(t, tg.dataPath(1, 0), 2*BlockSize+1234)

	p := make([]byte, 10)
	_, err := tg.Read(1, 0, p, 2*BlockSize+5) // any read touching the block
	wantChecksumError(t, err, 2*BlockSize)
	_, err = tg.Read(1, 0, make([]byte, 1<<20), 0)
	wantChecksumError(t, err, 2*BlockSize)
	// Other blocks stay readable.
	if _, err := tg.Read(1, 0, make([]byte, BlockSize), 3*BlockSize); err != nil {
		t.Fatalf("intact block: %v", err)
	}
	// A write into the damaged block must not launder it.
	err = tg.Write(1, 0, 2*BlockSize+10, []byte("x"))
	wantChecksumError(t, err, 2*BlockSize)
}

func TestBitFlipInLastPartialBlockIsDetected(t *testing.T) {
	tg := openTestTarget(t, Options{})
	mustWrite(t, tg, 1, 0, 0, pattern(1, BlockSize+10))
	flipBit(t, tg.dataPath(1, 0), BlockSize+9)
	_, err := tg.Read(1, 0, make([]byte, 100), BlockSize)
	wantChecksumError(t, err, BlockSize)
}

func TestZeroedRangeIsDetected(t *testing.T) {
	tg := openTestTarget(t, Options{})
	mustWrite(t, tg, 1, 0, 0, pattern(1, 8*BlockSize))
	f, err := os.OpenFile(tg.dataPath(1, 0), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, 2*BlockSize), 3*BlockSize); err != nil { // a lost write, say
		t.Fatal(err)
	}
	f.Close()
	_, err = tg.Read(1, 0, make([]byte, 8*BlockSize), 0)
	wantChecksumError(t, err, 3*BlockSize)
}

func TestSidecarDamageIsDetected(t *testing.T) {
	dir := t.TempDir()
	tg := openTargetAt(t, dir, Options{})
	mustWrite(t, tg, 1, 0, 0, pattern(1, 4*BlockSize))
	// Damage at rest: open chunks keep their sidecar in memory.
	tg.Close()
	flipBit(t, tg.dataPath(1, 0)+".sum", 1*entrySize+5) // the cur slot of block 1
	flipBit(t, tg.dataPath(1, 0)+".sum", 1*entrySize+1) // and its prev slot
	tg = openTargetAt(t, dir, Options{})
	_, err := tg.Read(1, 0, make([]byte, 4*BlockSize), 0)
	wantChecksumError(t, err, BlockSize)
}

func TestReopenKeepsDataAndIdentity(t *testing.T) {
	dir := t.TempDir()
	tg, err := OpenTarget(dir, Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	uuid := tg.UUID()
	mustWrite(t, tg, 11, 2, 777, pattern(5, 30000))
	if err := tg.SetID(42); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenTarget(dir, Options{}); err == nil {
		t.Fatal("a second open of a target in use succeeded")
	}
	tg.Close()

	tg2 := openTargetAt(t, dir, Options{})
	if tg2.UUID() != uuid || tg2.ID() != 42 {
		t.Fatalf("reopened target: uuid %s id %d; want %s 42", tg2.UUID(), tg2.ID(), uuid)
	}
	var want model
	want.write(777, pattern(5, 30000))
	assertSame(t, "after reopen", readAll(t, tg2, 11, 2, 1<<20), want)
}

func TestOpenRefusesBadDirectories(t *testing.T) {
	if _, err := OpenTarget(filepath.Join(t.TempDir(), "missing"), Options{}); err == nil {
		t.Fatal("opened a missing directory")
	}
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "chunks"), 0o755)
	if _, err := OpenTarget(dir, Options{}); err == nil {
		t.Fatal("formatted a directory holding chunks but no target.json")
	}
	dir = t.TempDir()
	os.WriteFile(filepath.Join(dir, "target.json"), []byte(`{"format":99,"uuid":"x"}`), 0o644)
	if _, err := OpenTarget(dir, Options{}); err == nil {
		t.Fatal("opened a target of an unknown format")
	}
}

func TestSyncMakesChunksDurable(t *testing.T) {
	ffs := NewFaultFS(nil)
	var synced []string
	var mu sync.Mutex
	ffs.Inject(Fault{Ops: OpSync | OpSyncDir, Hook: func(op Op, path string) {
		mu.Lock()
		synced = append(synced, path)
		mu.Unlock()
	}})
	tg := openTestTarget(t, Options{FS: ffs})
	mustWrite(t, tg, 0x1ff, 0, 0, []byte("a"))
	mustWrite(t, tg, 0x1ff, 1, 0, []byte("b"))
	mu.Lock()
	synced = nil
	mu.Unlock()
	if err := tg.Sync(0x1ff, nil); err != nil {
		t.Fatal(err)
	}
	dir := tg.inoDir(0x1ff)
	want := map[string]bool{
		dir + "/0": true, dir + "/0.sum": true, dir + "/1": true, dir + "/1.sum": true,
		dir: true, filepath.Join(tg.Dir(), "chunks", "ff"): true,
	}
	mu.Lock()
	defer mu.Unlock()
	for _, p := range synced {
		delete(want, p)
	}
	if len(want) != 0 {
		t.Fatalf("not synced: %v (synced %v)", want, synced)
	}
}

// Two clients fsync one file at once: the second must not return before
// the directory sync the first took its new chunk's entry into has ended.
func TestASyncDoesNotOvertakeTheDirectorySyncOfAnotherThatTookItsEntries(t *testing.T) {
	ffs := NewFaultFS(nil)
	tg := openTestTarget(t, Options{FS: ffs})
	mustWrite(t, tg, 0x1ff, 0, 0, []byte("a")) // a new chunk: its directory is dirty
	entered, release := make(chan struct{}), make(chan struct{})
	ffs.Inject(Fault{Ops: OpSyncDir, Times: 1, Hook: func(Op, string) {
		close(entered)
		<-release
	}})
	first := make(chan error)
	go func() { first <- tg.Sync(0x1ff, []uint64{0}) }()
	<-entered // the first Sync took the mark and is syncing the directory
	second := make(chan error)
	go func() { second <- tg.Sync(0x1ff, []uint64{0}) }()
	select {
	case err := <-second:
		t.Fatalf("a Sync returned (%v) while the directory sync holding its chunk's entry still ran", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
}

func TestCapacityReportsTheFileSystem(t *testing.T) {
	tg := openTestTarget(t, Options{})
	total, free, err := tg.Capacity()
	if err != nil || total == 0 || free > total {
		t.Fatalf("capacity %d/%d, %v", free, total, err)
	}
}

// Chunks up to 8 MiB keep their sidecar in memory while open: a read is one
// pread of data, a write two pwrites.
func TestOpenSmallChunksDoNotReadTheirSidecar(t *testing.T) {
	ffs := NewFaultFS(nil)
	tg := openTestTarget(t, Options{FS: ffs})
	mustWrite(t, tg, 1, 0, 0, pattern(1, 1<<20))
	var mu sync.Mutex
	reads := 0
	ffs.Inject(Fault{Ops: OpRead, Match: isSum, Hook: func(Op, string) { mu.Lock(); reads++; mu.Unlock() }})
	for i := range 100 {
		mustWrite(t, tg, 1, 0, int64(i*4096), pattern(uint64(i), 4096))
		if _, err := tg.Read(1, 0, make([]byte, 4096), int64(i*8192%(1<<20))); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if reads != 0 {
		t.Fatalf("the sidecar was read %d times", reads)
	}
}

func TestAnInterruptedFormatIsFinishedOnlyWhereAskedAndNoChunkIsThere(t *testing.T) {
	interrupted := func() string {
		dir := t.TempDir()
		for _, b := range []string{"00", "01", "02"} { // killed after the third bucket
			if err := os.MkdirAll(filepath.Join(dir, "chunks", b), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		os.WriteFile(filepath.Join(dir, "lock"), nil, 0o644)
		return dir
	}

	if _, err := OpenTarget(interrupted(), Options{}); err == nil {
		t.Fatal("a target without target.json was formatted again without FinishFormat")
	}

	dir := interrupted()
	tg, err := OpenTarget(dir, Options{FinishFormat: true, Logf: t.Logf})
	if err != nil {
		t.Fatalf("finishing an interrupted format: %v", err)
	}
	if tg.UUID() == "" {
		t.Fatal("no identity after finishing the format")
	}
	if _, err := os.Stat(filepath.Join(dir, "chunks", "ff")); err != nil {
		t.Fatalf("the last bucket directory is missing after finishing the format: %v", err)
	}
	mustWrite(t, tg, 3, 0, 0, []byte("data"))
	tg.Close()

	// Once it holds a chunk, a store without target.json is refused.
	if err := os.Remove(filepath.Join(dir, "target.json")); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenTarget(dir, Options{FinishFormat: true, Logf: t.Logf}); err == nil {
		t.Fatal("formatted again a directory holding a chunk but no target.json")
	}
}
