package client

import (
	"testing"
	"time"
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
	// Its notice came first: the grant, as of 10, is refused.
	if tab.install(file, 10, 8, now) {
		t.Fatal("a grant older than a change already seen was taken")
	}
	if !tab.install(file, 11, 9, now) {
		t.Fatal("a grant as of the change was refused")
	}
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
	if tab.install(file, 19, 8, now) || !tab.install(file, 20, 8, now) {
		t.Fatal("after the watch resumed at 20: a grant as of 19 taken, or one as of 20 refused")
	}
}
