// Package osthread marks the OS threads that one goroutine holds for its
// whole life (runtime.LockOSThread), such as the FUSE-over-io_uring
// workers, so that code they call can tell. On such a thread, waiting in
// a blocking system call costs one wake-up when the wait ends; parking
// the goroutine in Go's network poller costs two, across threads (the
// poller's thread readies the goroutine, then wakes the thread it is
// locked to), and on a virtual machine each wake-up across CPUs is an
// inter-processor interrupt of tens of microseconds.
package osthread

import (
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

var (
	dedicated sync.Map // thread ID -> struct{}
	count     atomic.Int32
)

// Dedicate marks the calling thread, which the calling goroutine must
// hold (runtime.LockOSThread) until it calls the returned release.
func Dedicate() (release func()) {
	tid := unix.Gettid()
	dedicated.Store(tid, struct{}{})
	count.Add(1)
	return func() {
		dedicated.Delete(tid)
		count.Add(-1)
	}
}

// Dedicated reports whether the caller runs on a marked thread. A
// goroutine that runs there is the one that holds it, so the answer
// stays true for it; for any other goroutine it is false.
func Dedicated() bool {
	if count.Load() == 0 {
		return false
	}
	_, ok := dedicated.Load(unix.Gettid())
	return ok
}
