// Package wire is TandemFS's binary encoding: little-endian fixed-width
// integers and length-prefixed byte strings, with a decoder that never
// panics and never allocates more than the input it was given.
//
// Every message that crosses the network is encoded with an Enc and decoded
// with a Dec. The decoder keeps the first error it meets and returns zero
// values afterwards, so message decoders can read all fields and check
// Err() once at the end.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// ErrShort means the input ended before a field did.
var ErrShort = errors.New("wire: message truncated")

// Enc appends encoded fields to a byte slice.
type Enc struct {
	B []byte
	// Tail, set by a reply's handler, is bytes the transport sends after
	// B straight from a file, with sendfile(2) (see FileTail).
	Tail *FileTail
}

// FileTail is the last N bytes of a reply, at Off of the open file FD,
// which the transport sends without reading them into memory. It owns FD:
// the transport closes it once the bytes are sent, or the reply fails.
type FileTail struct {
	FD  int
	Off int64
	N   int
}

// NewEnc returns an encoder that appends to buf[:0].
func NewEnc(buf []byte) *Enc { return &Enc{B: buf[:0]} }

func (e *Enc) U8(v uint8) { e.B = append(e.B, v) }

func (e *Enc) Bool(v bool) {
	if v {
		e.B = append(e.B, 1)
	} else {
		e.B = append(e.B, 0)
	}
}

func (e *Enc) U16(v uint16) { e.B = binary.LittleEndian.AppendUint16(e.B, v) }
func (e *Enc) U32(v uint32) { e.B = binary.LittleEndian.AppendUint32(e.B, v) }
func (e *Enc) U64(v uint64) { e.B = binary.LittleEndian.AppendUint64(e.B, v) }
func (e *Enc) I64(v int64)  { e.U64(uint64(v)) }

// Bytes writes a 32-bit length followed by the bytes.
func (e *Enc) Bytes(b []byte) {
	e.U32(uint32(len(b)))
	e.B = append(e.B, b...)
}

// String writes a string the same way as Bytes.
func (e *Enc) String(s string) {
	e.U32(uint32(len(s)))
	e.B = append(e.B, s...)
}

// U32s writes a count followed by the values.
func (e *Enc) U32s(v []uint32) {
	e.U32(uint32(len(v)))
	for _, x := range v {
		e.U32(x)
	}
}

// U64s writes a count followed by the values.
func (e *Enc) U64s(v []uint64) {
	e.U32(uint32(len(v)))
	for _, x := range v {
		e.U64(x)
	}
}

// Dec reads fields from a byte slice. The first error sticks.
type Dec struct {
	b   []byte
	err error
}

// NewDec returns a decoder over b. Byte slices it returns alias b.
func NewDec(b []byte) *Dec { return &Dec{b: b} }

// Err is the first error met, or nil.
func (d *Dec) Err() error { return d.err }

// Fail records err unless an error is already recorded.
func (d *Dec) Fail(err error) {
	if d.err == nil {
		d.err = err
	}
}

// Rest returns the undecoded input.
func (d *Dec) Rest() []byte { return d.b }

// Finish returns the first error, or an error if input is left over.
func (d *Dec) Finish() error {
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("wire: %d unexpected trailing bytes", len(d.b))
	}
	return d.err
}

func (d *Dec) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b) {
		d.err = ErrShort
		return nil
	}
	p := d.b[:n:n]
	d.b = d.b[n:]
	return p
}

func (d *Dec) U8() uint8 {
	p := d.take(1)
	if p == nil {
		return 0
	}
	return p[0]
}

func (d *Dec) Bool() bool {
	v := d.U8()
	if v > 1 {
		d.Fail(fmt.Errorf("wire: bad bool %d", v))
		return false
	}
	return v == 1
}

func (d *Dec) U16() uint16 {
	p := d.take(2)
	if p == nil {
		return 0
	}
	return binary.LittleEndian.Uint16(p)
}

func (d *Dec) U32() uint32 {
	p := d.take(4)
	if p == nil {
		return 0
	}
	return binary.LittleEndian.Uint32(p)
}

func (d *Dec) U64() uint64 {
	p := d.take(8)
	if p == nil {
		return 0
	}
	return binary.LittleEndian.Uint64(p)
}

func (d *Dec) I64() int64 { return int64(d.U64()) }

// Bytes reads a length-prefixed byte string of at most max bytes. The result
// aliases the decoder's input.
func (d *Dec) Bytes(max int) []byte {
	n := d.U32()
	if d.err != nil {
		return nil
	}
	if uint64(n) > uint64(max) || n > math.MaxInt32 {
		d.Fail(fmt.Errorf("wire: field of %d bytes exceeds limit %d", n, max))
		return nil
	}
	return d.take(int(n))
}

// String reads a length-prefixed string of at most max bytes.
func (d *Dec) String(max int) string { return string(d.Bytes(max)) }

// U32s reads a count-prefixed list of at most max values.
func (d *Dec) U32s(max int) []uint32 {
	n := d.Count(max, 4)
	if n == 0 {
		return nil
	}
	v := make([]uint32, n)
	for i := range v {
		v[i] = d.U32()
	}
	return v
}

// U64s reads a count-prefixed list of at most max values.
func (d *Dec) U64s(max int) []uint64 {
	n := d.Count(max, 8)
	if n == 0 {
		return nil
	}
	v := make([]uint64, n)
	for i := range v {
		v[i] = d.U64()
	}
	return v
}

// Count reads a list length, refusing more than max items or more items than
// the remaining input could hold at minSize bytes each, so that a forged
// count cannot make the reader allocate without bound.
func (d *Dec) Count(max, minSize int) int {
	n := d.U32()
	if d.err != nil {
		return 0
	}
	if uint64(n) > uint64(max) {
		d.Fail(fmt.Errorf("wire: list of %d items exceeds limit %d", n, max))
		return 0
	}
	if minSize > 0 && uint64(n)*uint64(minSize) > uint64(len(d.b)) {
		d.Fail(ErrShort)
		return 0
	}
	return int(n)
}
