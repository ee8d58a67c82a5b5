package client

import (
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// drainFreeMiB empties the shared free list, so that a test sees only
// the buffers it gives back itself.
func drainFreeMiB() {
	for {
		select {
		case <-freeMiB:
		default:
			return
		}
	}
}

func TestAWriteBehindBufferIsReusedForTheNextReadaheadChunk(t *testing.T) {
	drainFreeMiB()
	w := getBuf(128 << 10)
	if len(w) != 0 || cap(w) != mib {
		t.Fatalf("getBuf(128 KiB) = len %d cap %d, want an empty 1 MiB buffer", len(w), cap(w))
	}
	w = append(w, "written"...)
	putBuf(w)

	r := getChunkBuf(mib)
	if len(*r) != mib || &(*r)[0] != &w[:1][0] {
		t.Fatal("the 1 MiB readahead chunk did not reuse the buffer the write gave back")
	}
	putChunkBuf(r)
	if again := getBuf(mib); &again[:1][0] != &(*r)[0] {
		t.Fatal("the readahead chunk given back was not handed out again")
	}
}

func TestOnlyABoundedNumberOfFreeBuffersIsKept(t *testing.T) {
	drainFreeMiB()
	held := make([]*[]byte, keptMiBBuffers+5)
	for i := range held {
		held[i] = getMiB()
	}
	for _, p := range held {
		putMiB(p)
	}
	if n := len(freeMiB); n != keptMiBBuffers {
		t.Fatalf("%d buffers kept, want %d", n, keptMiBBuffers)
	}
	drainFreeMiB()
}

func TestBuffersOfOtherSizesStayOutOfTheMiBList(t *testing.T) {
	drainFreeMiB()
	putChunkBuf(getChunkBuf(256 << 10))
	putBuf(make([]byte, 0, 2*mib))
	if n := len(freeMiB); n != 0 {
		t.Fatalf("%d buffers of other sizes went into the 1 MiB list", n)
	}
	if b := getChunkBuf(3 << 20); len(*b) != 4<<20 {
		t.Fatalf("a 3 MiB chunk got %d bytes, want its size class, 4 MiB", len(*b))
	}
}

func TestReservedBuffersAreKeptWithTheirMemoryFaultedIn(t *testing.T) {
	drainFreeMiB()
	ReserveBuffers()
	deadline := time.Now().Add(10 * time.Second)
	for len(freeMiB) < keptMiBBuffers {
		if time.Now().After(deadline) {
			t.Fatalf("%d buffers reserved after 10 s, want %d", len(freeMiB), keptMiBBuffers)
		}
		time.Sleep(10 * time.Millisecond)
	}
	p := getMiB()
	defer putMiB(p)
	b := *p
	if uintptr(unsafe.Pointer(&b[0]))%4096 != 0 {
		t.Skip("buffer not page-aligned: residency cannot be asked for")
	}
	vec := make([]byte, mib/4096)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatalf("mincore: %v", errno)
	}
	for i, v := range vec {
		if v&1 == 0 {
			t.Fatalf("page %d of a reserved buffer is not in memory", i)
		}
		if b[i*4096] != 0 {
			t.Fatalf("a reserved buffer holds %d, not zeros", b[i*4096])
		}
	}
	drainFreeMiB()
}
