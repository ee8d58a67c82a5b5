package client

import (
	"testing"

	"tandemfs/internal/proto"
)

// What stat shows of a file this client has open: the newest of the
// inode asked for and what the client itself committed or wrote.
func TestOverlayShowsTheSizeOfACommitThatEndedWhileTheInodeWasRead(t *testing.T) {
	// A commit (version 7, size 8192) ended after the cached copy
	// (version 6, size 4742) was read, and cleared dirty.
	st := &fileState{ino: 2, inode: inodeAt(7, 8192, 0, 0), size: 8192}
	n := inodeAt(6, 4742, 0, 0)
	st.overlay(&n)
	if n.Size != 8192 || n.Version != 7 {
		t.Fatalf("size %d version %d, want the commit's 8192 at version 7", n.Size, n.Version)
	}
}

func TestOverlayKeepsAnInodeNewerThanTheClientsOwnState(t *testing.T) {
	// Another client truncated the file after this one's last commit.
	st := &fileState{ino: 2, inode: inodeAt(7, 8192, 0, 0), size: 8192}
	n := inodeAt(9, 100, 0, 0)
	st.overlay(&n)
	if n.Size != 100 {
		t.Fatalf("size %d, want the newer inode's 100", n.Size)
	}
}

func TestOverlayAddsUncommittedWrites(t *testing.T) {
	st := &fileState{ino: 2, inode: inodeAt(7, 8192, 0, 0), size: 12288, mtime: 50, dirty: true, wrote: 4096}
	n := inodeAt(7, 8192, 40, 8192)
	st.overlay(&n)
	if n.Size != 12288 || n.Mtime != 50 || n.Written != 12288 {
		t.Fatalf("size %d mtime %d written %d, want 12288, 50, 12288", n.Size, n.Mtime, n.Written)
	}
}

// inodeAt is file 2 at a version, with a size, mtime and bytes written.
func inodeAt(version, size uint64, mtime int64, written uint64) proto.Inode {
	n := proto.Inode{Version: version, Written: written}
	n.Ino, n.Size, n.Mtime = 2, size, mtime
	return n
}

// A file unlinked while open is released to the metadata service by its
// last close, or, if that close came between the unlink's check and its
// reply, by the unlink: exactly one of the two releases it, in either
// order.
func TestAnOrphanIsReleasedOnceWhicheverComesFirstUnlinkOrLastClose(t *testing.T) {
	open := func() (*Client, *fileState) {
		st := &fileState{ino: 2, opens: 1}
		return &Client{files: map[uint64]*fileState{2: st}}, st
	}

	c, st := open()
	if !c.orphaned(2) {
		t.Fatal("an open file's unlink reply found it closed")
	}
	if !c.closed(st) {
		t.Fatal("the last close of a file marked orphan did not release it")
	}

	c, st = open()
	if c.closed(st) {
		t.Fatal("the last close of a file not yet marked orphan released it")
	}
	if c.orphaned(2) {
		t.Fatal("an unlink reply after the last close left the release to a close that already came")
	}
}

func TestOnlyTheLastCloseOfAnOrphanReleasesIt(t *testing.T) {
	st := &fileState{ino: 2, opens: 2}
	c := &Client{files: map[uint64]*fileState{2: st}}
	c.orphaned(2)
	if c.closed(st) {
		t.Fatal("the first of two closes released the orphan")
	}
	if !c.closed(st) {
		t.Fatal("the last close did not release the orphan")
	}
}
