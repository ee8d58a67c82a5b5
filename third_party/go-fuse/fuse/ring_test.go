// Copyright 2026 the Go-FUSE Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

package fuse

import "testing"

func TestRingQueueIsStuckWhenItAnsweredNothingWhileAWorkerKeptOneRequest(t *testing.T) {
	cases := []struct {
		name        string
		before, now ringQueueState
		stuck       bool
	}{
		{"idle throughout", ringQueueState{5, []uint64{0, 0}}, ringQueueState{5, []uint64{0, 0}}, false},
		{"one request held, nothing answered", ringQueueState{5, []uint64{0, 17}}, ringQueueState{5, []uint64{0, 17}}, true},
		{"one request held, others answered", ringQueueState{5, []uint64{0, 17}}, ringQueueState{6, []uint64{0, 17}}, false},
		{"a new request each time", ringQueueState{5, []uint64{16, 0}}, ringQueueState{5, []uint64{18, 0}}, false},
		{"a worker started meanwhile", ringQueueState{5, []uint64{9}}, ringQueueState{5, []uint64{9, 0, 0}}, true},
		{"the first look", ringQueueState{}, ringQueueState{0, []uint64{3}}, false},
	}
	for _, c := range cases {
		if got := c.now.stuckSince(c.before); got != c.stuck {
			t.Errorf("%s: stuck %v, want %v", c.name, got, c.stuck)
		}
	}
}
