package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"tandemfs/internal/fuse"
	"tandemfs/internal/testcluster"
)

// The block cache (internal/client/blockcache.go): a client answers small
// reads of files it holds leases on from its memory, and a change another
// client commits is seen by the next read even on a file kept open. The
// tests reach the client with O_DIRECT reads, past the kernel's page
// cache, on mounts that let the cache answer those
// (--cache-direct-io); by default O_DIRECT reads go to the storage
// servers every time.

// cachingDirectIO mounts with O_DIRECT reads answered by the block cache.
var cachingDirectIO = testcluster.WithMountFlags("--cache-direct-io")

const blk = 4096

// openDirect opens path with O_DIRECT and flags, closing it when the test
// ends.
func openDirect(t *testing.T, path string, flags int) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, flags|syscall.O_DIRECT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// readBlock reads block i of f with one pread into an aligned buffer.
func readBlock(t *testing.T, f *os.File, i int) []byte {
	t.Helper()
	b := alignedBlock(blk)
	if n, err := f.ReadAt(b, int64(i*blk)); err != nil || n != blk {
		t.Fatalf("read of block %d of %s: %d bytes, %v", i, f.Name(), n, err)
	}
	return b
}

// writeBlock writes block i of f full of byte c with one pwrite.
func writeBlock(t *testing.T, f *os.File, i int, c byte) {
	t.Helper()
	b := alignedBlock(blk)
	for k := range b {
		b[k] = c
	}
	if n, err := f.WriteAt(b, int64(i*blk)); err != nil || n != blk {
		t.Fatalf("write of block %d of %s: %d bytes, %v", i, f.Name(), n, err)
	}
}

// fileOfBlocks writes a file whose block i is full of byte 'a'+i%26.
func fileOfBlocks(t *testing.T, path string, n int) {
	t.Helper()
	var data []byte
	for i := range n {
		data = append(data, bytes.Repeat([]byte{byte('a' + i%26)}, blk)...)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func wantBlock(t *testing.T, what string, got []byte, c byte) {
	t.Helper()
	if !bytes.Equal(got, bytes.Repeat([]byte{c}, blk)) {
		t.Fatalf("%s: read a block starting %q, want it all %q", what, got[:8], c)
	}
}

func TestSmallReadsOfALeasedFileAreAnsweredWithoutTheStorageServers(t *testing.T) {
	c := testcluster.Start(t, cachingDirectIO)
	path := filepath.Join(c.Mount(), "f")
	fileOfBlocks(t, path, 256) // made here: this client holds its lease
	f := openDirect(t, path, os.O_RDONLY)
	// A read that misses brings the 256 KiB (64 blocks) around it.
	readBlock(t, f, 0)
	readBlock(t, f, 65)
	// Every storage server stopped: only the client's memory can
	// answer now.
	c.Signal("storage1", syscall.SIGSTOP)
	c.Signal("storage2", syscall.SIGSTOP)
	defer c.Signal("storage2", syscall.SIGCONT)
	defer c.Signal("storage1", syscall.SIGCONT)
	read := make(chan error, 1)
	go func() {
		for i := range 128 {
			b := alignedBlock(blk)
			if _, err := f.ReadAt(b, int64(i*blk)); err != nil || b[0] != byte('a'+i%26) {
				read <- fmt.Errorf("block %d read again: %q, %v", i, b[:8], err)
				return
			}
		}
		read <- nil
	}()
	select {
	case err := <-read:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Second):
		c.Signal("storage1", syscall.SIGCONT)
		c.Signal("storage2", syscall.SIGCONT)
		<-read
		t.Fatal("blocks read before, or next to those, waited for the stopped storage servers")
	}
	if s := clientStats(t, c.Mount()); s.BlockCacheHits < 128 || s.BlockCacheBytes < 128*blk {
		t.Fatalf("user.tandem.client after 128 blocks read from the cache: %+v", s)
	}
}

func TestTheBlocksOfARemovedFileMakeRoomAtOnce(t *testing.T) {
	c := testcluster.Start(t, cachingDirectIO)
	cached := func(what string, want int64) {
		t.Helper()
		if s := clientStats(t, c.Mount()); s.BlockCacheBytes != want {
			t.Fatalf("%s: the block cache holds %d bytes, want %d", what, s.BlockCacheBytes, want)
		}
	}
	// The kernel sends a handle's release after close returns, so a
	// file closed a moment ago may still be open to the client; its
	// blocks then go with that release (as for the open file below).
	cachedSoon := func(what string, want int64) {
		t.Helper()
		for deadline := time.Now().Add(2 * time.Second); clientStats(t, c.Mount()).BlockCacheBytes != want && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		cached(what, want)
	}
	gone := filepath.Join(c.Mount(), "gone")
	fileOfBlocks(t, gone, 8)
	f := openDirect(t, gone, os.O_RDWR)
	readBlock(t, f, 0) // brings the file's 8 blocks, its line
	f.Close()
	cached("after a read of a file of 8 blocks", 8*blk)
	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}
	cachedSoon("after the file was removed", 0)

	// A file removed while open keeps its blocks until its last close.
	open := filepath.Join(c.Mount(), "open")
	fileOfBlocks(t, open, 4)
	f = openDirect(t, open, os.O_RDWR)
	defer f.Close()
	writeBlock(t, f, 1, 'o')
	if err := os.Remove(open); err != nil {
		t.Fatal(err)
	}
	wantBlock(t, "a block written to the open, removed file", readBlock(t, f, 1), 'o')
	cached("while the removed file is open", blk)
	f.Close()
	cachedSoon("after its last close", 0)
}

