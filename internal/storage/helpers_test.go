package storage

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"
)

// openTestTarget opens a fresh target in a temporary directory.
func openTestTarget(t testing.TB, opts Options) *Target {
	t.Helper()
	return openTargetAt(t, t.TempDir(), opts)
}

func openTargetAt(t testing.TB, dir string, opts Options) *Target {
	t.Helper()
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	tg, err := OpenTarget(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.Close() })
	return tg
}

// onEachFS runs test, as subtests, on a fresh target over the real file
// system and on one over the fault-injecting file system without faults,
// which the failure tests run storage servers on and which must then
// behave as the real one.
func onEachFS(t *testing.T, test func(t *testing.T, tg *Target)) {
	for _, tc := range []struct {
		name string
		fs   FS
	}{{"os", nil}, {"faults", NewFaultFS(nil)}} {
		t.Run(tc.name, func(t *testing.T) { test(t, openTestTarget(t, Options{FS: tc.fs})) })
	}
}

// pattern returns n reproducible pseudo-random bytes for seed.
func pattern(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// readAll reads chunk (ino, idx) up to max bytes and returns what it holds.
func readAll(t testing.TB, tg *Target, ino, idx uint64, max int) []byte {
	t.Helper()
	p := make([]byte, max)
	n, err := tg.Read(ino, idx, p, 0)
	if err != nil {
		t.Fatalf("read chunk %d/%d: %v", ino, idx, err)
	}
	return p[:n]
}

// mustWrite writes p at off and fails the test on error.
func mustWrite(t testing.TB, tg *Target, ino, idx uint64, off int64, p []byte) {
	t.Helper()
	if err := tg.Write(ino, idx, off, p); err != nil {
		t.Fatalf("write chunk %d/%d at %d: %v", ino, idx, off, err)
	}
}

// model is what a chunk should hold: a byte slice with hole semantics.
type model []byte

func (m *model) write(off int, p []byte) {
	if end := off + len(p); end > len(*m) {
		*m = append(*m, make([]byte, end-len(*m))...)
	}
	copy((*m)[off:], p)
}

func (m *model) truncate(n int) {
	if n <= len(*m) {
		*m = (*m)[:n]
	} else {
		*m = append(*m, make([]byte, n-len(*m))...)
	}
}

func assertSame(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if bytes.Equal(got, want) {
		return
	}
	if len(got) != len(want) {
		t.Fatalf("%s: got %d bytes, want %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: first difference at byte %d: got %#x, want %#x", what, i, got[i], want[i])
		}
	}
}

// receiveWithin waits up to d for a signal on ch, and fails the test with
// failure if none comes.
func receiveWithin(t *testing.T, ch <-chan struct{}, d time.Duration, failure string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatal(failure)
	}
}
