package meta_test

import (
	"errors"
	"syscall"
	"testing"

	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
	"tandemfs/internal/wire"
)

// FuzzMetaRequest sends arbitrary payloads for every operation to a live
// metadata service: each gets an answer (an error or a result), the
// service never crashes, and it keeps serving well-formed requests.
func FuzzMetaRequest(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 'a'})
	e := wire.NewEnc(nil)
	(&proto.CreateReq{Parent: proto.RootIno, Name: "x", Mode: 0o100644}).Encode(e)
	f.Add(e.B)
	svc := startMeta(&testing.T{}, f.TempDir())
	defer svc.Close()
	raw := rpc.NewClient(svc.Addr(), testSecret)
	defer raw.Close()
	f.Fuzz(func(t *testing.T, payload []byte) {
		ops := []uint16{proto.OpWatch, proto.OpSetLock, proto.OpGetLock}
		for op := uint16(1); op <= proto.OpSync+1; op++ {
			ops = append(ops, op)
		}
		for _, op := range ops {
			err := raw.Call(op, func(e *wire.Enc) { e.B = append(e.B, payload...) }, func(d *wire.Dec) error {
				d.Fail(nil)
				for len(d.Rest()) > 0 {
					d.U8()
				}
				return nil
			})
			if rpc.IsNetError(err) {
				t.Fatalf("op %d: connection failed: %v", op, err)
			}
		}
		err := raw.Call(proto.OpGetAttr, (&proto.InoReq{Ino: proto.RootIno}).Encode, func(d *wire.Dec) error {
			var n proto.Inode
			n.Decode(d)
			return nil
		})
		if err != nil && !errors.Is(err, syscall.ENOENT) {
			t.Fatalf("service broken after fuzz input: %v", err)
		}
	})
}
