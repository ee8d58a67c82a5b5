package client

import (
	"errors"
	"testing"
	"time"

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

// Two threads fsync one file at once: the second returns only after the
// sync of the chunks the first took, which hold the second's writes too.
func TestAnFsyncWaitsForTheChunkSyncOfAnotherThatTookItsChunks(t *testing.T) {
	st := &fileState{ino: 2, written: map[chunkKey]struct{}{{1, 0}: {}}}
	entered, release := make(chan struct{}), make(chan struct{})
	first := make(chan error)
	go func() {
		first <- st.syncWritten(func(w map[chunkKey]struct{}) error {
			close(entered)
			<-release
			return nil
		})
	}()
	<-entered
	second := make(chan error)
	go func() {
		second <- st.syncWritten(func(w map[chunkKey]struct{}) error {
			if len(w) != 0 {
				t.Errorf("the second fsync was given %v, already synced by the first", w)
			}
			return nil
		})
	}()
	select {
	case <-second:
		t.Fatal("an fsync returned while the sync of the chunks it wrote still ran")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
}

func TestChunksWhoseSyncFailedAreSyncedNextTime(t *testing.T) {
	st := &fileState{ino: 2, written: map[chunkKey]struct{}{{1, 0}: {}}}
	if err := st.syncWritten(func(map[chunkKey]struct{}) error { return errors.New("EIO") }); err == nil {
		t.Fatal("a failed chunk sync was not reported")
	}
	var again map[chunkKey]struct{}
	st.syncWritten(func(w map[chunkKey]struct{}) error { again = w; return nil })
	if _, ok := again[chunkKey{1, 0}]; !ok {
		t.Fatalf("the next fsync synced %v, not the chunk whose sync failed", again)
	}
}

// A failed write-behind request is reported once to each handle open on
// the file, at its next write, flush or fsync, as Linux reports writeback
// errors to every open file.
func TestAFailedWriteIsReportedOnceToEveryHandleOpenOnTheFile(t *testing.T) {
	st := &fileState{ino: 2}
	a, b := &Handle{st: st, errSeq: st.errSample()}, &Handle{st: st, errSeq: st.errSample()}
	st.setErr(errors.New("ENOSPC"))
	st.setErr(errors.New("ENOSPC")) // another request of the same write
	for _, h := range []*Handle{a, b} {
		if err := h.takeErr(); err == nil {
			t.Fatal("a handle open when a write failed did not report it")
		}
		if err := h.takeErr(); err != nil {
			t.Fatalf("a handle reported one failure twice: %v", err)
		}
	}
	if later := (&Handle{st: st, errSeq: st.errSample()}); later.takeErr() != nil {
		t.Fatal("a handle opened after the failure was reported reported it again")
	}
	st.setErr(errors.New("EIO"))
	if err := a.takeErr(); err == nil || err.Error() != "EIO" {
		t.Fatalf("a second failure after the first was reported: %v, want EIO", err)
	}
}

func TestAFailureNobodyReportedReachesTheNextOpener(t *testing.T) {
	st := &fileState{ino: 2}
	st.setErr(errors.New("ENOSPC")) // its writer closed without fsync, or died
	if err := (&Handle{st: st, errSeq: st.errSample()}).takeErr(); err == nil {
		t.Fatal("a failure no handle had reported was not reported to the next opener")
	}
}
