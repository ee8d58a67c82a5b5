package storage

import (
	"bytes"
	"os"
	"testing"

	"tandemfs/internal/pagecache"
)

func TestBulkWritesReadBackAndVerifyLikeAnyOther(t *testing.T) {
	t.Run("drop-behind", func(t *testing.T) { bulkWritesReadBack(t, openTestTarget(t, Options{})) })
	t.Run("O_DIRECT", func(t *testing.T) {
		tg := openTestTarget(t, Options{})
		tg.noDropBehind.Store(true) // as on a kernel without RWF_DONTCACHE
		bulkWritesReadBack(t, tg)
	})
}

func bulkWritesReadBack(t *testing.T, tg *Target) {
	// Cached pages of the range, from a buffered write and a read, must
	// not hide what the bulk write puts on the disk.
	if err := tg.Write(9, 0, 4096, bytes.Repeat([]byte{'x'}, 10_000)); err != nil {
		t.Fatal(err)
	}
	if _, err := tg.Read(9, 0, make([]byte, 20_000), 0); err != nil {
		t.Fatal(err)
	}
	whole := pattern(9, 1<<20)
	if err := tg.WriteUncached(9, 0, 0, whole[:256<<10]); err != nil { // aligned: drop-behind or O_DIRECT
		t.Fatal(err)
	}
	if err := tg.WriteUncached(9, 0, 256<<10, whole[256<<10:]); err != nil {
		t.Fatal(err)
	}
	tail := pattern(10, 5000) // small and unaligned: buffered
	if err := tg.WriteUncached(9, 0, 1<<20, tail); err != nil {
		t.Fatal(err)
	}
	want := append(append([]byte{}, whole...), tail...)
	got := make([]byte, len(want))
	if n, err := tg.Read(9, 0, got, 0); err != nil || n != len(want) || !bytes.Equal(got, want) {
		t.Fatalf("read back %d bytes (%v), equal %v", n, err, bytes.Equal(got, want))
	}
	if bad, _, err := tg.VerifyChunk(9, 0, nil); err != nil || len(bad) != 0 {
		t.Fatalf("bad blocks %v after bulk writes (%v)", bad, err)
	}
}

func TestOnlyLargeAlignedWritesQualifyForODirect(t *testing.T) {
	for _, c := range []struct {
		off  int64
		n    int
		want bool
	}{{0, 1 << 20, true}, {4096, 64 << 10, true}, {0, 32 << 10, false}, {100, 1 << 20, false}, {0, 1<<20 + 1, false}} {
		if got := canWriteDirect(c.off, c.n); got != c.want {
			t.Errorf("canWriteDirect(%d, %d) = %v", c.off, c.n, got)
		}
	}
}

func TestWriteDirectUsesAnODirectDescriptor(t *testing.T) {
	f, err := OSFS{}.OpenFile(t.TempDir()+"/d", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data := pattern(3, 128<<10)
	_, err = f.(directWriter).WriteDirect(data[1:], 4096)
	if of := f.(*osFile); of.directErr != nil {
		t.Skipf("the file system of %s has no O_DIRECT: %v", of.Name(), of.directErr)
	}
	if err == nil {
		// An unaligned length must be refused by the kernel, or the
		// descriptor is not O_DIRECT at all.
		t.Fatal("an unaligned O_DIRECT write succeeded")
	}
	if _, err := f.(directWriter).WriteDirect(data, 4096); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if _, err := f.ReadAt(got, 4096); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back through the buffered descriptor: equal %v (%v)", bytes.Equal(got, data), err)
	}
}

// Where the kernel cannot drop behind, bulk writes bypass the page cache
// with O_DIRECT, also on a target over the fault-injecting file system
// that the failure tests run servers on (without faults it must behave as
// the real one), and the scrub's cache drop and the early writeback reach
// the real file through it too (dropbehind_test.go: where it can).
func TestTheFaultInjectingFileSystemKeepsTheRealFilesCachingBehaviour(t *testing.T) {
	onEachFS(t, func(t *testing.T, tg *Target) {
		tg.noDropBehind.Store(true)
		if err := tg.WriteUncached(5, 0, 0, pattern(5, 1<<20)); err != nil {
			t.Fatal(err)
		}
		path := tg.dataPath(5, 0)
		if n := residentPages(t, path); n != 0 {
			t.Errorf("after a bulk write %d pages of %s are cached; want none (O_DIRECT)", n, path)
		}

		if err := tg.Write(6, 0, 0, pattern(6, 1<<20)); err != nil { // buffered
			t.Fatal(err)
		}
		path = tg.dataPath(6, 0)
		if n := residentPages(t, path); n == 0 {
			t.Fatalf("a buffered write left no pages of %s cached", path)
		}
		err := tg.withChunk(chunkKey{6, 0}, false, true, func(ch *chunk) error {
			if _, ok := ch.data.(writebackStarter); !ok {
				t.Errorf("the data file (%T) cannot start its writeback early", ch.data)
			}
			if err := ch.data.Sync(); err != nil {
				return err
			}
			dropCache(ch.data)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if n := residentPages(t, path); n != 0 {
			t.Errorf("after dropping the cache %d pages of %s are still cached", n, path)
		}
	})
}

// residentPages counts the pages of the file at path in the page cache.
func residentPages(t *testing.T, path string) int {
	t.Helper()
	n, err := pagecache.Resident(path)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
