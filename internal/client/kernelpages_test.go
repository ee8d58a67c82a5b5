package client

import "testing"

func TestTheKernelKeepsPagesOnlyOfAnUnchangedLeasedFile(t *testing.T) {
	var p pageVersions
	const ino = 7
	steps := []struct {
		what    string
		version uint64
		leased  bool
		forget  bool // a write of this client failed before the open
		keep    bool
	}{
		{"the first open: what the kernel holds is unknown", 10, true, false, false},
		{"the same version under a lease", 10, true, false, true},
		{"and again", 10, true, false, true},
		{"the same version without a lease: a change may not be seen yet", 10, false, false, false},
		{"leased again, the version noted at the open before", 10, true, false, true},
		{"the version moved on (a commit)", 11, true, false, false},
		{"the new version, leased", 11, true, false, true},
		{"after a failed write of this client", 11, true, true, false},
		{"the open after that", 11, true, false, true},
	}
	for _, s := range steps {
		if s.forget {
			p.forget(ino)
		}
		if got := p.keep(ino, s.version, s.leased); got != s.keep {
			t.Fatalf("%s: keep = %v, want %v", s.what, got, s.keep)
		}
	}
	if p.keep(ino+1, 10, true) {
		t.Fatal("another file's first open kept pages")
	}
	if got := p.kept.Load(); got != 5 {
		t.Fatalf("opens counted as kept: %d, want 5", got)
	}
}

func TestPageVersionsForgetEverythingWhenFull(t *testing.T) {
	var p pageVersions
	for ino := uint64(0); ino < maxPageVersions; ino++ {
		p.keep(ino, 1, true)
	}
	if !p.keep(5, 1, true) {
		t.Fatal("a file noted before the table filled up: not kept")
	}
	if p.keep(maxPageVersions, 1, true) { // fills it: everything is forgotten
		t.Fatal("a new file kept pages")
	}
	if p.keep(5, 1, true) {
		t.Fatal("a file noted before the table was emptied still kept pages")
	}
}
