package pagecache

import (
	"os"
	"path/filepath"
	"testing"
)

func TestResidentCountsAFilesCachedPages(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, make([]byte, 8*os.Getpagesize()), 0o644); err != nil {
		t.Fatal(err)
	}
	if n, err := Resident(p); err != nil || n != 8 {
		t.Fatalf("a file just written holds %d pages in the page cache (%v), want 8", n, err)
	}
	empty := filepath.Join(t.TempDir(), "e")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if n, err := Resident(empty); err != nil || n != 0 {
		t.Fatalf("an empty file: %d pages (%v), want 0", n, err)
	}
	if _, err := Resident(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("a missing file gave no error")
	}
}

func TestCanDropBehindLeavesNoProbeBehind(t *testing.T) {
	dir := t.TempDir()
	if _, err := CanDropBehind(dir); err != nil {
		t.Fatal(err)
	}
	if names, _ := os.ReadDir(dir); len(names) != 0 {
		t.Fatalf("the probe left %d files in %s", len(names), dir)
	}
}
