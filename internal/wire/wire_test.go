package wire

import (
	"bytes"
	"errors"
	"testing"
)

func TestFieldsRoundTrip(t *testing.T) {
	e := NewEnc(nil)
	e.U8(7)
	e.Bool(true)
	e.U16(65000)
	e.U32(1 << 31)
	e.U64(1<<63 + 5)
	e.I64(-42)
	e.Bytes([]byte("data"))
	e.String("name")
	e.U32s([]uint32{1, 2, 3})

	d := NewDec(e.B)
	if d.U8() != 7 || !d.Bool() || d.U16() != 65000 || d.U32() != 1<<31 || d.U64() != 1<<63+5 || d.I64() != -42 {
		t.Fatal("integers changed in a round trip")
	}
	if !bytes.Equal(d.Bytes(10), []byte("data")) || d.String(10) != "name" {
		t.Fatal("strings changed in a round trip")
	}
	if v := d.U32s(10); len(v) != 3 || v[2] != 3 {
		t.Fatalf("list %v", v)
	}
	if err := d.Finish(); err != nil {
		t.Fatal(err)
	}
}

func TestTruncatedInputIsAnErrorThatSticks(t *testing.T) {
	d := NewDec([]byte{1, 2})
	if d.U32() != 0 || !errors.Is(d.Err(), ErrShort) {
		t.Fatalf("reading 4 bytes from 2: err %v", d.Err())
	}
	if d.U8() != 0 {
		t.Fatal("a decoder that failed must return zero values")
	}
}

func TestLengthsBeyondTheLimitAreRefused(t *testing.T) {
	e := NewEnc(nil)
	e.Bytes(make([]byte, 100))
	d := NewDec(e.B)
	if d.Bytes(99) != nil || d.Err() == nil {
		t.Fatal("a 100-byte field passed a limit of 99")
	}
}

func TestForgedCountsCannotForceAllocation(t *testing.T) {
	e := NewEnc(nil)
	e.U32(1 << 30) // claims a billion items, holds none
	d := NewDec(e.B)
	if v := d.U32s(1 << 31); v != nil || d.Err() == nil {
		t.Fatal("a count larger than the input was accepted")
	}
}

func TestTrailingBytesAreRefused(t *testing.T) {
	d := NewDec([]byte{1, 2, 3})
	d.U8()
	if d.Finish() == nil {
		t.Fatal("two trailing bytes went unnoticed")
	}
}

func TestBoolMustBeZeroOrOne(t *testing.T) {
	d := NewDec([]byte{2})
	d.Bool()
	if d.Err() == nil {
		t.Fatal("a bool of 2 was accepted")
	}
}
