package fuse

import (
	"slices"
	"testing"
	"time"

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

// Negative entries: the kernel keeps a missing name only while a
// directory lease vouches for it, and gives every such entry back when
// the lease ends, so that another client's new name is found at once.

func vouch(d time.Duration) func() time.Duration { return func() time.Duration { return d } }

func TestAbsenceIsKeptOnlyAsLongAsALeaseVouchesForIt(t *testing.T) {
	watching := true
	k := newKernelCache(func() bool { return watching })
	k.notify = &recorder{}
	if d := k.absentTimeout(1, "x", vouch(0)); d != 0 {
		t.Fatalf("without a lease the kernel got %v for a missing name", d)
	}
	if d := k.absentTimeout(1, "y", vouch(400*time.Millisecond)); d != 400*time.Millisecond-absentMargin {
		t.Fatalf("with a lease of 400 ms the kernel got %v", d)
	}
	if d := k.absentTimeout(1, "z", vouch(time.Hour)); d != longTimeout {
		t.Fatalf("with a long lease the kernel got %v, more than %v", d, longTimeout)
	}
	watching = false
	if d := k.absentTimeout(1, "w", vouch(time.Second)); d != 0 {
		t.Fatalf("without the change stream the kernel got %v", d)
	}
	k.notify = nil
	watching = true
	if d := k.absentTimeout(1, "v", vouch(time.Second)); d != 0 {
		t.Fatalf("a cache that cannot reach the kernel gave it %v", d)
	}
}

func TestAnEndedLeaseTakesBackTheAbsencesOfItsDirectoryOnly(t *testing.T) {
	k := newKernelCache(func() bool { return true })
	rec := &recorder{}
	k.notify = rec
	k.absentTimeout(1, "a", vouch(time.Second))
	k.absentTimeout(1, "b", vouch(time.Second))
	k.absentTimeout(2, "c", vouch(time.Second))
	k.ForgetAbsent(1)
	slices.Sort(rec.names)
	if !slices.Equal(rec.names, []string{"a", "b"}) {
		t.Fatalf("the end of directory 1's lease took back %v; want [a b]", rec.names)
	}
	rec.names = nil
	k.ForgetAbsent(1)
	if len(rec.names) != 0 {
		t.Fatalf("a second end took back %v again", rec.names)
	}
	k.InvalidateAll()
	if !slices.Equal(rec.names, []string{"c"}) {
		t.Fatalf("a lost stream took back %v; want [c]", rec.names)
	}
}

func TestAnAbsenceRecordedBeforeItsLeaseEndedIsTakenBack(t *testing.T) {
	// The lease ends while the lookup asks whether it vouches: the lookup
	// still hears yes (its check came first), so the entry must be among
	// those taken back.
	k := newKernelCache(func() bool { return true })
	rec := &recorder{}
	k.notify = rec
	d := k.absentTimeout(1, "a", func() time.Duration {
		k.ForgetAbsent(1) // the watch, ending the lease meanwhile
		return time.Second
	})
	if d <= 0 || !slices.Equal(rec.names, []string{"a"}) {
		t.Fatalf("kernel got %v and the end of the lease took back %v; want a", d, rec.names)
	}
}

func TestExpiredAbsencesAreNotTakenBack(t *testing.T) {
	k := newKernelCache(func() bool { return true })
	rec := &recorder{}
	k.notify = rec
	k.absentTimeout(1, "a", vouch(absentMargin+time.Millisecond))
	time.Sleep(2*absentMargin + time.Millisecond) // kept 1 ms, recorded with the margin
	k.ForgetAllAbsent()
	if len(rec.names) != 0 {
		t.Fatalf("an absence the kernel no longer keeps was taken back: %v", rec.names)
	}
}
