// Copyright 2026 the Go-FUSE Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

package fuse

import (
	"bytes"
	"encoding/binary"
	"io"
	"log"
	"testing"
	"unsafe"
)

// replyFS answers reads and ioctls for the ring reply tests: a read with
// the bytes of its own slice when own is set (as a cache would), else by
// filling the buffer it is given (as a read from the network does).
type replyFS struct {
	RawFileSystem
	own     []byte
	readBuf []byte // the buffer the last read was given
	ioctl   []byte // what the ioctl writes into its out buffer
}

func (fs *replyFS) Read(cancel <-chan struct{}, in *ReadIn, buf []byte) (ReadResult, Status) {
	fs.readBuf = buf
	if fs.own != nil {
		return ReadResultData(fs.own), OK
	}
	for i := range buf {
		buf[i] = byte(in.Offset) + byte(i)
	}
	return ReadResultData(buf), OK
}

func (fs *replyFS) Ioctl(cancel <-chan struct{}, in *IoctlIn, inbuf []byte, out *IoctlOut, outbuf []byte) Status {
	out.Result = 7
	copy(outbuf, fs.ioctl)
	return OK
}

func newReplyServer(fs RawFileSystem) *Server {
	opts := &MountOptions{Logger: log.New(io.Discard, "", 0), MaxWrite: 1 << 20}
	ms := &Server{opts: opts}
	ms.protocolServer = protocolServer{fileSystem: fs, opts: opts, kernelSettings: InitIn{Major: 7, Minor: 41}}
	return ms
}

// putRequest writes a request into e as the kernel does: the in header,
// then the opcode's argument struct (arg, without its header) in op_in.
func putRequest(e *ringEntry, opcode uint32, unique uint64, arg []byte) {
	hdr := (*InHeader)(unsafe.Pointer(&e.header[0]))
	*hdr = InHeader{Length: uint32(unsafe.Sizeof(InHeader{})) + uint32(len(arg)), Opcode: opcode, Unique: unique, NodeId: 5}
	copy(e.header[ringInOutSize:ringInOutSize+ringOpInSize], arg)
	binary.LittleEndian.PutUint32(e.header[ringPayloadSzAt:], 0)
}

func readArg(off uint64, size uint32) []byte {
	in := ReadIn{Fh: 1, Offset: off, Size: size}
	all := unsafe.Slice((*byte)(unsafe.Pointer(&in)), unsafe.Sizeof(in))
	return bytes.Clone(all[unsafe.Sizeof(InHeader{}):])
}

// reply returns the reply's status and payload as the kernel reads them
// from e.
func reply(e *ringEntry) (Status, []byte) {
	out := (*OutHeader)(unsafe.Pointer(&e.header[0]))
	n := binary.LittleEndian.Uint32(e.header[ringPayloadSzAt:])
	return Status(-out.Status), e.buf[payloadAt : payloadAt+int(n)]
}

func TestARingReadIsReadStraightIntoThePayloadTheKernelTakesItFrom(t *testing.T) {
	fs := &replyFS{RawFileSystem: NewDefaultRawFileSystem()}
	ms := newReplyServer(fs)
	e := newRingEntry(ms.ringPayloadSize())
	putRequest(e, _OP_READ, 11, readArg(100, 64<<10))

	if u := ms.serveRingEntry(e); u != 11 {
		t.Fatalf("served request %d, want 11", u)
	}
	if len(fs.readBuf) != 64<<10 || &fs.readBuf[0] != &e.buf[payloadAt] {
		t.Fatalf("the read was given a buffer of %d bytes outside the ring's payload", len(fs.readBuf))
	}
	st, data := reply(e)
	if !st.Ok() || len(data) != 64<<10 || data[0] != 100 || data[1000] != byte((100+1000)%256) {
		t.Fatalf("reply %v with %d bytes, want the 64 KiB read", st, len(data))
	}
}

func TestARingReadAnsweredFromOtherMemoryIsCopiedIntoThePayload(t *testing.T) {
	own := bytes.Repeat([]byte("cached "), 1000)
	fs := &replyFS{RawFileSystem: NewDefaultRawFileSystem(), own: own}
	ms := newReplyServer(fs)
	e := newRingEntry(ms.ringPayloadSize())
	putRequest(e, _OP_READ, 12, readArg(0, uint32(len(own))))

	ms.serveRingEntry(e)
	st, data := reply(e)
	if !st.Ok() || !bytes.Equal(data, own) {
		t.Fatalf("reply %v with %d bytes, want the handler's %d", st, len(data), len(own))
	}
}

func TestARingReplyWithAnArgumentStructKeepsItsPayloadBehindIt(t *testing.T) {
	fs := &replyFS{RawFileSystem: NewDefaultRawFileSystem(), ioctl: []byte("ioctl output")}
	ms := newReplyServer(fs)
	e := newRingEntry(ms.ringPayloadSize())
	in := IoctlIn{Fh: 1, Cmd: 0x80000001, OutSize: 12}
	all := unsafe.Slice((*byte)(unsafe.Pointer(&in)), unsafe.Sizeof(in))
	putRequest(e, _OP_IOCTL, 13, all[unsafe.Sizeof(InHeader{}):])

	ms.serveRingEntry(e)
	st, data := reply(e)
	outSize := int(unsafe.Sizeof(IoctlOut{}))
	if !st.Ok() || len(data) != outSize+12 {
		t.Fatalf("reply %v with %d bytes, want %d", st, len(data), outSize+12)
	}
	if out := (*IoctlOut)(unsafe.Pointer(&data[0])); out.Result != 7 || string(data[outSize:]) != "ioctl output" {
		t.Fatalf("reply result %d, payload %q", out.Result, data[outSize:])
	}
}
