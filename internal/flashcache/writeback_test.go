package flashcache

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"tandemfs/internal/storage"
)

// Write-back, specified on the chunk engine over a tier: the engine's
// store is chain 7's inside the target (chains/7), a replicated chain's,
// whose chunks may be written back while two members serve it.

func newWBRig(t *testing.T, size int64) *rig {
	t.Helper()
	r := &rig{t: t, target: t.TempDir(), cache: fastDir(t), slow: storage.NewFaultFS(nil), fast: storage.NewFaultFS(nil), mode: WriteBack}
	r.store = filepath.Join(r.target, "chains", "7")
	r.twice.Store(true)
	r.open(size)
	t.Cleanup(r.close)
	return r
}

// diskPath is the disk's file of chunk ino/idx of the rig's store.
func (r *rig) diskPath(ino, idx uint64) string {
	return filepath.Join(r.store, "chunks", fmt.Sprintf("%02x", ino&0xff), fmt.Sprint(ino), fmt.Sprint(idx))
}

// onDisk is what the disk holds of chunk ino/idx (nil: no file).
func (r *rig) onDisk(ino, idx uint64) []byte {
	r.t.Helper()
	b, err := os.ReadFile(r.diskPath(ino, idx))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		r.t.Fatal(err)
	}
	return b
}