// clientStats reads the counters of the client serving mount.
func clientStats(t *testing.T, mount string) fuse.ClientStats {
	t.Helper()
	buf := make([]byte, 4096)
	n, err := syscall.Getxattr(mount, fuse.XattrClient, buf)
	if err != nil {
		t.Fatalf("getxattr %s: %v", fuse.XattrClient, err)
	}
	var s fuse.ClientStats
	if err := json.Unmarshal(buf[:n], &s); err != nil {
		t.Fatalf("%s: %v: %s", fuse.XattrClient, err, buf[:n])
	}
	return s
}

func TestODirectReadsSeeWhatAnotherMountFsyncedOrClosed(t *testing.T) {
	c := testcluster.Start(t, cachingDirectIO)
	a, b := c.Mount(), secondMount(t, c, "--cache-direct-io")
	time.Sleep(300 * time.Millisecond) // both watches live
	fileOfBlocks(t, filepath.Join(a, "f"), 8)
	reader := openDirect(t, filepath.Join(b, "f"), os.O_RDONLY)
	for range 2 { // the second round from b's memory
		for i := range 8 {
			wantBlock(t, "first reads", readBlock(t, reader, i), byte('a'+i))
		}
	}

	// Each change is read first through a new handle, which takes a
	// new lease on the file, then through the one kept open. (A file
	// whose leases were just revoked gets no new one for 2 s; past them
	// only the cache's own drop keeps its old blocks from being read.)
	reopened := func() *os.File { return openDirect(t, filepath.Join(b, "f"), os.O_RDONLY) }
	w := openDirect(t, filepath.Join(a, "f"), os.O_WRONLY)
	writeBlock(t, w, 1, 'X')
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2100 * time.Millisecond)
	wantBlock(t, "after fsync through the other mount", readBlock(t, reopened(), 1), 'X')
	wantBlock(t, "after fsync, on the handle kept open", readBlock(t, reader, 1), 'X')
	writeBlock(t, w, 2, 'Y')
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	wantBlock(t, "after close through the other mount", readBlock(t, reopened(), 2), 'Y')
	wantBlock(t, "after close, on the handle kept open", readBlock(t, reader, 2), 'Y')
	wantBlock(t, "an unchanged block", readBlock(t, reader, 3), 'd')

	if err := os.Truncate(filepath.Join(a, "f"), 2*blk); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(a, "f"), 8*blk); err != nil {
		t.Fatal(err)
	}
	wantBlock(t, "after a truncate and regrowth through the other mount", readBlock(t, reopened(), 5), 0)
}

