package client

import (
	"slices"
	"testing"
	"time"

	"tandemfs/internal/proto"
)

// The rules that keep a file lease from ever vouching for attributes
// another client has changed.

const file = 9

func TestAFileLeaseIsTrustedWhileTheWatchRenewsIt(t *testing.T) {
	tab := newFileLeaseTable()
	now := time.Now()
	if !tab.install(file, 10, 8, now) {
		t.Fatal("a grant was refused")
	}
	if v, ok := tab.valid(file, now); !ok || v != 8 {
		t.Fatalf("valid = %v, version %d; want a lease at version 8", ok, v)
	}
	if _, ok := tab.valid(file, now.Add(fileLeaseTrust)); ok {
		t.Fatal("trusted past nine tenths of a term without a renewal")
	}
	// Each answered watch request renews, counted from when it was sent.
	sent := now.Add(fileLeaseTrust / 2)
	tab.renewed(sent)
	if _, ok := tab.valid(file, sent.Add(fileLeaseTrust-time.Millisecond)); !ok {
		t.Fatal("not trusted after a renewal")
	}
	// But never past its life.
	tab.renewed(now.Add(fileLeaseLife))
	if _, ok := tab.valid(file, now.Add(fileLeaseLife)); ok {
		t.Fatal("trusted past its life")
	}
}

func TestAnotherSessionsChangeEndsAFileLease(t *testing.T) {
	tab := newFileLeaseTable()
	now := time.Now()
	tab.install(file, 10, 8, now)
	if tab.foreignChange(file, 9) {
		t.Fatal("a change the grant already reflects ended the lease")
	}
	if !tab.foreignChange(file, 11) {
		t.Fatal("a later change did not end the lease")
	}
	if _, ok := tab.valid(file, now); ok {
		t.Fatal("still trusted after another session changed the file")
	}
	// Its notice came first: the grant, as of 10, is refused (and given
	// back, as the leader counts it).
	if tab.install(file, 10, 8, now) {
		t.Fatal("a grant older than a change already seen was taken")
	}
	back := giveBack(t, tab, now, file)
	if !tab.install(file, 11, 9, back) {
		t.Fatal("a grant as of the change was refused")
	}
}

// giveBack gives back the leases tab queued, which must be want, and
// returns when that came back (after now).
func giveBack(t *testing.T, tab *fileLeaseTable, now time.Time, want ...uint64) time.Time {
	t.Helper()
	given := tab.takeEvicted()
	slices.Sort(given)
	if !slices.Equal(given, want) {
		t.Fatalf("given back: %v, want %v", given, want)
	}
	back := now.Add(time.Millisecond)
	tab.releaseDone(given, back)
	return back
}

func TestABrokenWatchEndsFileLeasesAndRefusesGrantsOnTheWay(t *testing.T) {
	tab := newFileLeaseTable()
	now := time.Now()
	tab.install(file, 10, 8, now)
	tab.clear(^uint64(0))
	if _, ok := tab.valid(file, now); ok {
		t.Fatal("a lease outlived the watch")
	}
	if tab.install(file, 12, 8, now) {
		t.Fatal("a grant was taken while changes may go unseen")
	}
	tab.resumed(20)
	back := giveBack(t, tab, now, file) // the lease the watch ended, and the grant refused
	if tab.install(file, 19, 8, back) {
		t.Fatal("after the watch resumed at 20: a grant as of 19 taken")
	}
	back = giveBack(t, tab, back, file)
	if !tab.install(file, 20, 8, back) {
		t.Fatal("after the watch resumed at 20: a grant as of 20 refused")
	}
}

func TestAFullLeaseTableGivesBackItsOlderHalf(t *testing.T) {
	tab := newFileLeaseTable()
	start := time.Now()
	at := func(i int) time.Time { return start.Add(time.Duration(i) * time.Microsecond) }
	bound := proto.MaxFileLeases - fileLeaseSlack
	for i := range bound - 1 {
		if !tab.install(uint64(100+i), 10, 1, at(i)) {
			t.Fatalf("grant %d refused", i)
		}
	}
	if len(tab.takeEvicted()) != 0 {
		t.Fatal("leases given back below the bound")
	}
	// The grant that reaches the bound: the older half is trusted no
	// more, and queued to be given back.
	newest := uint64(100 + bound - 1)
	now := at(bound)
	if !tab.install(newest, 10, 1, now) {
		t.Fatal("the grant at the bound was refused")
	}
	if _, ok := tab.valid(100, now); ok {
		t.Fatal("the oldest lease is still trusted")
	}
	if _, ok := tab.valid(newest, now); !ok {
		t.Fatal("the newest lease was dropped")
	}
	given := tab.takeEvicted()
	if len(given) != bound/2 {
		t.Fatalf("%d leases given back, want the older %d", len(given), bound/2)
	}
	for _, ino := range given {
		if ino >= 100+uint64(bound/2) {
			t.Fatalf("lease on %d given back, not among the older half", ino)
		}
	}
	if tab.count() != bound-bound/2 {
		t.Fatalf("%d leases held after giving back %d of %d", tab.count(), bound/2, bound)
	}
}

func TestAGrantCrossingItsFilesReleaseIsNotTakenButGivenBack(t *testing.T) {
	tab := newFileLeaseTable()
	now := time.Now()
	tab.install(file, 10, 8, now)
	tab.clear(^uint64(0)) // the watch broke: the lease goes back
	tab.resumed(10)
	given := tab.takeEvicted()
	if len(given) != 1 || given[0] != file {
		t.Fatalf("given back after the watch broke: %v, want [%d]", given, file)
	}
	// While the release is on its way, the leader may apply it after a
	// grant of the same file: no grant of it is taken, and a refused
	// grant goes back too. Other files' grants are taken.
	if tab.install(file, 10, 8, now) {
		t.Fatal("a grant was taken while its file's release is on its way")
	}
	if !tab.install(file+1, 10, 8, now) {
		t.Fatal("another file's grant was refused")
	}
	back := now.Add(time.Millisecond)
	tab.releaseDone(given, back)
	if again := tab.takeEvicted(); len(again) != 1 || again[0] != file {
		t.Fatalf("the refused grant was not given back: %v", again)
	}
	tab.releaseDone([]uint64{file}, back.Add(time.Millisecond))
	if tab.install(file, 10, 8, back) {
		t.Fatal("a grant asked for before its file's release came back was taken")
	}
	tab.takeEvicted()
	later := back.Add(2 * time.Millisecond)
	tab.releaseDone([]uint64{file}, later)
	if !tab.install(file, 10, 8, later) {
		t.Fatal("a grant asked for after its file's release came back was refused")
	}
}
