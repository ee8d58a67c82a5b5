//go:build !linux

package stream

import "os"

// GrowPipe would enlarge f's kernel buffer if f is a pipe; only Linux lets a
// process do that, so elsewhere it does nothing.
func GrowPipe(f *os.File) {}