func TestWritesThroughOneMountAreReadAtOnceThroughAnyOfItsHandles(t *testing.T) {
	c := testcluster.Start(t, cachingDirectIO)
	path := filepath.Join(c.Mount(), "f")
	fileOfBlocks(t, path, 8)
	reader := openDirect(t, path, os.O_RDONLY)
	for i := range 8 {
		readBlock(t, reader, i)
	}
	direct := openDirect(t, path, os.O_WRONLY)
	writeBlock(t, direct, 1, 'X')
	wantBlock(t, "after an O_DIRECT write through another handle", readBlock(t, reader, 1), 'X')

	buffered, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer buffered.Close()
	if _, err := buffered.WriteAt(bytes.Repeat([]byte{'Z'}, 100), 2*blk+10); err != nil {
		t.Fatal(err)
	}
	if err := buffered.Sync(); err != nil { // out of the kernel's page cache
		t.Fatal(err)
	}
	got := readBlock(t, reader, 2)
	if got[9] != 'c' || got[10] != 'Z' || got[109] != 'Z' || got[110] != 'c' {
		t.Fatalf("after a buffered write of part of a block: read %q", got[:120])
	}

	if err := direct.Truncate(blk); err != nil {
		t.Fatal(err)
	}
	if err := direct.Truncate(8 * blk); err != nil {
		t.Fatal(err)
	}
	wantBlock(t, "after a truncate and regrowth", readBlock(t, reader, 1), 0)
}

// TestODirectGoesToTheStorageServersByDefault: O_DIRECT means direct. A
// block read twice with O_DIRECT is asked of the storage servers both
// times, so with them stopped the second read waits for them; the block
// cache holds nothing and answered nothing, and an O_DIRECT write leaves
// nothing in it either. (The papers' random tests, IOzone -I, measure the
// storage this way.)
func TestODirectGoesToTheStorageServersByDefault(t *testing.T) {
	c := testcluster.Start(t)
	path := filepath.Join(c.Mount(), "f")
	fileOfBlocks(t, path, 64)
	f := openDirect(t, path, os.O_RDWR)
	for i := range 64 {
		wantBlock(t, "first read", readBlock(t, f, i), byte('a'+i%26))
	}
	writeBlock(t, f, 3, 'W')
	if s := clientStats(t, c.Mount()); s.BlockCacheBytes != 0 || s.BlockCacheHits != 0 {
		t.Fatalf("after O_DIRECT reads and a write the block cache holds %d bytes and answered %d reads", s.BlockCacheBytes, s.BlockCacheHits)
	}
	c.Signal("storage1", syscall.SIGSTOP)
	c.Signal("storage2", syscall.SIGSTOP)
	woken := false
	wake := func() {
		if !woken {
			c.Signal("storage1", syscall.SIGCONT)
			c.Signal("storage2", syscall.SIGCONT)
			woken = true
		}
	}
	defer wake()
	type answer struct {
		b   []byte
		err error
		at  time.Duration
	}
	read := make(chan answer, 1)
	start := time.Now()
	go func() {
		b := alignedBlock(blk)
		_, err := f.ReadAt(b, 3*blk)
		read <- answer{b, err, time.Since(start)}
	}()
	select {
	case a := <-read:
		t.Fatalf("an O_DIRECT read was answered after %v while every storage server was stopped: %q..., %v", a.at, a.b[:8], a.err)
	case <-time.After(time.Second):
	}
	wake()
	select {
	case a := <-read:
		if a.err != nil {
			t.Fatal(a.err)
		}
		wantBlock(t, "the read once the servers woke", a.b, 'W')
	case <-time.After(30 * time.Second):
		t.Fatal("the O_DIRECT read did not finish after the servers woke")
	}
}
