package fuse

import (
	"syscall"
	"testing"

	gofuse "github.com/hanwen/go-fuse/v2/fuse"

	"tandemfs/internal/proto"
)

func TestAttributesCarryNanosecondsAndBlocks(t *testing.T) {
	n := &proto.Inode{Attr: proto.Attr{Ino: 9, Mode: syscall.S_IFREG | 0o600, Nlink: 1, Size: 1000,
		Mtime: 1_700_000_000_123_456_789}, Stripe: proto.Stripe{ChunkSize: 4 << 20}, Written: 1000}
	var a gofuse.Attr
	fillAttr(n, &a)
	if a.Mtime != 1_700_000_000 || a.Mtimensec != 123_456_789 {
		t.Fatalf("mtime %d.%09d", a.Mtime, a.Mtimensec)
	}
	if a.Blocks != 2 || a.Blksize != 1<<20 {
		t.Fatalf("blocks %d blksize %d: want 2 and 1 MiB", a.Blocks, a.Blksize)
	}
	n.Written = 0 // a hole of 1000 bytes
	if fillAttr(n, &a); a.Blocks != 0 {
		t.Fatalf("a file of holes uses %d blocks, want 0", a.Blocks)
	}
	n.Inline = true // its bytes live in the inode
	if fillAttr(n, &a); a.Blocks != 2 {
		t.Fatalf("an inline file of 1000 bytes uses %d blocks, want 2", a.Blocks)
	}
}

func TestAReadReplyReleasesItsMemoryOnce(t *testing.T) {
	released := 0
	r := &pinnedRead{data: []byte("abc"), done: func() { released++ }}
	if s, st := r.Slices(); !st.Ok() || len(s) != 1 || string(s[0]) != "abc" || r.Size() != 3 {
		t.Fatalf("Slices() = %q, %v", s, st)
	}
	r.Done()
	r.Done()
	if released != 1 {
		t.Fatalf("memory released %d times, want once", released)
	}
}

func TestOnlyReadOnlyOpensSkipTheFlushOnClose(t *testing.T) {
	for _, c := range []struct {
		flags   uint32
		noFlush bool
	}{
		{syscall.O_RDONLY, true},
		{syscall.O_RDONLY | syscall.O_DIRECT, true},
		{syscall.O_WRONLY, false},
		{syscall.O_RDWR, false},
		{syscall.O_WRONLY | syscall.O_APPEND, false},
	} {
		if got := openReplyFlags(c.flags)&gofuse.FOPEN_NOFLUSH != 0; got != c.noFlush {
			t.Errorf("open flags %#o: no flush %v, want %v", c.flags, got, c.noFlush)
		}
	}
}
