// Copyright 2026 the Go-FUSE Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

package fuse

import "sync/atomic"

// ringQueue counts the workers serving one CPU's queue of FUSE over
// io_uring (ring_linux.go).
type ringQueue struct {
	workers atomic.Int32 // started
	idle    atomic.Int32 // waiting in the kernel for a request
}
