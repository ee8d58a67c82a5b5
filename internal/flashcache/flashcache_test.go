package flashcache

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"tandemfs/internal/storage"
)

// The tests run the chunk engine on a tier whose disk is a directory of
// the test's and whose flash is a directory in /dev/shm (another file
// system, as a cache must be).

func fastDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("/dev/shm", "flashcache-test-")
	if err != nil {
		t.Fatalf("a cache directory on tmpfs: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// rig is a target on a tier, with fault injectors under both devices.
// The engine's store is the target itself (a chain of one target), or
// with store set, a replicated chain's store inside it.
type rig struct {
	t          *testing.T
	target     string
	cache      string
	store      string // the engine's directory: target, or a chain's store
	mode       Mode
	slow, fast *storage.FaultFS
	tier       *Tier
	tg         *storage.Target
	// twice is what the server's chain view says of chain 7: two or more
	// members serve it.
	twice atomic.Bool
}

func newRig(t *testing.T, size int64) *rig {
	t.Helper()
	r := &rig{t: t, target: t.TempDir(), cache: fastDir(t), slow: storage.NewFaultFS(nil), fast: storage.NewFaultFS(nil), mode: WriteThrough}
	r.store = r.target
	r.open(size)
	t.Cleanup(r.close)
	return r
}

func (r *rig) open(size int64) {
	r.t.Helper()
	if err := r.openErr(size); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) openErr(size int64) error {
	tier, err := Open(Config{Target: r.target, Dir: r.cache, Size: size, Mode: r.mode, Slow: r.slow, Fast: r.fast,
		Logf: r.t.Logf, PromoteWithin: time.Minute})
	if err != nil {
		return err
	}
	tier.SetWriteBackRule(func(chain uint32) bool { return chain == 7 && r.twice.Load() })
	if err := tier.MkdirAll(r.store, 0o755); err != nil {
		return err
	}
	tg, err := storage.OpenTarget(r.store, storage.Options{FS: tier, Logf: r.t.Logf, FinishFormat: true})
	if err != nil {
		tier.Close()
		return err
	}
	r.tier, r.tg = tier, tg
	return nil
}

func (r *rig) close() {
	if r.tg != nil {
		r.tg.Close()
		r.tier.Close()
		r.tg, r.tier = nil, nil
	}
}

// reopenEngine closes the engine's target and opens it again on the same
// tier: the handles it held are gone, as when a server retires them.
func (r *rig) reopenEngine() {
	r.t.Helper()
	r.tg.Close()
	tg, err := storage.OpenTarget(r.store, storage.Options{FS: r.tier, Logf: r.t.Logf, FinishFormat: true})
	if err != nil {
		r.t.Fatal(err)
	}
	r.tg = tg
}

// crash drops the target and the tier without closing the tier, as a
// process killed would.
func (r *rig) crash() {
	r.tg.Close()
	r.tier.halt()
	r.tg, r.tier = nil, nil
}

func (r *rig) write(ino, idx uint64, off int64, b []byte) {
	r.t.Helper()
	if err := r.tg.Write(ino, idx, off, b); err != nil {
		r.t.Fatalf("write %d/%d at %d: %v", ino, idx, off, err)
	}
}

func (r *rig) read(ino, idx uint64, n int) []byte {
	r.t.Helper()
	b := make([]byte, n)
	got, err := r.tg.Read(ino, idx, b, 0)
	if err != nil {
		r.t.Fatalf("read %d/%d: %v", ino, idx, err)
	}
	return b[:got]
}

// waitPromoted waits until the tier has promoted n files in all.
func (r *rig) waitPromoted(n int64) {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for r.tier.Stats().Promoted < n {
		if time.Now().After(deadline) {
			r.t.Fatalf("promoted %d files, want %d: %+v", r.tier.Stats().Promoted, n, r.tier.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// A chunk written before the cache existed is read from the disk, and on
// its second read promoted: from then on the flash answers, so reads
// succeed with the disk's reads failing.
func TestAChunkReadTwiceIsPromotedAndServedFromTheFlash(t *testing.T) {
	r := newRig(t, MinSize)
	r.close()
	// Written without the tier: the cache knows nothing of it.
	plain, err := storage.OpenTarget(r.target, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	data := randBytes(rand.New(rand.NewPCG(1, 2)), 1<<20+4321)
	if err := plain.Write(7, 0, 0, data); err != nil {
		t.Fatal(err)
	}
	plain.Close()
	r.open(MinSize)

	for i := 0; i < 2; i++ {
		if !bytes.Equal(r.read(7, 0, len(data)), data) {
			t.Fatalf("read %d from the disk differs", i+1)
		}
	}
	r.waitPromoted(1) // the data (the engine keeps a small chunk's checksums in memory)
	st := r.tier.Stats()
	if st.Files < 1 || st.Used < int64(len(data)) {
		t.Fatalf("after promotion: %+v", st)
	}
	r.slow.Inject(storage.Fault{Ops: storage.OpRead, Path: "/chunks/", Err: syscall.EIO})
	if !bytes.Equal(r.read(7, 0, len(data)), data) {
		t.Fatal("the promoted chunk read from the flash differs")
	}
	if after := r.tier.Stats(); after.Hits <= st.Hits {
		t.Fatalf("a read with the disk failing counted no hit: %+v", after)
	}
}

// Write-through: every write reaches the disk (the target opened without
// the tier reads it all back), new chunks are cached as they are written
// (reads hit without any promotion), and the copies match.
func TestWriteThroughKeepsTheDiskWholeAndCachesNewChunks(t *testing.T) {
	r := newRig(t, MinSize)
	rnd := rand.New(rand.NewPCG(3, 4))
	want := map[uint64][]byte{}
	for idx := uint64(0); idx < 4; idx++ {
		b := randBytes(rnd, 256<<10)
		r.write(9, idx, 0, b)
		over := randBytes(rnd, 5000)
		r.write(9, idx, 1000, over)
		copy(b[1000:], over)
		want[idx] = b
	}
	if err := r.tg.Sync(9, []uint64{0, 1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	for idx, b := range want {
		if !bytes.Equal(r.read(9, idx, len(b)), b) {
			t.Fatalf("chunk %d read through the tier differs", idx)
		}
	}
	if st := r.tier.Stats(); st.Promoted != 0 || st.Misses != 0 || st.Hits == 0 {
		t.Fatalf("new chunks were not read from the flash: %+v", st)
	}
	r.close()
	plain, err := storage.OpenTarget(r.target, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	for idx, b := range want {
		got := make([]byte, len(b))
		if n, err := plain.Read(9, idx, got, 0); err != nil || !bytes.Equal(got[:n], b) {
			t.Fatalf("chunk %d on the disk alone: %d bytes, %v, equal %v", idx, n, err, bytes.Equal(got[:n], b))
		}
	}
}

// Past the copies a tier keeps open, each call opens the copy it needs:
// written, read, promoted, cut and evicted alike.
func TestCopiesPastTheOpenLimitAreOpenedForEachCall(t *testing.T) {
	r := newRig(t, MinSize)
	r.tier.maxOpen = 1
	rnd := rand.New(rand.NewPCG(13, 14))
	want := map[uint64][]byte{}
	for idx := uint64(0); idx < 6; idx++ {
		want[idx] = randBytes(rnd, 128<<10)
		r.write(19, idx, 0, want[idx])
	}
	if err := r.tg.Truncate(19, 5, 1000); err != nil {
		t.Fatal(err)
	}
	want[5] = want[5][:1000]
	r.slow.Inject(storage.Fault{Ops: storage.OpRead, Path: "/chunks/", Err: syscall.EIO})
	for idx, b := range want {
		if !bytes.Equal(r.read(19, idx, 128<<10), b) {
			t.Fatalf("chunk %d read from the flash differs", idx)
		}
	}
	if n := r.tier.openCopies.Load(); n > 1 {
		t.Fatalf("%d copies held open, limit 1", n)
	}
}

// Written past the cache's size, the copies are evicted least recently
// used first and never pass the size; every chunk still reads right.
func TestEvictionKeepsTheCopiesWithinTheCacheSize(t *testing.T) {
	r := newRig(t, MinSize)
	rnd := rand.New(rand.NewPCG(5, 6))
	want := map[uint64][]byte{}
	for idx := uint64(0); idx < 24; idx++ { // 96 MiB into 64 MiB
		want[idx] = randBytes(rnd, 4<<20)
		r.write(11, idx, 0, want[idx])
		if st := r.tier.Stats(); st.Used > st.Size {
			t.Fatalf("after chunk %d the copies take %d bytes of %d", idx, st.Used, st.Size)
		}
	}
	st := r.tier.Stats()
	if st.Evicted == 0 || st.Used < MinSize/2 {
		t.Fatalf("no eviction, or an emptied cache: %+v", st)
	}
	for idx, b := range want {
		if !bytes.Equal(r.read(11, idx, len(b)), b) {
			t.Fatalf("chunk %d differs after evictions", idx)
		}
	}
}

// A cache device that returns EIO is dropped at once: reads and writes go
// on from the disk without an error, no byte is lost, and Stats says why.
func TestAFailingCacheDeviceIsDroppedWithoutLosingAByte(t *testing.T) {
	r := newRig(t, MinSize)
	rnd := rand.New(rand.NewPCG(7, 8))
	b := randBytes(rnd, 1<<20)
	r.write(13, 0, 0, b)
	r.fast.Inject(storage.Fault{Ops: storage.OpAll, Err: syscall.EIO})
	if !bytes.Equal(r.read(13, 0, len(b)), b) {
		t.Fatal("read with the cache device failing differs")
	}
	more := randBytes(rnd, 8192)
	r.write(13, 0, 4096, more)
	copy(b[4096:], more)
	if err := r.tg.Sync(13, []uint64{0}); err != nil {
		t.Fatalf("sync with the cache device failed: %v", err)
	}
	if !bytes.Equal(r.read(13, 0, len(b)), b) {
		t.Fatal("read after a write with the cache device failing differs")
	}
	if st := r.tier.Stats(); !strings.Contains(st.Failed, "input/output error") || st.Files != 0 {
		t.Fatalf("stats of a failed cache device: %+v", st)
	}
}

// A cache closed cleanly keeps its copies for the next start (reads hit at
// once); one whose server was killed is emptied, since its copies may be
// older than the disk.
func TestACacheKeepsItsCopiesOnlyAfterACleanClose(t *testing.T) {
	r := newRig(t, MinSize)
	b := randBytes(rand.New(rand.NewPCG(9, 10)), 512<<10)
	r.write(15, 0, 0, b)
	r.close()
	r.open(MinSize)
	if st := r.tier.Stats(); st.Files != 2 {
		t.Fatalf("after a clean close the cache holds %d files, want the chunk and its checksums", st.Files)
	}
	if !bytes.Equal(r.read(15, 0, len(b)), b) || r.tier.Stats().Hits == 0 {
		t.Fatalf("a kept copy: %+v", r.tier.Stats())
	}
	r.crash()
	r.open(MinSize)
	if st := r.tier.Stats(); st.Files != 0 {
		t.Fatalf("after a crash the cache holds %d files, want none", st.Files)
	}
	if !bytes.Equal(r.read(15, 0, len(b)), b) {
		t.Fatal("the chunk read from the disk after a crash differs")
	}
}

// Bad configurations are refused with the reason.
func TestABadCacheIsRefusedWithTheReason(t *testing.T) {
	target := t.TempDir()
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Target: target, Dir: t.TempDir(), Size: 1 << 30, Mode: WriteThrough}, "same file system"},
		{Config{Target: target, Dir: fastDir(t), Size: 1 << 20, Mode: WriteThrough}, "smaller than one chunk"},
	} {
		if _, err := Open(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%+v): %v, want an error with %q", c.cfg, err, c.want)
		}
	}
	if _, err := ParseMode("writeahead"); err == nil || !strings.Contains(err.Error(), `"writeahead"`) {
		t.Errorf("ParseMode(writeahead): %v", err)
	}
}

// Writers, readers and promotions at once: every read returns what the
// last write left, never a copy a promotion took before a write.
func TestPromotionsRacingWritesNeverServeOldBytes(t *testing.T) {
	r := newRig(t, MinSize)
	r.tier.cfg.PromoteWithin = time.Hour
	const chunks, size = 8, 64 << 10
	var mu [chunks]sync.Mutex
	want := make([][]byte, chunks)
	for i := range want {
		want[i] = make([]byte, size)
		r.write(17, uint64(i), 0, want[i])
	}
	// Evict everything so that reads promote again and again.
	r.tier.cfg.Size = MinSize
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(w), 11))
			for op := 0; op < 400; op++ {
				i := rnd.IntN(chunks)
				mu[i].Lock()
				if rnd.IntN(3) == 0 {
					b := randBytes(rnd, 4096)
					off := int64(rnd.IntN(size/4096)) * 4096
					if err := r.tg.Write(17, uint64(i), off, b); err != nil {
						t.Error(err)
					}
					copy(want[i][off:], b)
				} else {
					got := make([]byte, size)
					if n, err := r.tg.Read(17, uint64(i), got, 0); err != nil || !bytes.Equal(got[:n], want[i]) {
						t.Errorf("chunk %d: read %d bytes, %v; equal %v", i, n, err, bytes.Equal(got[:n], want[i]))
					}
				}
				if rnd.IntN(50) == 0 {
					if e := r.tier.lookup(chunkRel(17, uint64(i))); e != nil {
						r.tier.drop(e) // evicted: the next reads promote it again
					}
				}
				mu[i].Unlock()
			}
		}()
	}
	wg.Wait()
	if st := r.tier.Stats(); st.Promoted == 0 {
		t.Fatalf("no promotion happened: %+v", st)
	}
}

// chunkRel is the path of a chunk's data file relative to its target.
func chunkRel(ino, idx uint64) string { return fmt.Sprintf("chunks/%02x/%d/%d", ino%256, ino, idx) }

// A target named by a relative path is cached all the same: the engine
// opens its files by absolute paths.
func TestATargetGivenByARelativePathIsCached(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.Mkdir("target", 0o755); err != nil {
		t.Fatal(err)
	}
	tier, err := Open(Config{Target: "target", Dir: fastDir(t), Size: MinSize, Mode: WriteThrough, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer tier.Close()
	tg, err := storage.OpenTarget(dir+"/target", storage.Options{FS: tier})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	if err := tg.Write(1, 0, 0, []byte("cached")); err != nil {
		t.Fatal(err)
	}
	if st := tier.Stats(); st.Files == 0 || st.Used == 0 {
		t.Fatalf("a chunk written to a target named relatively was not cached: %+v", st)
	}
}
