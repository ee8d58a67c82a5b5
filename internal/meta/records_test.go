package meta

import (
	"testing"

	"tandemfs/internal/proto"
	"tandemfs/internal/wire"
)

// Inode records written before inodes had versions still load, as
// version 0 (older than any change a client can hear of).
func TestInodeRecordsOfVersion1StillLoad(t *testing.T) {
	var n proto.Inode
	n.Ino, n.Size, n.Mode = 42, 3, sIFREG|0o644
	n.Inline, n.InlineData = true, []byte("abc")
	e := wire.NewEnc(nil)
	e.U8(recordVersion1)
	n.EncodeBody(e)
	e.U64(7) // parent
	r, err := unmarshalInode(e.B)
	if err != nil {
		t.Fatal(err)
	}
	if r.Ino != 42 || r.Size != 3 || string(r.InlineData) != "abc" || r.Parent != 7 || r.Version != 0 {
		t.Fatalf("decoded %+v", r)
	}
	r.Version = 99
	again, err := unmarshalInode(r.marshal())
	if err != nil || again.Version != 99 || again.Parent != 7 || string(again.InlineData) != "abc" {
		t.Fatalf("a record written now: %+v, %v", again, err)
	}
}

// Records written before Written existed count their files as written
// whole: the disk usage they showed before.
func TestInodeRecordsOfVersion2CountTheirFilesWritten(t *testing.T) {
	var n proto.Inode
	n.Ino, n.Size, n.Mode, n.Chains = 42, 3<<20, sIFREG|0o644, []uint32{1}
	e := wire.NewEnc(nil)
	e.U8(recordVersion2)
	e.U64(5) // version
	n.EncodeBody(e)
	e.U64(7) // parent
	r, err := unmarshalInode(e.B)
	if err != nil {
		t.Fatal(err)
	}
	if r.Written != 3<<20 || r.Version != 5 || r.Blocks() != 6144 {
		t.Fatalf("decoded written %d, version %d, blocks %d", r.Written, r.Version, r.Blocks())
	}
	r.Written = 4096
	again, err := unmarshalInode(r.marshal())
	if err != nil || again.Written != 4096 || again.Blocks() != 8 {
		t.Fatalf("a record written now: %+v, %v", again, err)
	}
}

// Records written before erasure coding load as copied files, and a
// record written now keeps its file's coding.
func TestInodeRecordsOfVersion4HaveNoErasureCoding(t *testing.T) {
	var n proto.Inode
	n.Ino, n.Size, n.Mode, n.Chains, n.Project = 42, 3<<20, sIFREG|0o644, []uint32{1}, 5
	e := wire.NewEnc(nil)
	e.U8(recordVersion4)
	e.U64(9) // version
	n.EncodeBody(e)
	e.U64(7)       // parent
	e.U64(3 << 20) // written
	e.U32(n.Project)
	r, err := unmarshalInode(e.B)
	if err != nil || r.Stripe.EC.On() || r.Project != 5 || r.Version != 9 {
		t.Fatalf("decoded %+v, %v", r, err)
	}
	r.Stripe.EC = proto.ECPattern{Data: 8, Parity: 2}
	again, err := unmarshalInode(r.marshal())
	if err != nil || again.Stripe.EC != r.Stripe.EC || again.Project != 5 {
		t.Fatalf("a record written now: %+v, %v", again, err)
	}
}
