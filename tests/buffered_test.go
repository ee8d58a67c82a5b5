package tests

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"tandemfs/internal/testcluster"
)

// A client buffers writes, to chunks and to small (inline) files alike,
// and sends them on at close, fsync, truncate or lock release. What the
// application sees must be as if every write had gone straight through.

func TestSmallFileWrittenInPiecesReadsBackBeforeAndAfterClose(t *testing.T) {
	a, b := twoMounts(t)
	f, err := os.Create(filepath.Join(a, "notes"))
	if err != nil {
		t.Fatal(err)
	}
	want := randBytes(3000)
	for off := 0; off < len(want); off += 500 {
		if _, err := f.Write(want[off : off+500]); err != nil {
			t.Fatal(err)
		}
	}
	got := make([]byte, 4000)
	if n, err := f.ReadAt(got, 0); n != len(want) || !bytes.Equal(got[:n], want) {
		t.Fatalf("read through the writing open: %d bytes (%v), want the %d written", n, err, len(want))
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	showsSoon(t, "small file after close", func() bool {
		got, err := os.ReadFile(filepath.Join(b, "notes"))
		return err == nil && bytes.Equal(got, want)
	})
}

// A buffered write returns before the servers have it; an O_DIRECT write
// over the same bytes that comes after it must still win, as on a local
// disk (found by tests/fsx_test.go: the older buffered bytes arrived
// last and stayed).
func TestAnODirectWriteAfterABufferedOneKeepsItsBytes(t *testing.T) {
	c := testcluster.Start(t)
	path := filepath.Join(c.Mount(), "mixed")
	if err := os.WriteFile(path, make([]byte, 64<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	d, err := os.OpenFile(path, os.O_RDWR|syscall.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	block, err := syscall.Mmap(-1, 0, 4096, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(block)
	for i := 0; i < 16; i++ {
		off := int64(i) * 4096
		if _, err := f.WriteAt(bytes.Repeat([]byte{'b'}, 100), off+1000); err != nil {
			t.Fatal(err)
		}
		for j := range block {
			block[j] = byte('A' + i)
		}
		if _, err := d.WriteAt(block, off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 16; i++ {
		want := byte('A' + i)
		blk := got[i*4096 : (i+1)*4096]
		if k := bytes.IndexFunc(blk, func(r rune) bool { return r != rune(want) }); k >= 0 {
			t.Fatalf("block %d: byte %d is %q, want the O_DIRECT write's %q", i, k, blk[k], want)
		}
	}
}

func TestBufferedSmallWritesKeepTheirOrderAroundATruncate(t *testing.T) {
	a, b := twoMounts(t)
	f, err := os.Create(filepath.Join(a, "f"))
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("abcdef"))
	if err := f.Truncate(3); err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("x"), 5)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	want := []byte("abc\x00\x00x")
	showsSoon(t, "write, truncate, write", func() bool {
		got, err := os.ReadFile(filepath.Join(b, "f"))
		return err == nil && bytes.Equal(got, want)
	})
}

func TestASmallFileGrowingPastTheInlineLimitKeepsItsBufferedBytes(t *testing.T) {
	c := testcluster.Start(t)
	a := c.Mount()
	f, err := os.Create(filepath.Join(a, "grows"))
	if err != nil {
		t.Fatal(err)
	}
	want := randBytes(3000 + 5000)
	f.Write(want[:1000])
	f.Write(want[1000:3000])
	f.Write(want[3000:]) // past 4 KiB: the file moves to its chains
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, filepath.Join(a, "grows")); !bytes.Equal(got, want) {
		t.Fatalf("%d bytes back, want the %d written", len(got), len(want))
	}
	if l := getLayout(t, filepath.Join(a, "grows")); l.Inline {
		t.Fatal("an 8000-byte file is still inline")
	}
}

// cp -p and tar set a copy's times on the open file, after writing it
// and before closing it: the close must not move mtime back to when the
// writes were made.
func TestTimesSetOnAnOpenFileAfterWritingSurviveTheClose(t *testing.T) {
	c := testcluster.Start(t)
	a := c.Mount()
	old := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	for name, size := range map[string]int{"small": 3000, "large": 3<<20 + 5} {
		f, err := os.Create(filepath.Join(a, name))
		if err != nil {
			t.Fatal(err)
		}
		f.Write(randBytes(size))
		ts := []syscall.Timespec{syscall.NsecToTimespec(old.UnixNano()), syscall.NsecToTimespec(old.UnixNano())}
		if err := syscall.UtimesNano("/proc/self/fd/"+strconv.Itoa(int(f.Fd())), ts); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(filepath.Join(a, name))
		if err != nil {
			t.Fatal(err)
		}
		if !st.ModTime().Equal(old) || st.Size() != int64(size) {
			t.Fatalf("%s: mtime %v, size %d after close; want %v and %d", name, st.ModTime().UTC(), st.Size(), old, size)
		}
	}
}

// A process that releases a lock hands what it wrote under it to the next
// holder, on any host, even before closing the file (MPI-IO and other
// shared-file writers rely on this, as NFS clients flush on unlock).
func TestWritesUnderALockReachTheNextHolderOnAnotherMount(t *testing.T) {
	a, b := twoMounts(t)
	for name, size := range map[string]int{"small": 2000, "large": 2<<20 + 7} {
		f, err := os.Create(filepath.Join(a, name))
		if err != nil {
			t.Fatal(err)
		}
		lockWhole(t, f, syscall.F_WRLCK)
		want := randBytes(size)
		f.Write(want)
		lockWhole(t, f, syscall.F_UNLCK)
		g, err := os.Open(filepath.Join(b, name))
		if err != nil {
			t.Fatal(err)
		}
		lockWhole(t, g, syscall.F_RDLCK)
		got := make([]byte, size+10)
		n, _ := g.ReadAt(got, 0)
		g.Close()
		f.Close()
		if !bytes.Equal(got[:n], want) {
			t.Fatalf("%s: the next lock holder read %d bytes, want the %d written under the lock", name, n, size)
		}
	}
}

// lockWhole sets a record lock of type typ on all of f, waiting for it.
func lockWhole(t *testing.T, f *os.File, typ int16) {
	t.Helper()
	lk := syscall.Flock_t{Type: typ}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_SETLKW, &lk); err != nil {
		t.Fatalf("fcntl lock type %d: %v", typ, err)
	}
}
