package storage

import (
	"bytes"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"tandemfs/internal/pagecache"
)

// skipWithoutDropBehind skips the test where the kernel or the file system
// of dir cannot write with RWF_DONTCACHE.
func skipWithoutDropBehind(t *testing.T, dir string) {
	t.Helper()
	can, err := pagecache.CanDropBehind(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !can {
		t.Skipf("no RWF_DONTCACHE on %s", dir)
	}
}

// waitUncached waits until none of the pages of the file at path is in
// the page cache: the kernel drops a drop-behind write's pages when their
// writeback ends, which may come a moment after fsync returns.
func waitUncached(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for n := residentPages(t, path); n != 0; n = residentPages(t, path) {
		if time.Now().After(deadline) {
			t.Fatalf("%d pages of %s are still cached after its writes reached the disk; want none", n, path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A client's large write and a member's copy both leave the page cache
// once they are on the disk; a small write stays cached.
// Also over the fault-injecting file system the failure tests use.
func TestLargeWritesLeaveThePageCacheOnceOnTheDisk(t *testing.T) {
	onEachFS(t, func(t *testing.T, tg *Target) {
		skipWithoutDropBehind(t, tg.dir)
		large := pattern(1, 1<<20)
		mustWrite(t, tg, 1, 0, 0, large)                                      // a client's write to the head
		if err := tg.WriteUncached(2, 0, 4096, large[:256<<10]); err != nil { // a member's copy
			t.Fatal(err)
		}
		if err := tg.Write(3, 0, 100, large[:100<<10]); err != nil { // unaligned
			t.Fatal(err)
		}
		small := pattern(4, 4096)
		mustWrite(t, tg, 4, 0, 0, small)

		if err := tg.Sync(1, []uint64{0}); err != nil {
			t.Fatal(err)
		}
		if err := tg.Sync(2, []uint64{0}); err != nil {
			t.Fatal(err)
		}
		// The kernel drops what it can of an unaligned write's pages
		// (16 of its 26 stayed cached here), so chunk 3 is not checked.
		for _, ino := range []uint64{1, 2} {
			waitUncached(t, tg.dataPath(ino, 0))
		}
		if n := residentPages(t, tg.dataPath(4, 0)); n != 1 {
			t.Errorf("%d pages of a chunk written with 4 KiB are cached, want 1", n)
		}
		if tg.noDropBehind.Load() {
			t.Error("the target gave up writing with RWF_DONTCACHE")
		}
		if got := readAll(t, tg, 1, 0, 2<<20); !bytes.Equal(got, large) {
			t.Fatal("the dropped-behind chunk reads back wrong")
		}
		if bad, _, err := tg.VerifyChunk(3, 0, nil); err != nil || len(bad) != 0 {
			t.Fatalf("bad blocks %v in the unaligned chunk (%v)", bad, err)
		}
	})
}

// noDropBehindFS is the real file system on a kernel without
// RWF_DONTCACHE: its files refuse such writes as pwritev2 there does.
type noDropBehindFS struct{ OSFS }

type noDropBehindFile struct{ *osFile }

func (noDropBehindFile) WriteDropBehind([]byte, int64) (int, error) { return 0, unix.EOPNOTSUPP }

func (fs noDropBehindFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := fs.OSFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return noDropBehindFile{f.(*osFile)}, nil
}

// Where the kernel refuses RWF_DONTCACHE, a target says so once and goes
// on as before: copies it keeps for durability go with O_DIRECT, clients'
// writes through the page cache.
func TestATargetThatCannotDropBehindSaysSoOnceAndFallsBack(t *testing.T) {
	var log logLines
	for _, fs := range []FS{noDropBehindFS{}, NewFaultFS(noDropBehindFS{})} {
		tg := openTestTarget(t, Options{FS: fs, Logf: log.logf})
		large := pattern(5, 1<<20)
		for ino := uint64(1); ino <= 2; ino++ {
			if err := tg.WriteUncached(ino, 0, 0, large); err != nil {
				t.Fatal(err)
			}
			if n := residentPages(t, tg.dataPath(ino, 0)); n != 0 {
				t.Errorf("%d pages of a member's copy are cached; want none (O_DIRECT)", n)
			}
		}
		mustWrite(t, tg, 3, 0, 0, large)
		if n := residentPages(t, tg.dataPath(3, 0)); n == 0 {
			t.Error("a client's large write left no page cached; it should fill the page cache where it cannot drop behind")
		}
		for ino := uint64(1); ino <= 3; ino++ {
			if got := readAll(t, tg, ino, 0, 2<<20); !bytes.Equal(got, large) {
				t.Fatalf("chunk %d reads back wrong", ino)
			}
		}
	}
	if n := log.count("RWF_DONTCACHE"); n != 2 {
		t.Errorf("%d log lines about RWF_DONTCACHE from two targets, want one each", n)
	}
}
