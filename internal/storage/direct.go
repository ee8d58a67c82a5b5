package storage

import (
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Where a target cannot drop large writes behind (dropbehind.go: kernels
// before 6.14, file systems without RWF_DONTCACHE), the writes a server
// keeps for durability rather than for readers go to the disk with
// O_DIRECT when they are large and aligned: a resync's copies of whole
// chunks to a returning member, and a chain member's copy of each client
// write (clients read from the head, so the member's page cache would
// hold data nobody reads; on a one-machine cluster, every byte twice).
//
// Measured on the development VM (2026-11-22): writing 1 GiB of new data
// into the page cache costs about 3 ms of CPU per MiB (the hypervisor
// supplies every fresh page: free guest memory is handed back to the host
// in 8 MiB blocks by page reporting) and runs at about 300 MB/s with an
// fsync at the end, while O_DIRECT writes of the same data run at 700-800
// MB/s using 5% of a core. The member of a resync was CPU-bound in pwrite;
// with O_DIRECT a 1 GiB resync ran at 426-431 MB/s instead of 235-265, and
// with a client writing meanwhile at 204-386 instead of 118-145. The
// head's copy of a client write stays buffered: with O_DIRECT on both
// copies each write waited for the disk and the benchmark suite's
// sequential writes got slower (2026-11-23); with it on the member only
// they got faster (2026-11-27, docs/architecture.md "Chain replication"),
// and the storage servers' CPU per MiB fell by a third. Small and
// unaligned writes stay buffered everywhere: they need the page cache to
// merge partial blocks. Lustre's object servers write bulk data directly
// as well.
const (
	directAlign = 4096
	directMin   = 64 << 10 // smaller writes gain little and wait for the disk
)

// directWriter is a File that can write aligned data with O_DIRECT.
type directWriter interface {
	WriteDirect(b []byte, off int64) (int, error)
}

// canWriteDirect reports whether a write of n bytes at off qualifies.
func canWriteDirect(off int64, n int) bool {
	return off%directAlign == 0 && n%directAlign == 0 && n >= directMin
}

// directBufs are aligned buffers for O_DIRECT (the caller's bytes may lie
// anywhere in memory).
var directBufs sync.Pool

func alignedBuf(n int) []byte {
	if p, ok := directBufs.Get().(*[]byte); ok && cap(*p) >= n {
		return (*p)[:n]
	}
	raw := make([]byte, max(n, 1<<20)+directAlign)
	shift := (directAlign - int(uintptr(unsafe.Pointer(&raw[0]))%directAlign)) % directAlign
	b := raw[shift : shift+max(n, 1<<20)]
	return b[:n]
}

func putAlignedBuf(b []byte) {
	b = b[:cap(b)]
	directBufs.Put(&b)
}

// WriteDirect writes b at off through a second descriptor of the file
// opened with O_DIRECT (opened on first use). The kernel writes back and
// drops any cached pages of the range, so buffered readers stay coherent.
func (f *osFile) WriteDirect(b []byte, off int64) (int, error) {
	f.mu.Lock()
	if f.direct == nil && f.directErr == nil {
		f.direct, f.directErr = os.OpenFile(f.File.Name(), os.O_WRONLY|unix.O_DIRECT, 0)
	}
	d, err := f.direct, f.directErr
	f.mu.Unlock()
	if err != nil {
		return f.File.WriteAt(b, off) // a file system without O_DIRECT
	}
	if aligned(b) {
		// Straight from the request frame, which the rpc server laid
		// out to end on a page boundary (rpc.readRequest).
		return d.WriteAt(b, off)
	}
	buf := alignedBuf(len(b))
	copy(buf, b)
	n, err := d.WriteAt(buf, off)
	putAlignedBuf(buf)
	return n, err
}

// aligned reports whether b starts on an O_DIRECT boundary.
func aligned(b []byte) bool {
	return len(b) > 0 && uintptr(unsafe.Pointer(unsafe.SliceData(b)))%directAlign == 0
}
