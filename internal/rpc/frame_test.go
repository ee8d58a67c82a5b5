package rpc

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net"
	"testing"
	"unsafe"

	"tandemfs/internal/proto"
	"tandemfs/internal/wire"
)

// Request frames of alignFrom bytes and more end on a page boundary, so
// that page-sized data at their end starts on one; smaller frames are
// read as they are. Every frame reads back unchanged, whatever the space
// left by the one before.
func TestLargeRequestFramesEndOnAPageBoundary(t *testing.T) {
	sizes := []int{100, alignFrom - 1, alignFrom, 1<<20 + 37, 300, 1 << 20, 4096, 2<<20 + 4096}
	var stream bytes.Buffer
	var want [][]byte
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range sizes {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		want = append(want, b)
		binary.Write(&stream, binary.LittleEndian, uint32(n))
		stream.Write(b)
	}
	var space []byte
	for i, n := range sizes {
		frame, next, err := readRequest(&stream, space)
		if err != nil {
			t.Fatalf("frame %d (%d bytes): %v", i, n, err)
		}
		space = next
		if !bytes.Equal(frame, want[i]) {
			t.Fatalf("frame %d (%d bytes) read back changed", i, n)
		}
		end := uintptr(unsafe.Pointer(unsafe.SliceData(frame))) + uintptr(len(frame))
		if n >= alignFrom && end%pageSize != 0 {
			t.Errorf("frame %d (%d bytes) ends %d bytes past a page boundary", i, n, end%pageSize)
		}
	}
	if _, _, err := readRequest(&stream, space); err == nil {
		t.Fatal("read past the last frame")
	}
}

// The data of a chunk write a whole number of pages long reaches the
// storage server's handler page-aligned, ready for O_DIRECT.
func TestPageSizedChunkWriteDataArrivesPageAligned(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte, 1)
	srv := &Server{Name: "test", Secret: secret, Logf: t.Logf, Handler: func(op uint16, d *wire.Dec, e *wire.Enc) error {
		var w proto.ChunkWriteReq
		w.Decode(d)
		if err := d.Finish(); err != nil {
			return BadRequest(err)
		}
		got <- w.Data
		return nil
	}}
	go srv.Serve(ln)
	defer srv.Close()
	c := NewClient(ln.Addr().String(), secret)
	defer c.Close()
	for _, n := range []int{256 << 10, 1 << 20} {
		data := bytes.Repeat([]byte{7}, n)
		w := proto.ChunkWriteReq{Chunk: proto.ChunkRef{Ino: 5, Index: 1}, Off: 4096, Data: data, Bulk: true}
		if err := c.CallData(proto.OpChunkWrite, w.EncodeHead, w.Data, nil); err != nil {
			t.Fatal(err)
		}
		b := <-got
		if len(b) != n || !bytes.Equal(b, data) {
			t.Fatalf("%d bytes arrived as %d, equal %v", n, len(b), bytes.Equal(b, data))
		}
		if addr := uintptr(unsafe.Pointer(unsafe.SliceData(b))); addr%pageSize != 0 {
			t.Errorf("%d bytes of data arrived %d bytes past a page boundary", n, addr%pageSize)
		}
	}
}
