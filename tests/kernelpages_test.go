package tests

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"
	"time"

	"tandemfs/internal/testcluster"
)

// A file read again through the same mount is answered by the kernel's
// page cache, without a read reaching the client, as long as nothing
// changed it (internal/client/kernelpages.go). A change made through
// another mount, even one that keeps the size, is read at the next open.

func TestAFileReadAgainComesFromTheKernelsPages(t *testing.T) {
	c := testcluster.Start(t)
	m := c.Mount()
	want := make([]byte, 3<<20)
	rand.Read(want)
	path := filepath.Join(m, "input")
	if err := os.WriteFile(path, want, 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the watch is live, so leases are granted
	// The first open after the write's commit drops what the kernel
	// holds (the inode moved on); it reads through the client.
	if !bytes.Equal(mustRead(t, path), want) {
		t.Fatal("first read differs from what was written")
	}
	before := clientStats(t, m)
	for i := range 3 {
		if !bytes.Equal(mustRead(t, path), want) {
			t.Fatalf("read %d differs from what was written", i+2)
		}
	}
	after := clientStats(t, m)
	if after.OpensKeptPages < before.OpensKeptPages+3 {
		t.Errorf("opens that kept the kernel's pages: %d before three reads, %d after", before.OpensKeptPages, after.OpensKeptPages)
	}
	if after.Reads != before.Reads {
		t.Errorf("three more reads of an unchanged file sent %d reads to the client; want 0", after.Reads-before.Reads)
	}
}

func TestAFileRewrittenInPlaceThroughAnotherMountIsReadAnew(t *testing.T) {
	a, b := twoMounts(t)
	time.Sleep(300 * time.Millisecond) // both watches live
	for i := range 10 {
		name := filepath.Join(a, "f")
		old := bytes.Repeat([]byte{byte('a' + i)}, 64<<10)
		if err := os.WriteFile(name, old, 0o644); err != nil {
			t.Fatal(err)
		}
		for range 3 { // the kernel of a holds the pages, kept across opens
			if !bytes.Equal(mustRead(t, name), old) {
				t.Fatalf("round %d: a read back something else than it wrote", i)
			}
		}
		// b overwrites a block in the middle: same size, no truncate.
		f, err := os.OpenFile(filepath.Join(b, "f"), os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		patch := bytes.Repeat([]byte{'Z'}, 4096)
		if _, err := f.WriteAt(patch, 8192); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		want := append(append(append([]byte{}, old[:8192]...), patch...), old[8192+4096:]...)
		if got := mustRead(t, name); !bytes.Equal(got, want) {
			t.Fatalf("round %d: a file rewritten in place through another mount read %q at 8192, want %q",
				i, got[8192:8200], want[8192:8200])
		}
	}
}
