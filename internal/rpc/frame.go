package rpc

import (
	"encoding/binary"
	"fmt"
	"io"
	"unsafe"
)

// A frame is a 4-byte little-endian length n followed by n bytes:
//
//	request:  op uint16 | payload
//	response: errno uint32 | payload (on error: a UTF-8 message)
//
// MaxFrame bounds n so that a forged length cannot make a reader allocate
// without limit; it fits the largest data request (4 MiB) plus headers.
const (
	MaxFrame   = 4<<20 + 64<<10
	lenBytes   = 4
	reqHeader  = 2
	respHeader = 4
)

// readFrame reads one frame into buf (grown if needed) and returns it.
func readFrame(r io.Reader, buf []byte) ([]byte, error) {
	n, err := readLen(r)
	if err != nil {
		return buf, err
	}
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	return buf, readBody(r, buf)
}

// Request frames of at least alignFrom bytes are read so that they end on
// a page boundary. A chunk write's data is the last field of its frame, so
// when the data is a whole number of pages long (a resync's copies are) it
// then starts on a page boundary too, and a storage server can write it
// with O_DIRECT as it lies in the frame instead of copying it into an
// aligned buffer first (internal/storage/direct.go).
const (
	pageSize  = 4096
	alignFrom = 64 << 10
)

// readRequest reads one frame into space, which it grows as needed and
// returns for the next call; frames of at least alignFrom bytes end on a
// page boundary.
func readRequest(r io.Reader, space []byte) (frame, next []byte, err error) {
	n, err := readLen(r)
	if err != nil {
		return nil, space, err
	}
	if n < alignFrom {
		if cap(space) < n {
			space = make([]byte, n)
		}
		frame = space[:n]
	} else {
		if cap(space) < n+pageSize {
			space = make([]byte, n+pageSize)
		}
		space = space[:cap(space)]
		end := n + pageGap(space, n)
		frame = space[end-n : end]
	}
	return frame, space, readBody(r, frame)
}

// pageGap is how many bytes past n the next page boundary lies, counted
// from the start of space.
func pageGap(space []byte, n int) int {
	end := uintptr(unsafe.Pointer(unsafe.SliceData(space))) + uintptr(n)
	return int((pageSize - end%pageSize) % pageSize)
}

// readLen reads a frame's length prefix and checks it against MaxFrame.
func readLen(r io.Reader) (int, error) {
	var hdr [lenBytes]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, err
	}
	n := binary.LittleEndian.Uint32(hdr[:])
	if n > MaxFrame {
		return 0, fmt.Errorf("frame of %d bytes exceeds limit %d", n, MaxFrame)
	}
	return int(n), nil
}

// readBody reads a frame's n bytes into buf.
func readBody(r io.Reader, buf []byte) error {
	if _, err := io.ReadFull(r, buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	return nil
}

// frameStart reserves room for the length prefix at the start of b.
func frameStart(b []byte) []byte { return append(b[:0], 0, 0, 0, 0) }

// frameEnd fills in the length prefix reserved by frameStart.
func frameEnd(b []byte) error { return frameEndWith(b, 0) }

// frameEndWith is frameEnd for a frame whose last extra bytes are sent
// separately after b.
func frameEndWith(b []byte, extra int) error {
	n := len(b) - lenBytes + extra
	if n > MaxFrame {
		return fmt.Errorf("message of %d bytes exceeds limit %d", n, MaxFrame)
	}
	binary.LittleEndian.PutUint32(b, uint32(n))
	return nil
}
