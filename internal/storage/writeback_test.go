package storage

import (
	"os"
	"sync/atomic"
	"testing"
)

// writebackFS counts the writeback starts of the chunk data files it opens.
type writebackFS struct {
	OSFS
	starts atomic.Int64
}

type writebackFile struct {
	File
	fs *writebackFS
}

func (f *writebackFile) StartWriteback() error {
	f.fs.starts.Add(1)
	return f.File.(writebackStarter).StartWriteback()
}

func (f *writebackFile) WriteDirect(b []byte, off int64) (int, error) {
	return f.File.(directWriter).WriteDirect(b, off)
}

func (w *writebackFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := w.OSFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &writebackFile{File: f, fs: w}, nil
}

func TestAStreamedChunkStartsItsWritebackEveryMegabyte(t *testing.T) {
	fs := &writebackFS{}
	tg := openTestTarget(t, Options{FS: fs})
	data := pattern(1, 4<<20)
	for off := 0; off < len(data); off += 256 << 10 {
		mustWrite(t, tg, 7, 0, int64(off), data[off:off+256<<10])
	}
	if got := fs.starts.Load(); got != 4 {
		t.Fatalf("writeback started %d times for 4 MiB written in 256 KiB pieces, want 4", got)
	}
	if got := readAll(t, tg, 7, 0, len(data)+1); string(got) != string(data) {
		t.Fatal("the chunk does not read back as written")
	}
}

func TestSmallWritesStartNoWritebackUntilAMegabyteIsDirty(t *testing.T) {
	fs := &writebackFS{}
	tg := openTestTarget(t, Options{FS: fs})
	block := pattern(2, 4096)
	for i := range 255 {
		mustWrite(t, tg, 8, 0, int64(i*3)<<12, block) // scattered 4 KiB writes
	}
	if got := fs.starts.Load(); got != 0 {
		t.Fatalf("writeback started %d times after 255 writes of 4 KiB, want 0", got)
	}
	mustWrite(t, tg, 8, 0, 0, block) // the 256th: 1 MiB dirty in all
	if got := fs.starts.Load(); got != 1 {
		t.Fatalf("writeback started %d times after 1 MiB of 4 KiB writes, want 1", got)
	}
}

func TestBulkWritesBypassThePageCacheAndStartNoWriteback(t *testing.T) {
	fs := &writebackFS{}
	tg := openTestTarget(t, Options{FS: fs})
	data := pattern(3, 2<<20)
	if err := tg.WriteUncached(9, 0, 0, data); err != nil {
		t.Fatal(err)
	}
	if got := fs.starts.Load(); got != 0 {
		t.Fatalf("writeback started %d times for an O_DIRECT copy, want 0", got)
	}
}

func TestStartWritebackOnARealFile(t *testing.T) {
	f, err := OSFS{}.OpenFile(t.TempDir()+"/f", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(pattern(4, 1<<20), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.(writebackStarter).StartWriteback(); err != nil {
		t.Fatalf("sync_file_range: %v", err)
	}
}
