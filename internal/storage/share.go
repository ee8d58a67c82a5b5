package storage

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Resync share. While a head copies a resync, the chunks its member missed
// have one good copy, and the copy competes with the clients' writes for
// the same CPU, network and disk. Left alone, clients writing as fast as
// they can take nearly all of it (measured on one machine: a 1 GiB resync
// slowed from 450–550 MB/s to 45–72 MB/s under a client writing 150 MB/s).
// So while this server copies a resync, the client reads and writes it
// takes as a head, and the client writes the heads of other chains
// forward to it, are admitted so that they make up at most 1-share of
// the bytes the two move together (reads take the same disk and CPU).
// Forwarded writes count because they take the same disk and CPU: with
// only its own head's writes paced, a one-chain resync under a client
// appending flat out to a file on another chain, headed by the other
// server, copied 69-113 MB/s; with them, 435-738 (TestResyncSpeed with
// TANDEM_RESYNC_STRIPE=1 and TANDEM_RESYNC_LOAD=1, 2026-11-26, three and
// six runs).
// Waiting here holds up only the forwarding head's client, never a lock
// this server's resync needs: a follower takes no chunk locks.
// Clients always get a floor of bytes a second on top, so they never
// stop, even while the resync lists buckets or waits for its member.

// DefaultResyncShare is the share of the bytes moved that a resync is
// guaranteed against client I/O. Where the disk is the bottleneck a
// half would give the resync half the disk's bandwidth. But a client's
// byte costs a server more CPU than a resync's (it goes through the page
// cache, the copy with O_DIRECT): on the test machine, with a half a
// resync under a client writing flat out copied 177–262 MB/s, and with
// three quarters 322–508 MB/s, at least the 350 that are half the disk's
// O_DIRECT bandwidth in seven runs of nine (docs/ha.md, "Resync share").
// Under the failure matrix's load (stream writers, readers checking and a
// probe, docs/ha-matrix.md), nine tenths made the heads copy at 311-409
// MB/s where three quarters gave 171-251 (2026-11-27, scenarios 1 and 4,
// two runs each, alternated), with the same client stalls and no fewer
// streams copied meanwhile: the single-copy window shrinks by a third.
// Clients always keep resyncClientFloor; an administrator rebuilding a
// whole disk under heavy client load can lower the share.
const DefaultResyncShare = 0.9

// resyncClientFloor is what clients may always read and write, in bytes
// a second, while a resync runs.
const resyncClientFloor = 16 << 20

// resyncClientBurst is the most client credit that may build up: a write
// waits only when clients really are ahead of the resync, and clients
// idle for a while do not then take the resync's share all at once.
const resyncClientBurst = 4 << 20

// resyncShare admits client reads and writes against the resync copies
// of this server (see above). newResyncShare(0) admits everything.
type resyncShare struct {
	share float64 // of the bytes moved, for the resync; 0 or 1: no pacing
	floor float64 // bytes a second clients always get
	now   func() time.Time

	// busy mirrors active != 0, so that every client request of a server
	// with no resync running passes without taking mu.
	busy atomic.Bool

	mu       sync.Mutex
	active   int           // resyncs copying
	gen      uint64        // busy periods so far
	since    time.Time     // start of the current busy period
	copied   int64         // by resyncs since then
	admitted int64         // client bytes since then
	next     uint64        // the next ticket of this period
	serving  uint64        // the ticket admitted next
	progress chan struct{} // closed when copied grows, a ticket is served or a period ends
}

// A ticket is a client request's place in line: requests are admitted
// first come, first served, so that a small one (a 4 KiB read) does not
// lose every race for the allowance to large ones behind it.
type ticket struct{ gen, n uint64 }

func newResyncShare(share float64) *resyncShare {
	return &resyncShare{share: share, floor: resyncClientFloor, now: time.Now, progress: make(chan struct{})}
}

// begin marks a resync starting; end, returned, marks it done.
func (p *resyncShare) begin() (end func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.active == 0 {
		// A busy period starts with a burst of credit for the clients.
		p.gen++
		p.since, p.copied, p.admitted = p.now(), 0, -resyncClientBurst
		p.next, p.serving = 0, 0
	}
	p.active++
	p.busy.Store(true)
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			if p.active--; p.active == 0 {
				p.busy.Store(false)
				p.wake()
			}
		})
	}
}

// copiedBytes accounts n bytes a resync copied.
func (p *resyncShare) copiedBytes(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.copied += int64(n)
	p.wake()
}

func (p *resyncShare) wake() {
	close(p.progress)
	p.progress = make(chan struct{})
}

// pace waits until a client request of n bytes fits in the clients'
// allowance, after the requests that came before it, and counts it. It
// returns at once when no resync runs.
func (p *resyncShare) pace(n int) {
	if !p.busy.Load() {
		return
	}
	tk, paced := p.enqueue()
	if !paced {
		return
	}
	for {
		ok, wait, progress := p.tryAdmit(tk, n)
		if ok {
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-progress:
		case <-t.C:
		}
		t.Stop()
	}
}

// enqueue gives a request its ticket, if requests are paced now.
func (p *resyncShare) enqueue() (tk ticket, paced bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.pacing() {
		return ticket{}, false
	}
	tk = ticket{p.gen, p.next}
	p.next++
	return tk, true
}

func (p *resyncShare) pacing() bool { return p.active > 0 && p.share > 0 && p.share < 1 }

// tryAdmit admits the request of ticket tk for n bytes if it is first in
// line and fits, or says how long to wait at most (for a request first in
// line, the time the floor alone takes to make room) and what to watch
// for an earlier chance.
func (p *resyncShare) tryAdmit(tk ticket, n int) (ok bool, wait time.Duration, progress <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.pacing() || tk.gen != p.gen {
		return true, 0, nil // the busy period it waited in is over
	}
	if tk.n != p.serving {
		return false, time.Minute, p.progress // woken when the line moves
	}
	a := p.allowance(p.now().Sub(p.since))
	// Credit left unused beyond a burst lapses: clients idle for a while
	// must not then take the resync's share all at once.
	p.admitted = max(p.admitted, a-resyncClientBurst)
	over := p.admitted + int64(n) - a
	if over <= 0 {
		p.admitted += int64(n)
		p.serving++
		p.wake()
		return true, 0, nil
	}
	return false, time.Duration(float64(over) / p.floor * float64(time.Second)), p.progress
}

// allowance is the client bytes admissible after elapsed of a busy period.
func (p *resyncShare) allowance(elapsed time.Duration) int64 {
	return int64(math.Round(p.floor*elapsed.Seconds() + float64(p.copied)*(1-p.share)/p.share))
}
