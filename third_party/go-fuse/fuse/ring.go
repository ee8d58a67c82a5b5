// Copyright 2026 the Go-FUSE Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

package fuse

import (
	"sync"
	"sync/atomic"
)

// ringQueue counts the workers serving one CPU's queue of FUSE over
// io_uring (ring_linux.go), and what they serve, for the watch that
// keeps the queue from stalling (ring_stall_linux.go).
type ringQueue struct {
	workers atomic.Int32  // started
	idle    atomic.Int32  // waiting in the kernel for a request
	commits atomic.Uint64 // replies handed to the kernel
	pumps   atomic.Int32  // pumps of this queue under way

	mu      sync.Mutex
	serving []*atomic.Uint64 // per worker: the unique ID of the request it serves, 0 if none
}

// servingSlot gives a new worker the slot in which it shows the request
// it serves.
func (q *ringQueue) servingSlot() *atomic.Uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := new(atomic.Uint64)
	q.serving = append(q.serving, s)
	return s
}

// ringQueueState is what a queue's workers serve at one moment.
type ringQueueState struct {
	commits uint64
	serving []uint64
}

func (q *ringQueue) state() ringQueueState {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := ringQueueState{commits: q.commits.Load(), serving: make([]uint64, len(q.serving))}
	for i, slot := range q.serving {
		s.serving[i] = slot.Load()
	}
	return s
}

// stuckSince reports whether, from before to now, the queue answered
// nothing while one of its workers kept serving the same request: then
// requests the kernel queued behind busy workers may be waiting for an
// answer that no worker will give.
func (now ringQueueState) stuckSince(before ringQueueState) bool {
	if now.commits != before.commits {
		return false
	}
	for i, unique := range before.serving {
		if unique != 0 && i < len(now.serving) && now.serving[i] == unique {
			return true
		}
	}
	return false
}
