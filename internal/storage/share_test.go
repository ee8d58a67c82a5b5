package storage

import (
	"testing"
	"time"
)

// shareAt returns a resyncShare with share s whose clock is *now.
func shareAt(s float64, now *time.Time) *resyncShare {
	p := newResyncShare(s)
	p.now = func() time.Time { return *now }
	return p
}

const mib = 1 << 20

func TestClientWritesPassFreelyWithoutAResync(t *testing.T) {
	now := time.Unix(1000, 0)
	p := shareAt(0.5, &now)
	for range 1000 {
		if ok, wait, _ := p.tryAdmit(4 * mib); !ok {
			t.Fatalf("a client write waited %v with no resync running", wait)
		}
	}
}

// clientBytesDuring has a resync with share s copy copies MiB, a MiB at
// a time and in no time, while clients write 64 KiB pieces whenever they
// may, and returns what the clients wrote.
func clientBytesDuring(t *testing.T, s float64, copies int) int {
	now := time.Unix(1000, 0)
	p := shareAt(s, &now)
	defer p.begin()()
	written := 0
	write := func() {
		for {
			if ok, _, _ := p.tryAdmit(64 << 10); !ok {
				return
			}
			written += 64 << 10
		}
	}
	write()
	for range copies {
		p.copiedBytes(mib)
		write()
	}
	return written
}

func TestClientWritesKeepToTheirShareOfAResync(t *testing.T) {
	cases := []struct {
		share float64
		want  int // MiB clients write while the resync copies 64 MiB
	}{
		{0.5, 64}, // as much as the resync
		{0.8, 16}, // a quarter
		{0.2, 256},
	}
	for _, c := range cases {
		got := clientBytesDuring(t, c.share, 64)
		if want := c.want*mib + resyncClientBurst; got != want {
			t.Errorf("share %g: clients wrote %d MiB while the resync copied 64, want %d (with the burst)", c.share, got/mib, want/mib)
		}
	}
}

// spentShare returns a share of 0.5 in a busy period whose clients have
// used up their burst, and the share's clock.
func spentShare(t *testing.T) (*resyncShare, *time.Time) {
	now := time.Unix(1000, 0)
	p := shareAt(0.5, &now)
	t.Cleanup(p.begin())
	for range resyncClientBurst / mib {
		p.tryAdmit(mib)
	}
	return p, &now
}

func TestCopyingWakesWaitingWrites(t *testing.T) {
	p, _ := spentShare(t)
	ok, _, progress := p.tryAdmit(mib)
	if ok || progress == nil {
		t.Fatal("a write past the burst passed although the resync copied nothing")
	}
	p.copiedBytes(mib)
	select {
	case <-progress:
	default:
		t.Fatal("copying did not wake the waiting writes")
	}
	if ok, wait, _ := p.tryAdmit(mib); !ok {
		t.Fatalf("a write the copy made room for waits %v", wait)
	}
}

func TestClientsAlwaysGetTheFloor(t *testing.T) {
	p, now := spentShare(t)
	// The resync copies nothing (it lists, or its member is slow): a
	// write waits for the floor alone, and then passes.
	_, wait, _ := p.tryAdmit(mib)
	want := time.Duration(float64(mib) / resyncClientFloor * float64(time.Second))
	if wait != want {
		t.Fatalf("a write waits %v for the floor, want %v", wait, want)
	}
	*now = now.Add(wait)
	if ok, wait, _ := p.tryAdmit(mib); !ok {
		t.Fatalf("after the floor's time the write still waits %v", wait)
	}
}

func TestUnusedClientCreditLapses(t *testing.T) {
	now := time.Unix(1000, 0)
	p := shareAt(0.5, &now)
	defer p.begin()()
	p.copiedBytes(1 << 30)   // a GiB copied while clients were idle
	now = now.Add(time.Hour) // and an hour of floor
	admitted := 0
	for {
		if ok, _, _ := p.tryAdmit(mib); !ok {
			break
		}
		admitted += mib
	}
	if admitted != resyncClientBurst {
		t.Fatalf("idle clients then wrote %d bytes at once, want the burst of %d", admitted, resyncClientBurst)
	}
}

func TestTheEndOfTheResyncReleasesWaitingWrites(t *testing.T) {
	p := newResyncShare(0.5)
	p.floor = 1 // a byte a second: only the end can release the write
	end := p.begin()
	for range resyncClientBurst / mib {
		p.pace(mib)
	}
	done := make(chan struct{})
	go func() {
		p.pace(mib)
		close(done)
	}()
	select {
	case <-done:
		t.Fatal("a write past the allowance did not wait")
	case <-time.After(50 * time.Millisecond):
	}
	end()
	end() // twice is harmless
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the write still waits after the resync ended")
	}
}

func TestShareZeroDoesNotPace(t *testing.T) {
	now := time.Unix(1000, 0)
	p := shareAt(0, &now)
	defer p.begin()()
	for range 100 {
		if ok, wait, _ := p.tryAdmit(4 * mib); !ok {
			t.Fatalf("share 0 paced a write: %v", wait)
		}
	}
}

func TestAServerRefusesAShareOutOfRange(t *testing.T) {
	for _, share := range []float64{-0.1, 1, 2} {
		_, err := Start(Config{Listen: "127.0.0.1:0", MetaAddrs: []string{"127.0.0.1:1"}, Secret: []byte("s"),
			TargetDirs: []string{t.TempDir()}, ResyncShare: share})
		if err == nil {
			t.Fatalf("a server started with resync share %g", share)
		}
	}
}
