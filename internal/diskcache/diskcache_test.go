package diskcache

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

func data(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func open(t *testing.T, dir string, size int64) *Cache {
	t.Helper()
	c, err := Open(dir, size)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func get(c *Cache, k Key, off uint64, n int) []byte {
	b := make([]byte, n)
	if !c.Get(k, off, b) {
		return nil
	}
	return b
}

func TestBlocksReadAtAVersionAreAnsweredForThatVersionOnly(t *testing.T) {
	c := open(t, t.TempDir(), 64<<20)
	defer c.Close()
	size := uint64(3*BlockSize + 1000) // the last block is short
	v1 := Key{Ino: 7, Version: 10, Size: size, Mtime: 111}
	file := data(1, int(size))
	c.Put(v1, 0, file)
	if got := get(c, v1, 0, int(size)); !bytes.Equal(got, file) {
		t.Fatal("the whole file, stored, is not answered")
	}
	if got := get(c, v1, BlockSize+5, 300); !bytes.Equal(got, file[BlockSize+5:BlockSize+305]) {
		t.Fatal("a piece inside a block is not answered")
	}
	for _, other := range []Key{{7, 11, size, 111}, {7, 10, size, 112}, {7, 10, size + 1, 111}, {8, 10, size, 111}} {
		if get(c, other, 0, 100) != nil {
			t.Fatalf("version %+v answered with the blocks of %+v", other, v1)
		}
	}
	// A newer version replaces the file's blocks; an older one is not taken.
	v2 := v1
	v2.Version = 12
	c.Put(v2, 0, data(2, BlockSize))
	if get(c, v1, 0, 100) != nil {
		t.Fatal("the old version's blocks are answered after a newer one was stored")
	}
	c.Put(v1, 0, file)
	if get(c, v1, 0, 100) != nil || get(c, v2, 0, 100) == nil {
		t.Fatal("a store of an older version replaced the newer one")
	}
}

func TestOnlyWholeBlocksAreStored(t *testing.T) {
	c := open(t, t.TempDir(), 64<<20)
	defer c.Close()
	k := Key{Ino: 1, Version: 1, Size: 4 * BlockSize}
	file := data(3, 4*BlockSize)
	c.Put(k, 100, file[100:2*BlockSize+50]) // covers block 1 whole only
	if get(c, k, BlockSize, BlockSize) == nil {
		t.Fatal("the block covered whole was not stored")
	}
	if get(c, k, 0, 4096) != nil || get(c, k, 2*BlockSize, 10) != nil {
		t.Fatal("a block covered in part is answered")
	}
	if get(c, k, BlockSize, BlockSize+1) != nil {
		t.Fatal("a read reaching a missing block is answered")
	}
}

func TestTheCacheStaysWithinItsSize(t *testing.T) {
	c := open(t, t.TempDir(), MinSize)
	defer c.Close()
	for ino := uint64(1); ino <= 40; ino++ {
		k := Key{Ino: ino, Version: 1, Size: 2 * BlockSize}
		c.Put(k, 0, data(ino, 2*BlockSize))
		if st := c.Stats(); st.Used > MinSize {
			t.Fatalf("after %d files: %+v", ino, st)
		}
	}
	if get(c, Key{Ino: 40, Version: 1, Size: 2 * BlockSize}, 0, 10) == nil {
		t.Fatal("the file stored last was evicted")
	}
	if get(c, Key{Ino: 1, Version: 1, Size: 2 * BlockSize}, 0, 10) != nil {
		t.Fatal("the least recently used file was kept past the size")
	}
	n, _ := os.ReadDir(filepath.Join(c.dir, "data"))
	if st := c.Stats(); len(n) != st.Files {
		t.Fatalf("%d data files for %d files held", len(n), st.Files)
	}
}

// A clean close keeps the blocks for the next mount; a cache not closed
// (the client killed) is emptied, since its blocks may be torn.
func TestBlocksOutliveACleanCloseOnly(t *testing.T) {
	dir := t.TempDir()
	k := Key{Ino: 3, Version: 5, Size: BlockSize}
	file := data(4, BlockSize)
	c := open(t, dir, 64<<20)
	c.Put(k, 0, file)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c = open(t, dir, 64<<20)
	if got := get(c, k, 0, BlockSize); !bytes.Equal(got, file) {
		t.Fatal("the blocks are not answered after a clean close")
	}
	// No Close: a crash.
	c = open(t, dir, 64<<20)
	defer c.Close()
	if get(c, k, 0, 10) != nil || c.Stats().Files != 0 {
		t.Fatalf("a cache not closed cleanly still answers: %+v", c.Stats())
	}
}

func TestATooSmallCacheIsRefused(t *testing.T) {
	if _, err := Open(t.TempDir(), BlockSize); err == nil {
		t.Fatal("a cache of one block was opened")
	}
}
