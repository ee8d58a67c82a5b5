// Copyright 2026 the Go-FUSE Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

package fuse

// A queue of FUSE over io_uring can stall, and this unsticks it.
//
// The kernel gives a request to an entry waiting in its queue; when none
// waits, it queues the request, and hands queued requests only to an
// entry that commits a reply (COMMIT_AND_FETCH takes the oldest), or to
// one waiting when a background request arrives. An entry registered
// later gets only requests that arrive later. So when every entry a queue
// had is busy with a request that waits for another request (a lock
// waited for, and the holder's close or unlock queued behind it), the
// queue stalls for good, however many workers start afterwards: a burst
// of flock(1) waiters on one CPU did so (24 of them, all waiting out
// their timeout).
//
// The watch: every ringStallCheck, a queue that answered nothing while
// one of its workers kept serving the same request is pumped: a thread
// on that queue's CPU opens and closes go-fuse's own poll-hack file
// (LOOKUP, OPEN, FLUSH and RELEASE, which go-fuse answers itself). A
// waiting worker serves them and, with each commit, takes a queued
// request; the RELEASE, a background request, takes one too. Pumped
// until it answers again, the queue drains. A pump where nothing was
// queued costs four requests.

import (
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	ringStallCheck = 100 * time.Millisecond
	// maxRingPumps bounds the pumps of one queue under way: a pump's
	// request can itself be queued, when a burst takes the worker it
	// waited for, and then waits for the queue to drain.
	maxRingPumps = 8
)

// watchRingQueues pumps stuck queues until done is closed.
func (ms *Server) watchRingQueues(done <-chan struct{}) {
	tick := time.NewTicker(ringStallCheck)
	defer tick.Stop()
	before := make([]ringQueueState, len(ms.ringQueues))
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		for qid := range ms.ringQueues {
			q := &ms.ringQueues[qid]
			now := q.state()
			if now.stuckSince(before[qid]) {
				ms.tryPumpRingQueue(qid)
			}
			before[qid] = now
		}
	}
}

// pumpEveryRingQueue pumps each queue once.
func (ms *Server) pumpEveryRingQueue() {
	for qid := range ms.ringQueues {
		ms.tryPumpRingQueue(qid)
	}
}

// tryPumpRingQueue pumps queue qid unless maxRingPumps are under way.
func (ms *Server) tryPumpRingQueue(qid int) {
	q := &ms.ringQueues[qid]
	if q.pumps.Add(1) > maxRingPumps {
		q.pumps.Add(-1)
		return
	}
	go ms.pumpRingQueue(qid)
}

// pumpRingQueue makes requests on queue qid's CPU, so that a worker
// waiting there commits replies and, with them, takes queued requests.
func (ms *Server) pumpRingQueue(qid int) {
	q := &ms.ringQueues[qid]
	defer q.pumps.Add(-1)
	// The kernel queues a request on the CPU its task runs on. The
	// goroutine exits locked, so its pinned thread goes with it.
	runtime.LockOSThread()
	var cpu unix.CPUSet
	cpu.Set(qid)
	if unix.SchedSetaffinity(0, &cpu) != nil {
		return
	}
	// A pump request that finds no worker waiting is queued behind the
	// rest; so wait for one (the queues start more while few wait).
	for i := 0; q.idle.Load() == 0; i++ {
		if i == 0 && q.workers.Load() < maxRingWorkers {
			ms.startRingWorker(qid)
		}
		if i == 1000 {
			return
		}
		time.Sleep(time.Millisecond)
	}
	fd, err := syscall.Open(filepath.Join(ms.mountPoint, pollHackName), syscall.O_RDONLY, 0)
	if err == nil {
		syscall.Close(fd)
	}
}
