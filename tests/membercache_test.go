package tests

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"tandemfs/internal/testcluster"
)

// TestAMemberKeepsItsCopyOfLargeWritesOutOfThePageCache: reads go to a
// chain's head, so the member writes its copy of a client's large aligned
// writes with O_DIRECT and leaves the page cache to the head's copy, which
// readers use. Small writes go through the page cache on both.
func TestAMemberKeepsItsCopyOfLargeWritesOutOfThePageCache(t *testing.T) {
	c := testcluster.Start(t)
	chains := replicatedChainCopies(t, c)
	if len(chains) == 0 {
		t.Fatal("no replicated chains in a 2-server cluster")
	}
	skipWithoutODirect(t, filepath.Dir(chains[0].Dirs[1]))

	big := randBytes(8 << 20)
	mustWrite(t, filepath.Join(c.Mount(), "big"), big)
	small := randBytes(3 << 10)
	for _, name := range []string{"small1", "small2", "small3", "small4"} {
		// Past the inline limit, so that they live on the chains.
		mustWrite(t, filepath.Join(c.Mount(), name), append(small, small...))
	}

	var head, member int
	for _, ch := range replicatedChainCopies(t, c) {
		head += residentChunkPages(t, ch.Dirs[0])
		member += residentChunkPages(t, ch.Dirs[1])
	}
	t.Logf("cached pages of chunk files: heads %d, members %d", head, member)
	if head < (8<<20)/os.Getpagesize() {
		t.Errorf("the heads hold %d pages of the chunks in the page cache, want the whole 8 MiB file's", head)
	}
	// The small files' pages, at most: two pages per 6 KiB file.
	if member > 8 {
		t.Errorf("the members hold %d pages of the chunks in the page cache, want at most the small files' 8", member)
	}
	if member == 0 {
		t.Error("the members hold no page of the small files: small writes must go through the page cache")
	}
	if got := mustRead(t, filepath.Join(c.Mount(), "big")); !bytes.Equal(got, big) {
		t.Fatal("the file reads back wrong")
	}
	compareChainCopies(t, c)
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

// residentPagesOf counts the pages of the file at path in the page cache
// (mincore(2) of a mapping of it; an empty file has none).
func residentPagesOf(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() == 0 {
		return 0
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, (len(m)+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatalf("mincore %s: %v", path, errno)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}
