package tests

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"tandemfs/internal/testcluster"
)

// A client buffers writes, to chunks and to small (inline) files alike,
// and sends them on at close, fsync, truncate or lock release. What the
// application sees must be as if every write had gone straight through.

func TestSmallFileWrittenInPiecesReadsBackBeforeAndAfterClose(t *testing.T) {
	c := testcluster.Start(t)
	a := c.Mount()
	b := secondMount(t, c)
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

func TestBufferedSmallWritesKeepTheirOrderAroundATruncate(t *testing.T) {
	c := testcluster.Start(t)
	a := c.Mount()
	b := secondMount(t, c)
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
		if err := syscall.UtimesNano("/proc/self/fd/"+itoa(int(f.Fd())), ts); err != nil {
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
	c := testcluster.Start(t)
	a := c.Mount()
	b := secondMount(t, c)
	for name, size := range map[string]int{"small": 2000, "large": 2<<20 + 7} {
		f, err := os.Create(filepath.Join(a, name))
		if err != nil {
			t.Fatal(err)
		}
		lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0}
		if err := syscall.FcntlFlock(f.Fd(), syscall.F_SETLKW, &lk); err != nil {
			t.Fatal(err)
		}
		want := randBytes(size)
		f.Write(want)
		lk.Type = syscall.F_UNLCK
		if err := syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &lk); err != nil {
			t.Fatal(err)
		}
		g, err := os.Open(filepath.Join(b, name))
		if err != nil {
			t.Fatal(err)
		}
		lk.Type = syscall.F_RDLCK
		if err := syscall.FcntlFlock(g.Fd(), syscall.F_SETLKW, &lk); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, size+10)
		n, _ := g.ReadAt(got, 0)
		g.Close()
		f.Close()
		if !bytes.Equal(got[:n], want) {
			t.Fatalf("%s: the next lock holder read %d bytes, want the %d written under the lock", name, n, size)
		}
	}
}

func itoa(i int) string {
	var b []byte
	for {
		b = append([]byte{byte('0' + i%10)}, b...)
		if i /= 10; i == 0 {
			return string(b)
		}
	}
}

// Writes buffered to a small file still reach it when another client
// moved the file to its chains (by writing past the inline limit) in the
// meantime: they go to the chunks instead.
func TestBufferedSmallWritesLandAfterAnotherMountMovedTheFile(t *testing.T) {
	c := testcluster.Start(t)
	a := c.Mount()
	b := secondMount(t, c)
	f, err := os.Create(filepath.Join(a, "f"))
	if err != nil {
		t.Fatal(err)
	}
	mine := randBytes(100)
	f.Write(mine)
	theirs := randBytes(6000)
	g, err := os.OpenFile(filepath.Join(b, "f"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.WriteAt(theirs, 1000); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close after the file moved: %v", err)
	}
	want := append(append(append([]byte{}, mine...), make([]byte, 900)...), theirs...)
	showsSoon(t, "both writes", func() bool {
		got, err := os.ReadFile(filepath.Join(b, "f"))
		return err == nil && bytes.Equal(got, want)
	})
}

// The same when the next holder had the file open all along: taking the
// lock, it reads what was written under the lock before, not the size it
// saw at open (MPI ranks open a shared file once, then lock, read and
// write pieces of it).
func TestALockHolderWithTheFileOpenReadsThePreviousHoldersWrites(t *testing.T) {
	c := testcluster.Start(t)
	a := c.Mount()
	b := secondMount(t, c)
	f, err := os.Create(filepath.Join(a, "shared"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	g, err := os.Open(filepath.Join(b, "shared"))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	got := make([]byte, 3<<20)
	if n, _ := g.ReadAt(got, 0); n != 0 {
		t.Fatalf("read %d bytes of an empty file", n)
	}
	lk := syscall.Flock_t{Type: syscall.F_WRLCK}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_SETLKW, &lk); err != nil {
		t.Fatal(err)
	}
	want := randBytes(2<<20 + 3)
	f.Write(want)
	lk.Type = syscall.F_UNLCK
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &lk); err != nil {
		t.Fatal(err)
	}
	lk.Type = syscall.F_RDLCK
	if err := syscall.FcntlFlock(g.Fd(), syscall.F_SETLKW, &lk); err != nil {
		t.Fatal(err)
	}
	n, _ := g.ReadAt(got, 0)
	if !bytes.Equal(got[:n], want) {
		t.Fatalf("the next lock holder read %d bytes, want the %d written under the lock", n, len(want))
	}
}
