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

// lineClient is a client whose request keeps its place in the share's
// line across tries, as pace does.
type lineClient struct {
	p      *resyncShare
	tk     ticket
	queued bool
}

// try tries the client's request of n bytes once.
func (c *lineClient) try(n int) (ok bool, wait time.Duration, progress <-chan struct{}) {
	if !c.queued {
		var paced bool
		if c.tk, paced = c.p.enqueue(); !paced {
			return true, 0, nil
		}
		c.queued = true
	}
	ok, wait, progress = c.p.tryAdmit(c.tk, n)
	c.queued = !ok
	return ok, wait, progress
}

func TestClientWritesPassFreelyWithoutAResync(t *testing.T) {
	now := time.Unix(1000, 0)
	c := &lineClient{p: shareAt(0.5, &now)}
	for range 1000 {
		if ok, wait, _ := c.try(4 * mib); !ok {
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
	c := &lineClient{p: p}
	written := 0
	write := func() {
		for {
			if ok, _, _ := c.try(64 << 10); !ok {
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
// used up their burst, a client, and the share's clock.
func spentShare(t *testing.T) (*resyncShare, *lineClient, *time.Time) {
	now := time.Unix(1000, 0)
	p := shareAt(0.5, &now)
	t.Cleanup(p.begin())
	c := &lineClient{p: p}
	for range resyncClientBurst / mib {
		if ok, _, _ := c.try(mib); !ok {
			t.Fatal("a write within the burst waited")
		}
	}
	return p, c, &now
}

func TestCopyingWakesWaitingWrites(t *testing.T) {
	p, c, _ := spentShare(t)
	ok, _, progress := c.try(mib)
	if ok || progress == nil {
		t.Fatal("a write past the burst passed although the resync copied nothing")
	}
	p.copiedBytes(mib)
	select {
	case <-progress:
	default:
		t.Fatal("copying did not wake the waiting writes")
	}
	if ok, wait, _ := c.try(mib); !ok {
		t.Fatalf("a write the copy made room for waits %v", wait)
	}
}

func TestClientsAlwaysGetTheFloor(t *testing.T) {
	_, c, now := spentShare(t)
	// The resync copies nothing (it lists, or its member is slow): a
	// write waits for the floor alone, and then passes.
	_, wait, _ := c.try(mib)
	want := time.Duration(float64(mib) / resyncClientFloor * float64(time.Second))
	if wait != want {
		t.Fatalf("a write waits %v for the floor, want %v", wait, want)
	}
	*now = now.Add(wait)
	if ok, wait, _ := c.try(mib); !ok {
		t.Fatalf("after the floor's time the write still waits %v", wait)
	}
}

func TestRequestsAreAdmittedInTheOrderTheyCame(t *testing.T) {
	p, big, now := spentShare(t)
	small := &lineClient{p: p}
	if ok, _, _ := big.try(4 * mib); ok {
		t.Fatal("a 4 MiB write past the burst passed")
	}
	// The resync makes room for 1 MiB: enough for a small read, but the
	// big write came first.
	p.copiedBytes(mib)
	ok, wait, progress := small.try(4 << 10)
	if ok {
		t.Fatal("a small read overtook the write that came before it")
	}
	if progress == nil || wait < time.Second {
		t.Fatalf("a request behind another waits %v for its turn, want to be woken when the line moves", wait)
	}
	*now = now.Add(3 * mib * time.Second / resyncClientFloor) // the floor makes room for the rest
	if ok, _, _ := big.try(4 * mib); !ok {
		t.Fatal("the first write in line still waits")
	}
	select {
	case <-progress:
	default:
		t.Fatal("serving the first request did not wake the next")
	}
	*now = now.Add(time.Second)
	if ok, wait, _ := small.try(4 << 10); !ok {
		t.Fatalf("the read next in line waits %v", wait)
	}
}

func TestUnusedClientCreditLapses(t *testing.T) {
	now := time.Unix(1000, 0)
	p := shareAt(0.5, &now)
	defer p.begin()()
	p.copiedBytes(1 << 30)   // a GiB copied while clients were idle
	now = now.Add(time.Hour) // and an hour of floor
	c := &lineClient{p: p}
	admitted := 0
	for {
		if ok, _, _ := c.try(mib); !ok {
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
	c := &lineClient{p: p}
	for range 100 {
		if ok, wait, _ := c.try(4 * mib); !ok {
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
