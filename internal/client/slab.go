package client

import (
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The block cache's memory comes in slabs of one transparent huge page
// each, mapped outside the Go heap. Filling the cache touches memory no
// one touched before, and each first touch of a 4 KiB page is a page
// fault; on this project's test machines (paravirtualised guests) one
// costs about 17 µs, 4.4 ms per MiB, which made a cache miss that brings
// 256 KiB cost over a millisecond of CPU in faults alone. A huge page
// takes one fault for 2 MiB: 0.07–3.9 ms per MiB measured on the same
// machine, the upper end when the host must first find the memory (a
// C program touching 256 MiB, with and without MADV_HUGEPAGE). The Go
// heap uses 4 KiB pages (the runtime does not ask for huge pages), so the
// slabs are mapped here, and unmapped when the cache is no longer
// reachable.

// slabBytes is the size of one slab: one huge page on x86-64 and arm64.
const slabBytes = 2 << 20

// slabBlocks is how many blocks one slab holds.
const slabBlocks = slabBytes / cacheBlock

// newSlab returns slabBytes of zeroed memory, aligned to slabBytes and
// advised to be backed by a huge page, and a function that gives it back;
// or memory of the Go heap, if the kernel refuses the mapping.
func newSlab() (mem []byte, unmap func()) {
	// Map twice the size and keep the aligned middle: mmap aligns only
	// to 4 KiB, and a huge page needs a 2 MiB boundary.
	p, err := unix.MmapPtr(-1, 0, nil, 2*slabBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return make([]byte, slabBytes), func() {}
	}
	base := uintptr(p)
	skip := (slabBytes - base%slabBytes) % slabBytes
	if skip > 0 {
		unix.MunmapPtr(p, skip)
	}
	unix.MunmapPtr(unsafe.Add(p, skip+slabBytes), slabBytes-skip)
	start := unsafe.Add(p, skip)
	mem = unsafe.Slice((*byte)(start), slabBytes)
	// Only advice: without huge pages the slab still works, a page at a
	// time.
	unix.Madvise(mem, unix.MADV_HUGEPAGE)
	return mem, func() { unix.MunmapPtr(start, slabBytes) }
}

// slabs is the block cache's memory, slab by slab.
type slabs struct {
	mem    [][]byte
	unmaps *[]func() // shared with the cleanup, which must not reach the cache
}

// grow adds a slab.
func (s *slabs) grow(owner *blockCache) {
	if s.unmaps == nil {
		unmaps := new([]func())
		s.unmaps = unmaps
		// The slabs go back to the kernel once nothing can read them:
		// the cache (owner) holds the only slices of them, and hands
		// out copies.
		runtime.AddCleanup(owner, func(u *[]func()) {
			for _, unmap := range *u {
				unmap()
			}
		}, unmaps)
	}
	mem, unmap := newSlab()
	s.mem = append(s.mem, mem)
	*s.unmaps = append(*s.unmaps, unmap)
}

// block is block i of the cache's memory.
func (s *slabs) block(i int32) []byte {
	m := s.mem[int(i)/slabBlocks]
	o := int(i) % slabBlocks * cacheBlock
	return m[o : o+cacheBlock : o+cacheBlock]
}

// prefault maps every slab the cache can use and has the kernel back each
// with memory now (MADV_POPULATE_WRITE, which leaves the bytes as they
// are, so a slab the cache has begun to use meanwhile is safe): the first
// touch of memory is the dear part of filling the cache (see above), and
// it is then paid at start rather than by the first clients. Kernels
// before 5.14 lack the advice; the cache then fills as before, and
// prefault reports false.
func (bc *blockCache) prefault() bool {
	for n := 0; ; n++ {
		bc.mu.Lock()
		if n*slabBlocks >= bc.max {
			bc.mu.Unlock()
			return true
		}
		if n >= len(bc.slabs.mem) {
			bc.slabs.grow(bc)
		}
		mem := bc.slabs.mem[n]
		bc.mu.Unlock()
		start := time.Now()
		if err := unix.Madvise(mem, unix.MADV_POPULATE_WRITE); err != nil {
			return false
		}
		// Half a core at most: a head restarted after a failure
		// shares its host with the one serving.
		time.Sleep(time.Since(start))
	}
}
