package fuse

import (
	"slices"
	"testing"

	gofuse "github.com/hanwen/go-fuse/v2/fuse"
)

// recorder stands in for the kernel: it notes what it is told to drop.
type recorder struct {
	inodes []uint64
	names  []string
}

func (r *recorder) InodeNotify(node uint64, off, length int64) gofuse.Status {
	r.inodes = append(r.inodes, node)
	return gofuse.OK
}

func (r *recorder) EntryNotify(parent uint64, name string) gofuse.Status {
	r.names = append(r.names, name)
	return gofuse.OK
}

func TestLongTimeoutsOnlyWhileWatchingAndAllTakenBack(t *testing.T) {
	watching := false
	k := newKernelCache(func() bool { return watching })
	rec := &recorder{}
	k.notify = rec
	if d := k.entryTimeout(1, "a", 5); d != shortTimeout {
		t.Fatalf("without a watch the kernel got %v", d)
	}
	watching = true
	if d := k.entryTimeout(1, "b", 6); d != longTimeout {
		t.Fatalf("with a watch the kernel got %v", d)
	}
	if d := k.attrTimeout(7); d != longTimeout {
		t.Fatalf("with a watch the kernel got %v for attributes", d)
	}
	k.InvalidateAll()
	slices.Sort(rec.inodes)
	if len(rec.names) != 1 || rec.names[0] != "b" || !slices.Equal(rec.inodes, []uint64{6, 7}) {
		t.Fatalf("a lost stream took back names %v and inodes %v; want [b] and [6 7]", rec.names, rec.inodes)
	}
}

func TestWhenFullNewRepliesGetShortTimeouts(t *testing.T) {
	k := newKernelCache(func() bool { return true })
	k.notify = &recorder{}
	for i := uint64(0); i < maxLeases; i++ {
		k.attrTimeout(i)
	}
	if d := k.attrTimeout(maxLeases + 1); d != shortTimeout {
		t.Fatalf("past %d long timeouts the kernel got %v", maxLeases, d)
	}
}
