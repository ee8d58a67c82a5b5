package rpc

import (
	"encoding/binary"
	"fmt"
	"io"
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
	var hdr [lenBytes]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return buf, err
	}
	n := binary.LittleEndian.Uint32(hdr[:])
	if n > MaxFrame {
		return buf, fmt.Errorf("frame of %d bytes exceeds limit %d", n, MaxFrame)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return buf, err
	}
	return buf, nil
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