// holdDestages holds the destager back until the returned func is
// called (a crash meanwhile leaves what it held dirty).
func (r *rig) holdDestages() (release func()) {
	ch := make(chan struct{})
	r.tier.hold.Store(&ch)
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

func (r *rig) sync(ino uint64, idx ...uint64) {
	r.t.Helper()
	if err := r.tg.Sync(ino, idx); err != nil {
		r.t.Fatalf("sync %d %v: %v", ino, idx, err)
	}
}

// wantChunks checks that the chunks of file 1 read back as want, by
// index (when: the moment, for the failure message).
func (r *rig) wantChunks(want map[uint64][]byte, when string) {
	r.t.Helper()
	for idx, w := range want {
		if got := r.read(1, idx, len(w)); !bytes.Equal(got, w) {
			r.t.Fatalf("chunk %d %s reads back other bytes", idx, when)
		}
	}
}

// wantOnDisk checks that the disk holds the chunks of file 1 as want,
// by index.
func (r *rig) wantOnDisk(want map[uint64][]byte) {
	r.t.Helper()
	for idx, w := range want {
		if got := r.onDisk(1, idx); !bytes.Equal(got, w) {
			r.t.Fatalf("chunk %d: the disk holds %d bytes after the destage, want %d", idx, len(got), len(w))
		}
	}
}

// waitDestaged waits until nothing is dirty.
func (r *rig) waitDestaged() {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for r.tier.Stats().Dirty > 0 || r.markers() > 0 {
		if time.Now().After(deadline) {
			r.t.Fatalf("still dirty after 10 s: %+v, %d markers", r.tier.Stats(), r.markers())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (r *rig) markers() int {
	names, _ := os.ReadDir(filepath.Join(r.cache, dirtyDir))
	return len(names)
}

func TestAWriteBackIsOnTheFlashWhenAcknowledgedAndOnTheDiskOnceDestaged(t *testing.T) {
	r := newWBRig(t, 256<<20)
	release := r.holdDestages()
	want := randBytes(rand.New(rand.NewPCG(1, 1)), 300<<10)
	r.write(1, 0, 0, want)
	r.sync(1, 0)
	if got := r.onDisk(1, 0); len(got) != 0 {
		t.Fatalf("the disk holds %d bytes of a chunk written back and not destaged", len(got))
	}
	if got := r.read(1, 0, len(want)); !bytes.Equal(got, want) {
		t.Fatal("a chunk written back reads back other bytes")
	}
	if st := r.tier.Stats(); st.Dirty < int64(len(want)) || r.markers() < 1 {
		t.Fatalf("after a write-back: %+v, %d markers; want the chunk dirty", st, r.markers())
	}
	release()
	r.waitDestaged()
	if got := r.onDisk(1, 0); !bytes.Equal(got, want) {
		t.Fatalf("the disk holds %d bytes after the destage, want the %d written", len(got), len(want))
	}
	if st := r.tier.Stats(); st.Destaged < int64(len(want)) {
		t.Fatalf("destaged %d bytes, want at least %d", st.Destaged, len(want))
	}
}

// Only chains that two members serve write back: a chain down to one
// serving member, and a chain of one target (an erasure-coded shard's),
// write through.
func TestWritesGoThroughWithoutASecondServingMember(t *testing.T) {
	r := newWBRig(t, 256<<20)
	r.twice.Store(false)
	want := randBytes(rand.New(rand.NewPCG(2, 2)), 100<<10)
	r.write(1, 0, 0, want)
	r.sync(1, 0)
	if got := r.onDisk(1, 0); !bytes.Equal(got, want) || r.tier.Stats().Dirty != 0 {
		t.Fatalf("chain 7 with one serving member: the disk holds %d bytes, %d dirty; want it written through", len(got), r.tier.Stats().Dirty)
	}

	own := &rig{t: t, target: t.TempDir(), cache: fastDir(t), slow: storage.NewFaultFS(nil), fast: storage.NewFaultFS(nil), mode: WriteBack}
	own.store = own.target
	own.twice.Store(true)
	own.open(256 << 20)
	defer own.close()
	own.write(1, 0, 0, want)
	own.sync(1, 0)
	if got := own.onDisk(1, 0); !bytes.Equal(got, want) || own.tier.Stats().Dirty != 0 {
		t.Fatalf("a chain of one target: the disk holds %d bytes, %d dirty; want it written through", len(got), own.tier.Stats().Dirty)
	}
}

// kill -9 with dirty chunks: the next start takes them back from the
// flash (their markers), reads them from there and destages them.
func TestDirtyChunksSurviveACrash(t *testing.T) {
	r := newWBRig(t, 256<<20)
	release := r.holdDestages()
	rnd := rand.New(rand.NewPCG(3, 3))
	want := map[uint64][]byte{}
	for idx := uint64(0); idx < 5; idx++ {
		want[idx] = randBytes(rnd, 64<<10+int(idx)*1000)
		r.write(1, idx, 0, want[idx])
	}
	r.sync(1, 0, 1, 2, 3, 4)
	r.crash()
	release()
	r.open(256 << 20)
	r.wantChunks(want, "after the crash")
	r.waitDestaged()
	r.wantOnDisk(want)
}

// A clean stop keeps the dirty chunks on the flash; a start in
// write-through mode destages them before it serves, and a start without
// the cache is refused while they are not on the disk.
func TestAStartInWriteThroughModeDestagesFirst(t *testing.T) {
	r := newWBRig(t, 256<<20)
	release := r.holdDestages()
	want := randBytes(rand.New(rand.NewPCG(4, 4)), 200<<10)
	r.write(1, 0, 0, want)
	r.sync(1, 0)
	r.close()
	release()
	err := CheckUncached(r.target, nil)
	if err == nil || !strings.Contains(err.Error(), r.cache) {
		t.Fatalf("a target with chunks written back, started without its cache: %v; want a refusal naming the cache", err)
	}
	r.mode = WriteThrough
	r.open(256 << 20)
	if got := r.onDisk(1, 0); !bytes.Equal(got, want) {
		t.Fatalf("after a start in write-through mode the disk holds %d bytes, want the %d written back", len(got), len(want))
	}
	if st := r.tier.Stats(); st.Dirty != 0 || r.markers() != 0 {
		t.Fatalf("after a start in write-through mode: %+v, %d markers", st, r.markers())
	}
	if err := CheckUncached(r.target, nil); err != nil {
		t.Fatalf("after the destage the target still needs its cache: %v", err)
	}
}

// An overwrite that comes while its chunk is being destaged is destaged
// after it: the disk ends with the newest bytes.
func TestAnOverwriteDuringADestageIsNotLeftBehind(t *testing.T) {
	r := newWBRig(t, 256<<20)
	first := bytes.Repeat([]byte{1}, 256<<10)
	second := bytes.Repeat([]byte{2}, 256<<10)
	overwrote := make(chan error, 1)
	once := false
	r.slow.Inject(storage.Fault{Ops: storage.OpWrite, Path: "/chains/7/chunks/", Hook: func(storage.Op, string) {
		if !once {
			once = true
			err := r.tg.Write(1, 0, 0, second)
			if err == nil {
				err = r.tg.Sync(1, []uint64{0})
			}
			overwrote <- err
		}
	}})
	r.write(1, 0, 0, first)
	r.sync(1, 0)
	if err := <-overwrote; err != nil {
		t.Fatal(err)
	}
	r.waitDestaged()
	if got := r.onDisk(1, 0); !bytes.Equal(got, second) {
		t.Fatalf("the disk holds the older bytes (%d of 1s) after an overwrite during the destage", bytes.Count(got, []byte{1}))
	}
}

// A truncate written back is destaged as a cut: growing the chunk again
// shows zeros on the disk too, not the bytes cut off.
func TestATruncateWrittenBackCutsTheDisk(t *testing.T) {
	r := newWBRig(t, 256<<20)
	r.write(1, 0, 0, bytes.Repeat([]byte{7}, 64<<10))
	r.sync(1, 0)
	r.waitDestaged()
	release := r.holdDestages()
	for _, size := range []int64{10, 64 << 10} {
		if err := r.tg.Truncate(1, 0, size); err != nil {
			t.Fatal(err)
		}
	}
	r.sync(1, 0)
	release()
	r.waitDestaged()
	want := append(bytes.Repeat([]byte{7}, 10), make([]byte, 64<<10-10)...)
	if got := r.onDisk(1, 0); !bytes.Equal(got, want) {
		t.Fatalf("after a cut to 10 bytes and a growth, the disk holds %d bytes, %d of them 7s", len(got), bytes.Count(got, []byte{7}))
	}
}

// A chunk deleted while dirty is not brought back by its destage.
func TestADirtyChunkDeletedStaysDeleted(t *testing.T) {
	r := newWBRig(t, 256<<20)
	release := r.holdDestages()
	r.write(1, 0, 0, bytes.Repeat([]byte{9}, 64<<10))
	r.sync(1, 0)
	if err := r.tg.Delete(1, 0); err != nil {
		t.Fatal(err)
	}
	release()
	time.Sleep(100 * time.Millisecond)
	if st := r.tier.Stats(); st.Dirty != 0 || r.markers() != 0 {
		t.Fatalf("after deleting a dirty chunk: %+v, %d markers", st, r.markers())
	}
	if _, err := os.Stat(r.diskPath(1, 0)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the deleted chunk's file on the disk: %v", err)
	}
}

// Eviction passes dirty copies over, and past half of the cache dirty
// the writes go through: nothing written back is lost to a full cache.
func TestEvictionNeverDropsDirtyCopies(t *testing.T) {
	r := newWBRig(t, MinSize)
	release := r.holdDestages() // the destager falls behind
	defer release()
	rnd := rand.New(rand.NewPCG(5, 5))
	want := map[uint64][]byte{}
	var most int64
	for idx := uint64(0); idx < 80; idx++ { // 80 MiB through a 64 MiB cache
		want[idx] = randBytes(rnd, 1<<20)
		r.write(1, idx, 0, want[idx])
		r.sync(1, idx)
		most = max(most, r.tier.Stats().Dirty)
	}
	st := r.tier.Stats()
	if most > MinSize/2+2<<20 || st.Evicted == 0 {
		t.Fatalf("80 MiB written back through a %d-byte cache over a slow disk: at most %d bytes dirty, %+v; want at most half dirty, clean copies evicted", MinSize, most, st)
	}
	t.Logf("at most %d bytes dirty; %+v", most, st)
	r.wantChunks(want, "through the cache")
	release()
	r.waitDestaged()
	r.wantOnDisk(want)
}

// failHoldingADirtyChunk writes chunk 1 of chain 1 (bytes of 3) and lets
// it be destaged, so that it is clean on the disk; then, with destaging
// held (until the returned release), writes chunk 0 (bytes of 4), dirty
// on the cache device only, and makes that device fail every call.
func (r *rig) failHoldingADirtyChunk() (release func()) {
	r.write(1, 1, 0, bytes.Repeat([]byte{3}, 64<<10))
	r.sync(1, 1)
	r.waitDestaged()
	release = r.holdDestages()
	r.write(1, 0, 0, bytes.Repeat([]byte{4}, 64<<10))
	r.sync(1, 0)
	r.fast.Inject(storage.Fault{Ops: storage.OpAll, Err: syscall.EIO})
	return release
}

// The cache device failing while it holds dirty chunks: the disk's older
// bytes are never served (every call fails with EIO, so the server
// reports the target failed), and at the next start, with a new (empty)
// cache device, the chunks are moved aside and held lost for the chain's
// resync to copy back; the new device writing back meanwhile keeps the
// target's need for its cache after the resync.
func TestACacheDeviceFailingWithDirtyChunksTakesTheTargetOut(t *testing.T) {
	r := newWBRig(t, 256<<20)
	release := r.failHoldingADirtyChunk()
	b := make([]byte, 64<<10)
	if _, err := r.tg.Read(1, 0, b, 0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("reading a dirty chunk with the cache device failing: %v; want EIO", err)
	}
	if _, err := r.tg.Read(1, 1, b, 0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("reading a clean chunk of a target whose cache lost dirty chunks: %v; want EIO", err)
	}
	if st := r.tier.Stats(); !strings.Contains(st.Failed, "not yet on the disk") {
		t.Fatalf("stats after the loss: %+v", st)
	}
	r.crash()
	release()
	r.fast.Clear()
	if err := os.RemoveAll(r.cache); err != nil { // a new device
		t.Fatal(err)
	}
	r.open(256 << 20)
	if _, err := os.Stat(r.diskPath(1, 0)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the chunk the lost cache held dirty is still in the target: %v", err)
	}
	rel, _ := filepath.Rel(r.target, r.diskPath(1, 0))
	if _, err := os.Stat(filepath.Join(r.target, lostDir, rel)); err != nil {
		t.Fatalf("the stale chunk was not set aside: %v", err)
	}
	if got := r.onDisk(1, 1); !bytes.Equal(got, bytes.Repeat([]byte{3}, 64<<10)) {
		t.Fatal("the clean chunk changed")
	}
	if lost, err := r.tier.LostChunks(); err != nil || !slices.Contains(lost, rel) {
		t.Fatalf("the chunks held lost at the start: %q, %v; want %s", lost, err, rel)
	}
	// The new device writes back while the chains resync: the target
	// keeps needing it to start once they are done.
	release = r.holdDestages()
	defer release()
	r.write(1, 2, 0, bytes.Repeat([]byte{7}, 64<<10))
	r.sync(1, 2)
	if err := r.tier.ResyncedLost(); err != nil {
		t.Fatal(err)
	}
	if CheckUncached(r.target, nil) == nil {
		t.Fatal("a start without the new cache, holding a dirty chunk, would be accepted after the resync")
	}
	if st := r.tier.Stats(); st.Failed != "" {
		t.Fatalf("the new device is shown failed: %q", st.Failed)
	}
}

// The cache device failing with dirty chunks, recovered without a
// restart: once the server dropped its handles, RecoverLost sets the dirty
// chunks aside and names them, and the target serves from its disk again;
// after the chains copied them back (ResyncedLost) the target no longer
// needs its cache to start, and the failed device's copies are never taken
// back, even when the device returns with its markers.
func TestACacheDeviceLostWithDirtyChunksIsRecoveredInPlace(t *testing.T) {
	r := newWBRig(t, 256<<20)
	release := r.failHoldingADirtyChunk()
	defer release()
	clean := bytes.Repeat([]byte{3}, 64<<10)
	b := make([]byte, 64<<10)
	if _, err := r.tg.Read(1, 1, b, 0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("reading a clean chunk before the recovery: %v; want EIO", err)
	}

	lost, ok, err := r.tier.RecoverLost()
	if err != nil || !ok {
		t.Fatalf("RecoverLost: %v, %v", ok, err)
	}
	rel, _ := filepath.Rel(r.target, r.diskPath(1, 0))
	if !slices.Contains(lost, rel) || !slices.Contains(lost, rel+".sum") {
		t.Fatalf("lost chunks %q; want %s and its checksums", lost, rel)
	}
	if _, err := os.Stat(r.diskPath(1, 0)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the chunk the lost cache held dirty is still in the target: %v", err)
	}
	if got, err := r.tier.LostChunks(); err != nil || !slices.Equal(got, lost) {
		t.Fatalf("LostChunks: %q, %v; want %q", got, err, lost)
	}
	if _, ok, _ := r.tier.RecoverLost(); ok {
		t.Fatal("a second RecoverLost found a loss to recover from")
	}
	r.reopenEngine() // the server retires its handles
	if got := r.read(1, 1, len(clean)); !bytes.Equal(got, clean) {
		t.Fatal("the clean chunk reads back other bytes after the recovery")
	}
	if got := r.read(1, 0, 64<<10); len(got) != 0 {
		t.Fatalf("the set-aside chunk reads %d bytes; want none (the resync copies it)", len(got))
	}
	resynced := bytes.Repeat([]byte{5}, 64<<10) // what the chain's resync writes
	r.write(1, 0, 0, resynced)
	r.sync(1, 0)
	if got := r.onDisk(1, 0); !bytes.Equal(got, resynced) {
		t.Fatal("a write after the recovery is not on the disk when synced (write-through)")
	}
	if err := r.tier.ResyncedLost(); err != nil {
		t.Fatal(err)
	}
	if st := r.tier.Stats(); !strings.Contains(st.Failed, "copied back") {
		t.Fatalf("stats after the resync: %q", st.Failed)
	}
	if err := CheckUncached(r.target, nil); err != nil {
		t.Fatalf("a start without the cache after the resync: %v", err)
	}

	r.crash()
	release()
	r.fast.Clear() // the old device returns, its dirty copy and marker on it
	r.open(256 << 20)
	time.Sleep(100 * time.Millisecond) // a destager would have begun
	if got := r.read(1, 0, len(resynced)); !bytes.Equal(got, resynced) {
		t.Fatal("the returning device's old dirty copy was taken back")
	}
	if got := r.onDisk(1, 0); !bytes.Equal(got, resynced) {
		t.Fatal("the returning device's old dirty copy was destaged")
	}
	if _, err := os.Stat(filepath.Join(r.target, staleListName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the emptied lost list outlived the start that emptied the cache: %v", err)
	}
}

// A target whose written-back cache is gone (a new, empty device at its
// path) is refused: its disk may miss acknowledged writes.
func TestATargetWhoseWriteBackCacheIsGoneIsRefused(t *testing.T) {
	r := newWBRig(t, 256<<20)
	release := r.holdDestages()
	r.write(1, 0, 0, bytes.Repeat([]byte{5}, 64<<10))
	r.sync(1, 0)
	r.crash()
	release()
	if err := os.RemoveAll(r.cache); err != nil {
		t.Fatal(err)
	}
	err := r.openErr(256 << 20)
	if err == nil || !strings.Contains(err.Error(), "holds no cache now") {
		t.Fatalf("a start with the written-back cache gone: %v; want a refusal", err)
	}
}

// A disk that fails the destager's writes is met by the next write, which
// goes through (EIO to the engine, which reports the target failed); what
// was written back before still reads from the flash.
func TestADiskFailingUnderWriteBackIsMetByTheNextWrite(t *testing.T) {
	r := newWBRig(t, 256<<20)
	want := bytes.Repeat([]byte{6}, 64<<10)
	r.slow.Inject(storage.Fault{Ops: storage.OpWrite | storage.OpTruncate, Path: "/chains/7/chunks/", Err: syscall.EIO})
	r.write(1, 0, 0, want)
	r.sync(1, 0)
	deadline := time.Now().Add(5 * time.Second)
	for !r.tier.diskFailing.Load() {
		if time.Now().After(deadline) {
			t.Fatal("no destage failed in 5 s with the disk failing every write")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := r.tg.Write(1, 1, 0, want); !errors.Is(err, syscall.EIO) {
		t.Fatalf("a write after a destage failed on the disk: %v; want the disk's EIO", err)
	}
	if got := r.read(1, 0, len(want)); !bytes.Equal(got, want) {
		t.Fatal("the chunk written back before reads back other bytes")
	}
}
