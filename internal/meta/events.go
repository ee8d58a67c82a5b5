package meta

import (
	"crypto/rand"
	"encoding/binary"
	"sync"
	"time"

	"tandemfs/internal/proto"
)

// The namespace change log that clients watch (proto.WatchReq). Each
// replica keeps, in memory, the inodes and entries changed by the last
// maxEvents commands it applied, under the commands' Raft log indexes.
// Only the leader answers watches; a new leader, a restart or a snapshot
// restore starts a new stream, and a client watching the old one is told
// it lost changes, so it forgets its cache. Nothing here is durable or
// replicated: it is a notification channel, and a lost notification
// always shows up as Lost, never as silence.

// maxEvents bounds the changes kept: about 4 MiB.
const maxEvents = 1 << 16

type eventLog struct {
	mu     sync.Mutex
	stream uint64
	start  uint64 // every change with an index in (start, upto] is in ring
	upto   uint64
	ring   []proto.ChangeEvent
	wake   chan struct{} // closed and replaced at every add
}

func newEventLog(applied uint64) *eventLog {
	l := &eventLog{wake: make(chan struct{})}
	l.restart(applied)
	return l
}

// restart begins a new stream after index (a restored snapshot replaced
// the state wholesale, so earlier changes cannot be told apart).
func (l *eventLog) restart(index uint64) {
	var b [8]byte
	rand.Read(b[:])
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stream = binary.LittleEndian.Uint64(b[:]) | 1
	l.start, l.upto, l.ring = index, index, nil
	close(l.wake)
	l.wake = make(chan struct{})
}

// add records the changes of the command at index (none for a command
// that failed or changed nothing: the index still counts as seen).
func (l *eventLog) add(index uint64, changes []proto.ChangeEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if index <= l.upto {
		return
	}
	l.ring = append(l.ring, changes...)
	l.upto = index
	if len(l.ring) > maxEvents {
		l.trim(len(l.ring) - maxEvents/2)
	}
	if len(changes) > 0 {
		close(l.wake)
		l.wake = make(chan struct{})
	}
}

// trim drops at least n of the oldest changes, never splitting the
// changes of one index.
func (l *eventLog) trim(n int) {
	last := l.ring[n-1].Index
	for n < len(l.ring) && l.ring[n].Index == last {
		n++
	}
	l.start = last
	l.ring = append([]proto.ChangeEvent(nil), l.ring[n:]...)
}

// appliedIndex is the index of the last command applied: everything it
// and earlier commands changed is in the store.
func (l *eventLog) appliedIndex() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.upto
}

// current reports whether stream is the one this log tells of.
func (l *eventLog) current(stream uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return stream == l.stream
}

// since fills r with the changes after index after of stream, at most
// max of them (cut between indexes), and returns the channel closed at
// the next change.
func (l *eventLog) since(stream, after uint64, max int, r *proto.WatchReply) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	r.Stream, r.Upto, r.Lost, r.Events = l.stream, l.upto, false, nil
	if stream != l.stream || after < l.start || after > l.upto {
		r.Lost = true
		return l.wake
	}
	i := firstAfter(l.ring, after)
	evs := l.ring[i:]
	if len(evs) > max {
		cut := max
		for cut > 0 && evs[cut].Index == evs[cut-1].Index {
			cut--
		}
		if cut == 0 { // one index with more changes than max: skip it
			r.Lost = true
			return l.wake
		}
		evs = evs[:cut]
		r.Upto = evs[cut-1].Index
	}
	r.Events = append([]proto.ChangeEvent(nil), evs...)
	return l.wake
}

// firstAfter is the position of the first change with an index > after.
func firstAfter(ring []proto.ChangeEvent, after uint64) int {
	lo, hi := 0, len(ring)
	for lo < hi {
		m := (lo + hi) / 2
		if ring[m].Index <= after {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// watch answers a watch request: at once when there are changes after
// r.After (or they are lost), otherwise when one arrives, r.WaitMs
// passes, or stop closes.
func (l *eventLog) watch(r *proto.WatchReq, stop <-chan struct{}, out *proto.WatchReply) {
	wait := time.Duration(min(r.WaitMs, proto.MaxWatchWait)) * time.Millisecond
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		wake := l.since(r.Stream, r.After, proto.MaxWatchEvents, out)
		if out.Lost || len(out.Events) > 0 {
			return
		}
		select {
		case <-wake:
		case <-deadline.C:
			return
		case <-stop:
			return
		}
	}
}
