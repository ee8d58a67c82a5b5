// Copyright 2026 the Go-FUSE Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

//go:build !linux

package fuse

// FUSE over io_uring exists on Linux only.
func (ms *Server) startRing() {}

func (ms *Server) stopRing() {}

// IoUring reports whether requests are served over io_uring: never here.
func (ms *Server) IoUring() bool { return false }
