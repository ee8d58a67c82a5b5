package storage

import (
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Flushing behind a stream of large client writes. Once flushBehindBytes
// of large writes have come to a target since its last flush began, the
// target has its file system written and its disk's cache flushed in the
// background (syncfs(2)), one flush at a time.
//
// Why: a large write returns once its data is in the page cache (with
// RWF_DONTCACHE its writeback starts at once, dropbehind.go), but the disk
// may keep it in a volatile cache until told to flush. An application's
// fsync at the end of a stream then waits for the flush of everything the
// stream wrote: on the test VM the disk completed nothing for a second
// at the end of two 512 MiB writes (docs/benchmarks.md), while the writes
// before it had kept both cores busy. Flushed behind, the disk empties its
// cache while the writes go on, and the fsync finds little left. fio's
// sequential write of 256 MiB with fsync at the end, fresh one-machine
// clusters, two copies, three alternated rounds (2026-11-28): one job
// 265-271 MB/s against 228-244, two jobs 307-317 against 263-287; random
// 4 KiB writes after them 3,580-4,198 IOPS against 3,174-3,628; two jobs
// of 1 GiB 335 and 354 against 336 and 324.
//
// It is only a hint to the disk: what a client's fsync makes durable is
// still made so by that fsync (Target.Sync), and a failed flush is only
// logged. syncfs reports errors from the file system's own record, so it
// takes no error a file's fsync would otherwise report. It also writes
// what other programs left dirty on the same file system, one more reason
// to give targets disks of their own. Small writes do not count: a stream
// of random 4 KiB writes has no end to shorten, and each flush stalls it.
const (
	flushBehindBytes = 64 << 20
	flushBehindMin   = dropBehindMin
	// flushBehindQuiet is how long after logging a failed flush the next
	// failures go unlogged.
	flushBehindQuiet = time.Minute
)

// flushBehind flushes a target's file system behind its large writes.
type flushBehind struct {
	pending atomic.Int64 // bytes of large writes since the last flush began
	running atomic.Bool
	logged  atomic.Int64 // when a failure was last logged, in UnixNano

	// flush, if set, stands in for syncFS (tests).
	flush atomic.Pointer[func(dir string) error]
}

// wrote counts a client's write of n bytes to t, and starts a flush of t's
// file system if enough large writes came since the last began and none
// is running.
func (t *Target) wrote(n int) {
	f := &t.behind
	if n < flushBehindMin || f.pending.Add(int64(n)) < flushBehindBytes || !f.running.CompareAndSwap(false, true) {
		return
	}
	f.pending.Store(0)
	go t.flushNow()
}

// flushNow runs one flush of t's file system.
func (t *Target) flushNow() {
	f := &t.behind
	defer f.running.Store(false)
	flush := syncFS
	if p := f.flush.Load(); p != nil {
		flush = *p
	}
	t0 := time.Now()
	err := flush(t.dir)
	flushBehindFlushes.Inc()
	flushBehindSeconds.Add(time.Since(t0).Seconds())
	if err == nil {
		return
	}
	flushBehindErrors.Inc()
	now := time.Now().UnixNano()
	if last := f.logged.Load(); now-last >= int64(flushBehindQuiet) && f.logged.CompareAndSwap(last, now) {
		t.logf("storage: target %s: flushing its file system behind large writes failed: %v (clients' fsyncs report their own errors)", t.dir, err)
	}
}

// syncFS writes the file system holding directory dir and flushes its
// disk's cache.
func syncFS(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Syncfs(fd)
}
