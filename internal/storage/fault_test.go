package storage

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"tandemfs/internal/rpc"
)

func wantErrno(t *testing.T, err error, errno syscall.Errno) {
	t.Helper()
	if !errors.Is(err, errno) || rpc.ErrnoOf(err) != errno {
		t.Fatalf("got %v (errno %v), want %v", err, rpc.ErrnoOf(err), errno)
	}
}

// A disk that fills up part way through an extending write: the write fails
// with ENOSPC, the chunk keeps its old size, the bytes outside the write are
// untouched and every block inside it holds the old or the new bytes and
// verifies.
func TestENOSPCDuringTheDataWriteKeepsTheChunkReadable(t *testing.T) {
	ffs := NewFaultFS(nil)
	tg := openTestTarget(t, Options{FS: ffs})
	old := pattern(1, 10000)
	mustWrite(t, tg, 1, 0, 0, old)

	remove := ffs.Inject(Fault{Ops: OpWrite, Match: isData, Err: syscall.ENOSPC, Partial: true})
	p := pattern(2, 100000)
	wantErrno(t, tg.Write(1, 0, 5000, p), syscall.ENOSPC)

	got := readAll(t, tg, 1, 0, 1<<20)
	if len(got) != len(old) {
		t.Fatalf("chunk is %d bytes after the failed write, want the old %d", len(got), len(old))
	}
	assertSame(t, "bytes before the write", got[:5000], old[:5000])
	var newer model
	newer.write(0, old)
	newer.write(5000, p)
	for b := 0; b < len(old); b += BlockSize {
		e := min(b+BlockSize, len(old))
		if !bytes.Equal(got[b:e], old[b:e]) && !bytes.Equal(got[b:e], newer[b:e]) {
			t.Fatalf("block at %d holds neither the old nor the new bytes", b)
		}
	}

	// With space again, the chunk takes the write, and the checksums the
	// failure settled carry on verifying.
	remove()
	mustWrite(t, tg, 1, 0, 5000, p)
	assertSame(t, "after the retried write", readAll(t, tg, 1, 0, 1<<20), newer)
}

// ENOSPC while extending the sidecar: nothing of the data was touched.
func TestENOSPCWritingChecksumsLeavesOldDataIntact(t *testing.T) {
	ffs := NewFaultFS(nil)
	tg := openTestTarget(t, Options{FS: ffs})
	old := pattern(1, 3*BlockSize+5)
	mustWrite(t, tg, 1, 0, 0, old)

	remove := ffs.Inject(Fault{Ops: OpWrite, Match: isSum, Err: syscall.ENOSPC})
	wantErrno(t, tg.Write(1, 0, 100, pattern(2, 1<<20)), syscall.ENOSPC)
	wantErrno(t, tg.Write(1, 1, 0, pattern(3, 100)), syscall.ENOSPC)
	assertSame(t, "old chunk", readAll(t, tg, 1, 0, 2<<20), old)
	if got := readAll(t, tg, 1, 1, 1000); len(got) != 0 {
		t.Fatalf("a new chunk whose first write failed reads %d bytes", len(got))
	}
	remove()
	mustWrite(t, tg, 1, 0, 3*BlockSize, []byte("tail"))
	var want model
	want.write(0, old)
	want.write(3*BlockSize, []byte("tail"))
	assertSame(t, "after space came back", readAll(t, tg, 1, 0, 2<<20), want)
}

// A torn block (the disk wrote half of it) is detected, whatever the cause.
func TestTornBlockFromAFailedWriteIsDetected(t *testing.T) {
	ffs := NewFaultFS(nil)
	tg := openTestTarget(t, Options{FS: ffs})
	mustWrite(t, tg, 1, 0, 0, pattern(1, 4*BlockSize))
	// Bypass the engine: write half a block of new bytes under the
	// entries a write of the whole block would have recorded.
	ffs.Inject(Fault{Ops: OpWrite, Match: isData, Times: 1, Hook: func(_ Op, path string) {
		f, _ := OSFS{}.OpenFile(path, 2, 0)
		defer f.Close()
		f.WriteAt(bytes.Repeat([]byte{0xee}, BlockSize/2), BlockSize)
	}, Err: syscall.EIO})
	wantErrno(t, tg.Write(1, 0, BlockSize, bytes.Repeat([]byte{0xab}, BlockSize)), syscall.EIO)
	_, err := tg.Read(1, 0, make([]byte, BlockSize), BlockSize)
	wantChecksumError(t, err, BlockSize)
}

