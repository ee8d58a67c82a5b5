package client

import "sync"

// Memory for data on its way: copies of written data until the storage
// servers have them (write-behind), and chunks fetched ahead of a reader.
// Both are mostly 1 MiB (the largest FUSE write, the default chunk size),
// and share one free list of 1 MiB buffers that the garbage collector
// never empties. A page taken fresh from the operating system costs this
// project's paravirtualised test machines about 17 µs to fault in, 4.4 ms
// per MiB, and a sync.Pool is emptied by every other collection; with the
// shared list a sequential read after a write finds the write's buffers
// already in memory (docs/benchmarks.md, notes of 2026-11-28, 13:55–15:20).

const mib = 1 << 20

// keptMiBBuffers bounds the 1 MiB buffers kept free: more are made when
// more are in use at once, and those beyond the bound are left to the
// collector when they come back.
const keptMiBBuffers = 32

var freeMiB = make(chan *[]byte, keptMiBBuffers)

// getMiB returns a 1 MiB buffer, a kept one if there is one.
func getMiB() *[]byte {
	select {
	case p := <-freeMiB:
		return p
	default:
		b := make([]byte, mib)
		return &b
	}
}

// putMiB gives back a buffer of getMiB, which must not be used after.
func putMiB(p *[]byte) {
	select {
	case freeMiB <- p:
	default:
	}
}

// getBuf returns an empty buffer with room for n bytes, for putBuf.
func getBuf(n int) []byte {
	if n <= mib {
		return (*getMiB())[:0]
	}
	if b, ok := bufPool.Get().(*[]byte); ok && cap(*b) >= n {
		return (*b)[:0]
	}
	return make([]byte, 0, n)
}

// putBuf gives back a buffer of getBuf, which must not be used after.
func putBuf(b []byte) {
	switch c := cap(b); {
	case c == mib:
		full := b[:mib]
		putMiB(&full)
	case c <= 4<<20:
		bufPool.Put(&b)
	}
}

// bufPool keeps buffers of getBuf larger than 1 MiB.
var bufPool sync.Pool

// chunkBufs pools readahead memory of other sizes than 1 MiB by size
// class (powers of two up to maxPooledChunk); larger chunks are allocated
// and left to the collector.
var chunkBufs [maxPooledShift + 1]sync.Pool

const (
	maxPooledShift = 23 // 8 MiB
	maxPooledChunk = 1 << maxPooledShift
)

func sizeClass(n int) int {
	shift := 12
	for 1<<shift < n {
		shift++
	}
	return shift
}

// getChunkBuf returns a buffer of at least n bytes, for putChunkBuf.
func getChunkBuf(n int) *[]byte {
	if n > maxPooledChunk {
		b := make([]byte, n)
		return &b
	}
	class := sizeClass(n)
	if 1<<class == mib {
		return getMiB()
	}
	if p, ok := chunkBufs[class].Get().(*[]byte); ok {
		return p
	}
	b := make([]byte, 1<<class)
	return &b
}

// putChunkBuf gives back a buffer of getChunkBuf, which must not be used
// after.
func putChunkBuf(p *[]byte) {
	switch c := cap(*p); {
	case c == mib:
		putMiB(p)
	case c <= maxPooledChunk && c == 1<<sizeClass(c):
		chunkBufs[sizeClass(c)].Put(p)
	}
}

// ReserveBuffers fills the kept list with 1 MiB buffers whose memory is
// already faulted in, in the background, so that a mount's first large
// reads and writes do not pay for it. A mount calls it once; a short-lived
// command that reads or writes little has no use for it.
func ReserveBuffers() {
	go func() {
		for range keptMiBBuffers {
			b := make([]byte, mib)
			for i := 0; i < len(b); i += 4096 {
				b[i] = 0 // a write faults the page in; a fresh one reads as zeros without
			}
			putMiB(&b)
		}
	}()
}
