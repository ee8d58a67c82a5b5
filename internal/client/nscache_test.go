package client

import (
	"testing"

	"tandemfs/internal/proto"
)

// liveCache is a namespace cache following stream 7 from index 100.
func liveCache() *nsCache {
	c := &nsCache{}
	c.apply(&proto.WatchReply{Stream: 7, Upto: 100, Lost: true})
	return c
}

func inode(ino, version uint64) *proto.Inode {
	n := &proto.Inode{Version: version}
	n.Ino = ino
	return n
}

func TestACachedInodeGoesWhenAnotherChangeArrives(t *testing.T) {
	c := liveCache()
	c.putInode(inode(5, 90), c.watermark())
	c.apply(&proto.WatchReply{Stream: 7, Upto: 101, Events: []proto.ChangeEvent{{Index: 101, Ino: 5}}})
	if _, ok := c.getInode(5); ok {
		t.Fatal("an inode changed at 101 is still answered at version 90")
	}
}

func TestTheNoticeOfOwnChangeKeepsTheReply(t *testing.T) {
	c := liveCache()
	wm := c.watermark()
	c.putInode(inode(5, 101), wm) // the reply to this client's change at 101
	c.putDent(1, "f", 5, 101, wm)
	c.apply(&proto.WatchReply{Stream: 7, Upto: 101, Events: []proto.ChangeEvent{{Index: 101, Ino: 5}, {Index: 101, Parent: 1, Name: "f"}}})
	if _, ok := c.getInode(5); !ok {
		t.Fatal("the notice of the client's own change dropped its fresh inode")
	}
	if _, ok := c.getDent(1, "f"); !ok {
		t.Fatal("the notice of the client's own create dropped the entry")
	}
}

func TestAReplyOvertakenByAChangeIsNotCached(t *testing.T) {
	c := liveCache()
	wm := c.watermark()
	// The change at 102 arrives while the lookup (sent at 100) is in
	// flight; the lookup's answer may predate it.
	c.apply(&proto.WatchReply{Stream: 7, Upto: 102, Events: []proto.ChangeEvent{{Index: 102, Ino: 5}, {Index: 102, Parent: 1, Name: "f"}}})
	c.putInode(inode(5, 99), wm)
	c.putDent(1, "f", 5, wm, wm)
	if _, ok := c.getInode(5); ok {
		t.Fatal("an inode older than a known change was cached")
	}
	if _, ok := c.getDent(1, "f"); ok {
		t.Fatal("an entry looked up before a known change to it was cached")
	}
}

func TestAnOlderReplyDoesNotReplaceANewerOne(t *testing.T) {
	c := liveCache()
	wm := c.watermark()
	// Two calls in flight about inode 5: this client's commit (answered
	// at 104) and a lease request answered at 103, whose reply arrives
	// last, before the watch tells of either.
	c.putInode(inode(5, 104), wm)
	c.putInode(inode(5, 103), wm)
	if n, ok := c.getInode(5); !ok || n.Version != 104 {
		t.Fatalf("cached inode 5 at version %d (%v), want the newer reply's 104", n.Version, ok)
	}
}

func TestALostStreamForgetsEverything(t *testing.T) {
	c := liveCache()
	c.putInode(inode(5, 90), c.watermark())
	c.putDent(1, "f", 5, 100, c.watermark())
	c.apply(&proto.WatchReply{Stream: 8, Upto: 200, Lost: true})
	if _, ok := c.getInode(5); ok {
		t.Fatal("an inode survived a lost stream")
	}
	if _, ok := c.getDent(1, "f"); ok {
		t.Fatal("an entry survived a lost stream")
	}
}

func TestWithoutAWatchEntriesAreShortLived(t *testing.T) {
	c := liveCache()
	c.lost()
	c.putInode(inode(5, 90), c.watermark())
	c.mu.Lock()
	e := c.inodes[5]
	c.mu.Unlock()
	if e.watched {
		t.Fatal("an inode learnt without a live watch may answer for long")
	}
}

func TestOnlyOtherClientsChangesArePassedOn(t *testing.T) {
	c := liveCache()
	wm := c.watermark()
	c.putInode(inode(5, 101), wm) // this client's create at 101
	c.putDent(1, "f", 5, 101, wm)
	c.removed(1, "g", 6, 102) // and its unlink at 102
	news, all := c.apply(&proto.WatchReply{Stream: 7, Upto: 103, Events: []proto.ChangeEvent{
		{Index: 101, Ino: 5}, {Index: 101, Parent: 1, Name: "f"},
		{Index: 102, Ino: 6}, {Index: 102, Parent: 1, Name: "g"},
		{Index: 103, Ino: 7}, {Index: 103, Parent: 1, Name: "h"}, // another client's
	}})
	if all || len(news) != 2 || news[0].Ino != 7 || news[1].Name != "h" {
		t.Fatalf("passed on %+v (all %v), want only the changes at 103", news, all)
	}
}

func TestTheCacheHoldsABoundedAmountOfSmallFilesData(t *testing.T) {
	c := liveCache()
	for ino := uint64(1); ino <= 2*inlineBytesMax/proto.MaxInline; ino++ {
		n := inode(ino, 90)
		n.InlineData = make([]byte, proto.MaxInline)
		c.putInode(n, c.watermark())
	}
	held := 0
	for _, e := range c.inodes {
		held += len(e.n.InlineData)
	}
	if held > inlineBytesMax || held != c.inlineBytes {
		t.Fatalf("holding %d bytes of inline data (counted %d), limit %d", held, c.inlineBytes, inlineBytesMax)
	}
}
