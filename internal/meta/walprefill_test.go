package meta

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"
)

// The Raft log's WAL files are written in full before Pebble appends to
// them, so that an fsync of the log does not also write the file's size.

func TestNewWALIsWrittenAheadInFull(t *testing.T) {
	for _, syncEvery := range []time.Duration{time.Hour, 0} {
		dir := t.TempDir()
		s := openLog(t, dir, syncEvery, "opening the log")
		storeEntries(t, s, 1, 10)
		if !hasFullWAL(t, dir, walPrefillFirst) {
			t.Errorf("sync every %v: no WAL file of %d bytes written in full among %v", syncEvery, walPrefillFirst, walFiles(t, dir))
		}
		s.Close()
	}
}

// New WAL files are written ahead as far as their memtables grow:
// 512 KiB first (twice Pebble's first memtable), doubling to 8 MiB.
func TestWALsAreWrittenAheadAsFarAsTheirMemtablesGrow(t *testing.T) {
	fs := newWALPrefillFS(vfs.Default, t.Logf)
	var got []int64
	for range 7 {
		got = append(got, fs.take())
	}
	want := []int64{512 << 10, 1 << 20, 2 << 20, 4 << 20, 8 << 20, 8 << 20, 8 << 20}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("written ahead in successive new WAL files: %v, want %v", got, want)
	}
}

// A crash leaves the zeros after the last record; the log reopens with
// every entry stored before, and goes on.
func TestLogReopensAfterCrashWithZerosAfterItsRecords(t *testing.T) {
	dir := t.TempDir()
	s := openLog(t, dir, time.Hour, "opening the log")
	storeEntries(t, s, 1, 1000)
	if err := s.syncNow(); err != nil {
		t.Fatal(err)
	}
	// What a crash leaves on disk: the files as they are, never closed.
	crashed := t.TempDir()
	copyDir(t, dir, crashed)
	s.Close()
	if !hasFullWAL(t, crashed, walPrefillFirst) {
		t.Fatal("the crashed log has no WAL file written ahead: nothing tested")
	}

	r := openLog(t, crashed, time.Hour, "reopening after a crash")
	wantEntries(t, r, 1, 1000)
	storeEntries(t, r, 1001, 1100)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r = openLog(t, crashed, time.Hour, "reopening after a clean close")
	defer r.Close()
	wantEntries(t, r, 1, 1100)
}

// A crash while a new WAL file was being written ahead (Pebble has
// already closed the one before it, with its EOF trailer) leaves a newest
// WAL of nothing but zeros; the log opens with every entry.
func TestLogOpensWithANewestWALOfOnlyZeros(t *testing.T) {
	dir := t.TempDir()
	s := openLog(t, dir, time.Hour, "opening the log")
	storeEntries(t, s, 1, 500)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	newest := 0
	for _, name := range walFiles(t, dir) {
		var n int
		if _, err := fmt.Sscanf(name, "%06d.log", &n); err == nil && n > newest {
			newest = n
		}
	}
	if newest == 0 {
		t.Fatalf("no WAL file in %s", dir)
	}
	zeros := make([]byte, 3<<20) // cut short: the crash came mid-way
	if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%06d.log", newest+1)), zeros, 0o644); err != nil {
		t.Fatal(err)
	}
	r := openLog(t, dir, time.Hour, "opening with a newest WAL of zeros")
	defer r.Close()
	wantEntries(t, r, 1, 500)
	storeEntries(t, r, 501, 510)
	wantEntries(t, r, 1, 510)
}

// A disk that cannot take the zeros leaves an empty file, to grow as
// Pebble writes it.
func TestPrefillThatFailsLeavesTheFileEmpty(t *testing.T) {
	f, err := vfs.Default.Create(filepath.Join(t.TempDir(), "000001.log"), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	full := &fullAfter{File: f, limit: 3 << 20}
	if err := prefill(full, walPrefillMax); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("prefill on a full disk: %v, want ENOSPC", err)
	}
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() != 0 {
		t.Errorf("file left with %d bytes, want 0", st.Size())
	}
	if _, err := f.Write([]byte("record")); err != nil {
		t.Fatal(err)
	}
	if st, _ := f.Stat(); st.Size() != int64(len("record")) {
		t.Errorf("a write after the failed prefill made the file %d bytes, want %d", st.Size(), len("record"))
	}
}

// fullAfter is a file on a disk that fills up after limit bytes.
type fullAfter struct {
	vfs.File
	limit int64
}

func (f *fullAfter) WriteAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > f.limit {
		return 0, syscall.ENOSPC
	}
	return f.File.WriteAt(p, off)
}

// openLog opens the log store in dir, failing the test with what on error.
func openLog(t *testing.T, dir string, syncEvery time.Duration, what string) *logStore {
	t.Helper()
	s, err := openLogStore(dir, syncEvery, t.Logf)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return s
}

func storeEntries(t *testing.T, s *logStore, from, to uint64) {
	t.Helper()
	var logs []*raft.Log
	for i := from; i <= to; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: entryData(i)})
	}
	if err := s.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
}

func wantEntries(t *testing.T, s *logStore, from, to uint64) {
	t.Helper()
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	if first != from || last != to {
		t.Fatalf("log holds %d..%d, want %d..%d", first, last, from, to)
	}
	for i := from; i <= to; i++ {
		var l raft.Log
		if err := s.GetLog(i, &l); err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		if string(l.Data) != string(entryData(i)) {
			t.Fatalf("entry %d holds %q, want %q", i, l.Data, entryData(i))
		}
	}
}

func entryData(i uint64) []byte {
	return []byte(strings.Repeat("x", int(i%200)) + "/" + string(rune('a'+i%26)))
}

// hasFullWAL reports whether dir holds a WAL file written (not just
// sized: a sparse file does not count) to size bytes.
func hasFullWAL(t *testing.T, dir string, size int64) bool {
	t.Helper()
	for _, name := range walFiles(t, dir) {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(dir, name), &st); err != nil {
			t.Fatal(err)
		}
		if st.Size >= size && st.Blocks*512 >= size {
			return true
		}
	}
	return false
}

func walFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if isWAL(e.Name()) {
			names = append(names, e.Name())
		}
	}
	return names
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		src, err := os.Open(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		dst, err := os.Create(filepath.Join(to, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(dst, src); err != nil {
			t.Fatal(err)
		}
		src.Close()
		dst.Close()
	}
}
