package proto

import (
	"testing"

	"tandemfs/internal/wire"
)

type message interface {
	Encode(*wire.Enc)
	Decode(*wire.Dec)
}

// every message type the services decode from the network.
func allMessages() []func() message {
	return []func() message{
		func() message { return &Inode{} }, func() message { return &LookupReq{} },
		func() message { return &InoReq{} }, func() message { return &SetAttrReq{} },
		func() message { return &CreateReq{} }, func() message { return &LinkReq{} },
		func() message { return &UnlinkReq{} }, func() message { return &UnlinkReply{} },
		func() message { return &RenameReq{} }, func() message { return &ReadDirReq{} },
		func() message { return &ReadDirReply{} }, func() message { return &WriteInlineReq{} },
		func() message { return &UninlineReq{} }, func() message { return &CommitWriteReq{} },
		func() message { return &XattrReq{} }, func() message { return &SetStripeReq{} },
		func() message { return &StatFsReply{} }, func() message { return &ClusterMap{} },
		func() message { return &RegisterServerReq{} }, func() message { return &RegisterServerReply{} },
		func() message { return &HeartbeatReq{} }, func() message { return &StatusReply{} },
		func() message { return &ChunkWriteReq{} }, func() message { return &ChunkReadReq{} },
		func() message { return &ChunkTruncateReq{} }, func() message { return &ChunkSyncReq{} },
		func() message { return &ChunkDeleteReq{} }, func() message { return &EntryReply{} },
		func() message { return &RenameReply{} }, func() message { return &ChunkListReq{} },
		func() message { return &ChunkListReply{} }, func() message { return &ChunkRepairReq{} }, func() message { return &HeartbeatReply{} },
		func() message { return &ResyncDoneReq{} }, func() message { return &TargetFailedReq{} },
		func() message { return &Chain{} }, func() message { return &SetLockReq{} },
		func() message { return &GetLockReq{} }, func() message { return &LockReply{} },
	}
}

// FuzzDecode: any input either decodes (and then re-encodes to a message
// that decodes to the same bytes) or fails cleanly; nothing panics or
// allocates beyond the input's size.
func FuzzDecode(f *testing.F) {
	for _, mk := range allMessages() {
		e := wire.NewEnc(nil)
		mk().Encode(e)
		f.Add(e.B)
	}
	e := wire.NewEnc(nil)
	(&ChunkWriteReq{Off: 4096, Data: make([]byte, 4096), Bulk: true, Sums: make([]byte, 8)}).Encode(e)
	f.Add(e.B)
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, mk := range allMessages() {
			m := mk()
			d := wire.NewDec(data)
			m.Decode(d)
			if d.Finish() != nil {
				continue
			}
			e := wire.NewEnc(nil)
			m.Encode(e)
			m2 := mk()
			d2 := wire.NewDec(e.B)
			m2.Decode(d2)
			if err := d2.Finish(); err != nil {
				t.Fatalf("%T: re-encoded message does not decode: %v", m, err)
			}
		}
	})
}

func TestRoundTrip(t *testing.T) {
	in := Inode{Attr: Attr{Ino: 7, Mode: 0o100644, Size: 3}, Stripe: Stripe{ChunkSize: 1 << 20, Count: 2},
		Chains: []uint32{3, 4}, Inline: true, InlineData: []byte("abc"), Target: ""}
	e := wire.NewEnc(nil)
	in.Encode(e)
	var out Inode
	d := wire.NewDec(e.B)
	out.Decode(d)
	if err := d.Finish(); err != nil {
		t.Fatal(err)
	}
	if out.Ino != 7 || out.Size != 3 || string(out.InlineData) != "abc" || len(out.Chains) != 2 || out.Chains[1] != 4 {
		t.Fatalf("round trip changed the inode: %+v", out)
	}
}

// A chunk write carries the sender's checksums, when it has them, between
// its flags and its data, which stays last (senders pass it to the kernel
// separately, or from a file).
func TestChunkWriteRoundTripCarriesTheSendersChecksums(t *testing.T) {
	for _, in := range []ChunkWriteReq{
		{Chunk: ChunkRef{Ino: 9, Index: 2}, Off: 4096, Data: []byte("data"), Bulk: true, Sums: []byte("12345678")},
		{Chunk: ChunkRef{Ino: 9, Index: 2}, Data: []byte("data"), Sync: true},
	} {
		e := wire.NewEnc(nil)
		in.EncodeHeadLen(e, len(in.Data))
		e.B = append(e.B, in.Data...)
		var out ChunkWriteReq
		d := wire.NewDec(e.B)
		out.Decode(d)
		if err := d.Finish(); err != nil {
			t.Fatal(err)
		}
		if string(out.Sums) != string(in.Sums) || (out.Sums == nil) != (in.Sums == nil) || string(out.Data) != "data" ||
			out.Off != in.Off || out.Bulk != in.Bulk || out.Sync != in.Sync || out.Chunk.Ino != 9 {
			t.Fatalf("round trip of %+v gave %+v", in, out)
		}
	}
}
