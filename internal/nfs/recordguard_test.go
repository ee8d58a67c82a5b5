package nfs

import (
	"bytes"
	"encoding/binary"
	"io"
	"testing"
	"testing/iotest"
)

func fragment(last bool, n int) []byte {
	h := uint32(n)
	if last {
		h |= 0x80000000
	}
	return append(binary.BigEndian.AppendUint32(nil, h), make([]byte, n)...)
}

// The guard passes a stream of records through unchanged, however it is
// read, and fails the read that would let one record pass max bytes, its
// fragments counted together.
func TestRecordGuard(t *testing.T) {
	var ok bytes.Buffer
	ok.Write(fragment(true, 100))
	ok.Write(fragment(false, 60))
	ok.Write(fragment(true, 40))
	ok.Write(fragment(true, 0))
	g := &recordGuard{r: iotest.OneByteReader(bytes.NewReader(ok.Bytes())), max: 100}
	got, err := io.ReadAll(g)
	if err != nil || !bytes.Equal(got, ok.Bytes()) {
		t.Fatalf("records within the limit: %v", err)
	}
	var tooLong bytes.Buffer
	tooLong.Write(fragment(false, 60))
	tooLong.Write(fragment(true, 41))
	g = &recordGuard{r: bytes.NewReader(tooLong.Bytes()), max: 100}
	if _, err := io.ReadAll(g); err == nil {
		t.Fatal("a record of 101 bytes in two fragments passed a limit of 100")
	}
}
