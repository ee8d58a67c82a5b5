package storage

import (
	"testing"

	"golang.org/x/sys/unix"

	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
	"tandemfs/internal/wire"
)

// FuzzStorageRequest feeds arbitrary payloads to the server's handler for
// every storage operation. Whatever the bytes, the handler must answer (a
// reply or an error), never panic, and a successful read must reply with a
// well-formed byte string no longer than asked.
func FuzzStorageRequest(f *testing.F) {
	svc, err := newService(Config{
		Listen: "unused", MetaAddrs: []string{"unused"}, Secret: rpc.Secret("fuzz"),
		TargetDirs: []string{f.TempDir()}, Logf: func(string, ...any) {},
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { svc.Close() })
	if err := svc.targets[0].SetID(1); err != nil {
		f.Fatal(err)
	}
	svc.indexTargets()

	ref := proto.ChunkRef{Routing: proto.Routing{Target: 1, Chain: 1}, Ino: 3, Index: 1}
	for op, req := range map[uint16]interface{ Encode(*wire.Enc) }{
		proto.OpChunkWrite:    &proto.ChunkWriteReq{Chunk: ref, Off: 4000, Data: []byte("some bytes"), Sync: true},
		proto.OpChunkRead:     &proto.ChunkReadReq{Chunk: ref, Off: 3000, Len: 5000},
		proto.OpChunkTruncate: &proto.ChunkTruncateReq{Chunk: ref, Size: 4005},
		proto.OpChunkSync:     &proto.ChunkSyncReq{Routing: proto.Routing{Target: 1, Chain: 1}, Ino: 3, Indexes: []uint64{0, 1}},
		proto.OpChunkDelete:   &proto.ChunkDeleteReq{Routing: proto.Routing{Target: 1, Chain: 1}, Ino: 3, From: 1},
		proto.OpChunkList:     &proto.ChunkListReq{Routing: proto.Routing{Target: 1, Chain: 1}, Bucket: 3, Start: true, Limit: 10},
		proto.OpChunkRepair:   &proto.ChunkRepairReq{Chunk: ref, Member: 2, Blocks: []uint64{0, 7}},
		proto.OpChunkReadSent: &proto.ChunkReadReq{Chunk: ref, Off: 4096, Len: 8192},
	} {
		var e wire.Enc
		req.Encode(&e)
		f.Add(op-proto.OpChunkWrite, e.B)
	}
	f.Add(uint16(7), []byte{}) // OpScrubStart
	f.Add(uint16(8), []byte{1, 2, 3})

	f.Fuzz(func(t *testing.T, op uint16, payload []byte) {
		op = proto.OpChunkWrite + op%10 // the nine storage ops and one unknown
		var reply wire.Enc
		err := svc.handle(op, wire.NewDec(payload), &reply)
		if reply.Tail != nil {
			unix.Close(reply.Tail.FD)
			var req proto.ChunkReadReq
			req.Decode(wire.NewDec(payload))
			if err != nil || op != proto.OpChunkReadSent || reply.Tail.N > int(req.Len) {
				t.Fatalf("op %d: a file tail of %d bytes for %d asked (%v)", op, reply.Tail.N, req.Len, err)
			}
		}
		if err != nil || op != proto.OpChunkRead {
			return
		}
		var req proto.ChunkReadReq
		req.Decode(wire.NewDec(payload))
		d := wire.NewDec(reply.B)
		data := d.Bytes(proto.MaxData)
		if err := d.Finish(); err != nil || uint32(len(data)) > req.Len {
			t.Fatalf("read reply of %d bytes for %d asked: %v", len(data), req.Len, err)
		}
	})
}
