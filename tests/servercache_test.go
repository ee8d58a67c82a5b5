package tests

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"tandemfs/internal/pagecache"
	"tandemfs/internal/testcluster"
)

// TestStorageServersKeepLargeWritesOutOfTheirPageCache: clients' large
// writes leave the storage servers' page cache once they are on the disk
// (RWF_DONTCACHE, internal/storage/dropbehind.go); on a kernel without it
// the members still write their copies with O_DIRECT, since reads go to
// the heads. Small writes go through the page cache everywhere.
func TestStorageServersKeepLargeWritesOutOfTheirPageCache(t *testing.T) {
	c := testcluster.Start(t)
	chains := replicatedChainCopies(t, c)
	if len(chains) == 0 {
		t.Fatal("no replicated chains in a 2-server cluster")
	}
	targetDir := filepath.Dir(chains[0].Dirs[1])
	skipWithoutODirect(t, targetDir)
	dropBehind := canDropBehind(t, targetDir)

	big := randBytes(8 << 20)
	mustWrite(t, filepath.Join(c.Mount(), "big"), big)
	small := randBytes(3 << 10)
	for _, name := range []string{"small1", "small2", "small3", "small4"} {
		// Past the inline limit, so that they live on the chains.
		mustWrite(t, filepath.Join(c.Mount(), name), append(small, small...))
	}

	// The small files' pages: two per 6 KiB file on each side.
	const smallPages = 8
	var head, member int
	deadline := time.Now().Add(10 * time.Second)
	for {
		head, member = 0, 0
		for _, ch := range replicatedChainCopies(t, c) {
			head += residentChunkPages(t, ch.Dirs[0])
			member += residentChunkPages(t, ch.Dirs[1])
		}
		if !dropBehind || (head <= smallPages && member <= smallPages) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // pages go when their writeback ends
	}
	t.Logf("cached pages of chunk files: heads %d, members %d (RWF_DONTCACHE: %v)", head, member, dropBehind)
	switch {
	case dropBehind && head > smallPages:
		t.Errorf("the heads hold %d pages of the chunks in the page cache, want at most the small files' %d", head, smallPages)
	case !dropBehind && head < (8<<20)/os.Getpagesize():
		t.Errorf("the heads hold %d pages of the chunks in the page cache, want the whole 8 MiB file's", head)
	}
	if member > smallPages {
		t.Errorf("the members hold %d pages of the chunks in the page cache, want at most the small files' %d", member, smallPages)
	}
	if member == 0 || head == 0 {
		t.Error("the servers hold no page of the small files: small writes must go through the page cache")
	}
	if got := mustRead(t, filepath.Join(c.Mount(), "big")); !bytes.Equal(got, big) {
		t.Fatal("the file reads back wrong")
	}
	compareChainCopies(t, c)
}

// canDropBehind reports whether the file system of dir takes writes with
// RWF_DONTCACHE.
func canDropBehind(t *testing.T, dir string) bool {
	t.Helper()
	can, err := pagecache.CanDropBehind(dir)
	if err != nil {
		t.Fatal(err)
	}
	return can
}

// skipWithoutODirect skips the test when the file system of dir cannot
// open files with O_DIRECT (tmpfs, some overlays).
func skipWithoutODirect(t *testing.T, dir string) {
	t.Helper()
	p := filepath.Join(dir, ".odirect-probe")
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|unix.O_DIRECT, 0o600)
	if errors.Is(err, syscall.EINVAL) {
		t.Skipf("the file system of %s has no O_DIRECT", dir)
	}
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	os.Remove(p)
}

// residentChunkPages counts the pages of the chunk data files under dir
// (checksum sidecars left out) that are in the page cache.
func residentChunkPages(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(p, ".sum") {
			return err
		}
		n += residentPagesOf(t, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// residentPagesOf counts the pages of the file at path in the page cache.
func residentPagesOf(t *testing.T, path string) int {
	t.Helper()
	n, err := pagecache.Resident(path)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
