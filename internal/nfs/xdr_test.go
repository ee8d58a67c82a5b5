package nfs

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"testing"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv3"
)

// The WRITE arguments a client sends decode to exactly its data, and a
// WRITE whose data stops short of the length it claims is refused (the
// vendored go-xdr reads opaque data into a slice of its length, grown as
// the bytes arrive: third_party/go-xdr/patch.diff).

func encodedWrite(t *testing.T, data []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	a := nfsv3.Write3args{File: nfsv3.NfsFh3{Data: []byte("handle")}, Offset: 4096, Count: uint32(len(data)), Stable: nfsv3.UNSTABLE, Data: data}
	if _, err := a.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestAWriteDecodesToExactlyItsData(t *testing.T) {
	for _, size := range []int{0, 1, 3, 4096, 1<<20 + 5, 3<<20 + 2} {
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(i*7 + size)
		}
		enc := encodedWrite(t, data)
		var a nfsv3.Write3args
		n, err := a.ReadFrom(bytes.NewReader(enc))
		if err != nil || n != int64(len(enc)) {
			t.Fatalf("%d bytes: read %d of %d, %v", size, n, len(enc), err)
		}
		if !bytes.Equal(a.Data, data) {
			t.Fatalf("%d bytes: decoded %d bytes, not what was sent", size, len(a.Data))
		}
		if size <= 1<<20 && cap(a.Data) != size {
			t.Fatalf("%d bytes: decoded into %d bytes of memory", size, cap(a.Data))
		}
	}
}

func TestAWriteShorterThanItsLengthIsRefused(t *testing.T) {
	enc := encodedWrite(t, make([]byte, 2<<20))
	for _, cut := range []int{len(enc) - 1, len(enc) - 3<<19, 40} {
		var a nfsv3.Write3args
		if _, err := a.ReadFrom(bytes.NewReader(enc[:cut])); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("cut at %d of %d bytes: %v, want io.ErrUnexpectedEOF", cut, len(enc), err)
		}
	}
	// A length of 4 GiB - 1 with a few bytes behind it: refused once the
	// bytes run out, without allocating what it claims.
	claim := encodedWrite(t, []byte("abcd"))
	claim = append(claim[:len(claim)-8], 0xff, 0xff, 0xff, 0xff, 'a', 'b')
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var a nfsv3.Write3args
	if _, err := a.ReadFrom(bytes.NewReader(claim)); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a claimed 4 GiB: %v, want io.ErrUnexpectedEOF", err)
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 2<<20 {
		t.Fatalf("a claimed 4 GiB allocated %d bytes", got)
	}
}
