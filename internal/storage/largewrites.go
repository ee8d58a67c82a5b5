package storage

import (
	"sync"
	"sync/atomic"
	"time"
)

// Extra Go processors while large client writes arrive (see procs.go).
// Each write of a megabyte fills that much page cache, which on the
// development VM takes milliseconds (fresh pages, docs/benchmarks.md),
// holding the server's one P meanwhile. The first sequential write of a
// fresh one-machine cluster (the suite's fio phase, 256 MiB, two copies;
// three alternated rounds, 2026-11-27) ran at 371-402 MB/s with nine Ps
// per storage server and 294-375 with one for one job, 337-381 against
// 320-343 for two; with the extra Ps taken here, 349-376 against 305-325
// and 315-351 against 293-311, random 4 KiB writes the same within the
// noise.

const (
	// largeWriteMin is the smallest write that counts: a random 4 KiB
	// write returns from the page cache in microseconds, and small
	// writes are where more Ps than cores cost (procs.go).
	largeWriteMin = 256 << 10
	// largeWriteLinger is how long the extra Ps stay after the last
	// large write: long enough that a stream of writes holds them once.
	largeWriteLinger = 500 * time.Millisecond
)

// largeWrites holds extraProcs from a large write until none has come for
// linger.
type largeWrites struct {
	linger time.Duration
	last   atomic.Int64 // when the latest large write came, in UnixNano
	// held says extraProcs is held; it changes only under mu, and writes
	// read it without mu.
	held atomic.Bool

	mu     sync.Mutex
	closed bool
	timer  *time.Timer
}

func newLargeWrites(linger time.Duration) *largeWrites { return &largeWrites{linger: linger} }

// note counts a write of n bytes.
func (l *largeWrites) note(n int) {
	if n < largeWriteMin {
		return
	}
	l.last.Store(time.Now().UnixNano())
	if l.held.Load() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held.Load() || l.closed {
		return
	}
	extraProcs.hold(procsExtra)
	l.held.Store(true)
	l.timer = time.AfterFunc(l.linger, l.expire)
}

// expire gives the Ps back once no large write came for linger, or looks
// again when it would be.
func (l *largeWrites) expire() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.held.Load() {
		return
	}
	if quiet := time.Since(time.Unix(0, l.last.Load())); quiet < l.linger {
		l.timer.Reset(l.linger - quiet)
		return
	}
	l.giveBack()
}

// close gives the Ps back for good.
func (l *largeWrites) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.held.Load() {
		l.timer.Stop()
		l.giveBack()
	}
}

func (l *largeWrites) giveBack() {
	extraProcs.release()
	l.held.Store(false)
}
