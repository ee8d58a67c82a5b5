package client

import (
	"bytes"
	"testing"

	"tandemfs/internal/proto"
)

// How writes to an inline file wait for their commit (inline.go).

func TestBufferedInlineWritesAreReadBackAndCoalesced(t *testing.T) {
	st := &fileState{inode: proto.Inode{Inline: true, InlineData: []byte("0123456789")}}
	st.bufferInline(8, []byte("ab"))
	st.bufferInline(10, []byte("cd")) // continues the last write
	st.bufferInline(2, []byte("X"))
	if got := string(st.inlineBytes()); got != "01X34567abcd" {
		t.Fatalf("client's view %q", got)
	}
	if string(st.inode.InlineData) != "0123456789" {
		t.Fatal("the cached inode's bytes were written in place")
	}
	want := []proto.InlineWrite{{Off: 8, Data: []byte("abcd")}, {Off: 2, Data: []byte("X")}}
	if len(st.pendingInline) != len(want) {
		t.Fatalf("pending %+v, want %+v", st.pendingInline, want)
	}
	for i, w := range want {
		if st.pendingInline[i].Off != w.Off || !bytes.Equal(st.pendingInline[i].Data, w.Data) {
			t.Fatalf("pending %+v, want %+v", st.pendingInline, want)
		}
	}
	if !st.dirty || st.size != 12 {
		t.Fatalf("dirty %v size %d, want a dirty 12-byte file", st.dirty, st.size)
	}
}

func TestRewritingTheSameBytesKeepsThePendingWritesBounded(t *testing.T) {
	st := &fileState{inode: proto.Inode{Inline: true}}
	for i := range 1000 {
		st.bufferInline(0, []byte{byte(i), byte(i)})
	}
	pending := 0
	for _, w := range st.pendingInline {
		pending += len(w.Data)
	}
	if pending > len(st.inlineBytes()) {
		t.Fatalf("%d bytes pending for a %d-byte file", pending, len(st.inlineBytes()))
	}
	if got := st.inlineBytes(); got[0] != byte(999%256) {
		t.Fatalf("client's view %v", got)
	}
}