func TestDiskErrorsReachTheCallerAsErrnos(t *testing.T) {
	ffs := NewFaultFS(nil)
	tg := openTestTarget(t, Options{FS: ffs})
	mustWrite(t, tg, 1, 0, 0, pattern(1, 1000))

	remove := ffs.Inject(Fault{Ops: OpRead, Err: syscall.EIO})
	_, err := tg.Read(1, 0, make([]byte, 100), 0)
	wantErrno(t, err, syscall.EIO)
	remove()

	remove = ffs.Inject(Fault{Ops: OpSync, Err: syscall.EIO})
	wantErrno(t, tg.Sync(1, []uint64{0}), syscall.EIO)
	remove()

	remove = ffs.Inject(Fault{Ops: OpOpen, Err: syscall.EMFILE})
	wantErrno(t, tg.Write(2, 0, 0, []byte("x")), syscall.EMFILE)
	remove()

	assertSame(t, "after the faults", readAll(t, tg, 1, 0, 2000), pattern(1, 1000))
}

func TestFaultSkipAndTimes(t *testing.T) {
	ffs := NewFaultFS(nil)
	tg := openTestTarget(t, Options{FS: ffs})
	ffs.Inject(Fault{Ops: OpWrite, Match: isData, Err: syscall.EIO, Skip: 1, Times: 1})
	mustWrite(t, tg, 1, 0, 0, []byte("first"))
	wantErrno(t, tg.Write(1, 0, 0, []byte("second")), syscall.EIO)
	mustWrite(t, tg, 1, 0, 0, []byte("third"))
	assertSame(t, "after one injected failure", readAll(t, tg, 1, 0, 100), []byte("third"))
}

// A fault file's rules: an errno fails the matching calls, a delay makes
// them slow (and, without an errno, still succeed), and a rule that names
// no errno and no delay, or a bad one, is refused with the reason.
func TestFaultFileRulesFailOrSlowTheCallsTheyName(t *testing.T) {
	path := filepath.Join(t.TempDir(), "faults")
	write := func(rules string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(rules), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ffs := NewFaultFS(nil)
	tg := openTestTarget(t, Options{FS: ffs})
	mustWrite(t, tg, 1, 0, 0, pattern(1, 1000))

	write(`[{"path": "", "ops": "read", "delay": "300ms"}]`)
	rules, err := LoadFaultRules(path)
	if err != nil {
		t.Fatal(err)
	}
	remove := ffs.Inject(rules[0])
	t0 := time.Now()
	assertSame(t, "a slow read", readAll(t, tg, 1, 0, 2000), pattern(1, 1000))
	if took := time.Since(t0); took < 300*time.Millisecond {
		t.Fatalf("a read under a 300ms delay took %v", took)
	}
	remove()

	write(`[{"ops": "read", "errno": "EIO"}]`)
	if rules, err = LoadFaultRules(path); err != nil {
		t.Fatal(err)
	}
	ffs.Inject(rules[0])
	_, err = tg.Read(1, 0, make([]byte, 100), 0)
	wantErrno(t, err, syscall.EIO)

	for rule, want := range map[string]string{
		`[{"ops": "read"}]`:                   `unknown errno ""`,
		`[{"ops": "read", "delay": "soon"}]`:  `delay "soon"`,
		`[{"ops": "read", "delay": "-1s"}]`:   `delay "-1s"`,
		`[{"ops": "reed", "errno": "EIO"}]`:   `unknown operation "reed"`,
		`[{"ops": "read", "errno": "EPERM"}]`: `unknown errno "EPERM"`,
	} {
		write(rule)
		if _, err := LoadFaultRules(path); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("rule %s: got %v, want an error with %q", rule, err, want)
		}
	}
}
