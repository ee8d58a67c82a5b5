package meta

import (
	"fmt"

	"tandemfs/internal/proto"
	"tandemfs/internal/wire"
)

const (
	recordVersion1 = 1 // inode without Version
	recordVersion2 = 2 // inode without Written
	recordVersion3 = 3 // inode without Project
	recordVersion4 = 4 // inode without an erasure-coding pattern
	recordVersion  = 5
)

// inodeRec is an inode as stored: what clients see plus the parent of a
// directory (for ".." and for refusing to move a directory into itself).
type inodeRec struct {
	proto.Inode
	Parent uint64
}

func (r *inodeRec) marshal() []byte {
	e := wire.NewEnc(make([]byte, 0, 128+len(r.InlineData)))
	e.U8(recordVersion)
	e.U64(r.Version)
	r.Inode.EncodeBody(e)
	e.U64(r.Parent)
	e.U64(r.Written)
	e.U32(r.Project)
	r.Stripe.EC.Encode(e)
	return e.B
}

func unmarshalInode(b []byte) (*inodeRec, error) {
	d := wire.NewDec(b)
	r := &inodeRec{}
	v := d.U8()
	switch v {
	case recordVersion, recordVersion4, recordVersion3, recordVersion2:
		r.Version = d.U64()
	case recordVersion1: // written before inodes had versions
	default:
		return nil, fmt.Errorf("inode record version %d unknown", v)
	}
	r.Inode.DecodeBody(d)
	r.Parent = d.U64()
	if v >= recordVersion3 {
		r.Written = d.U64()
	} else {
		r.Written = r.Size // older records: count the file as written whole
	}
	if v >= recordVersion4 {
		r.Project = d.U32()
	}
	if v >= recordVersion {
		r.Stripe.EC.Decode(d)
	}
	return r, d.Finish()
}

func (r *inodeRec) isDir() bool { return r.Mode&sIFMT == sIFDIR }
func (r *inodeRec) isReg() bool { return r.Mode&sIFMT == sIFREG }

// File type bits (from sys/stat.h), spelled out so the state machine does
// not depend on the build platform.
const (
	sIFMT   = 0o170000
	sIFDIR  = 0o040000
	sIFREG  = 0o100000
	sIFLNK  = 0o120000
	sISUID  = 0o4000
	sISGID  = 0o2000
	sIXGRP  = 0o010
	permAll = 0o7777
)

func marshalDent(ino uint64, mode uint32) []byte {
	e := wire.NewEnc(make([]byte, 0, 12))
	e.U64(ino)
	e.U32(mode & sIFMT)
	return e.B
}

func unmarshalDent(b []byte) (uint64, uint32, error) {
	d := wire.NewDec(b)
	ino, mode := d.U64(), d.U32()
	return ino, mode, d.Finish()
}

// The cluster map is stored as one record per server, target and chain.
func marshalServer(s *proto.Server) []byte {
	e := wire.NewEnc(nil)
	e.U32(s.ID)
	e.String(s.UUID)
	e.String(s.Addr)
	e.String(s.Rack)
	return e.B
}

func unmarshalServer(b []byte) (proto.Server, error) {
	d := wire.NewDec(b)
	s := proto.Server{ID: d.U32(), UUID: d.String(64), Addr: d.String(256)}
	if len(d.Rest()) > 0 { // records from before racks end here
		s.Rack = d.String(proto.MaxRack)
	}
	return s, d.Finish()
}

func marshalTarget(t *proto.Target) []byte {
	e := wire.NewEnc(nil)
	t.Encode(e)
	return e.B
}

func unmarshalTarget(b []byte) (proto.Target, error) {
	var t proto.Target
	d := wire.NewDec(b)
	t.Decode(d)
	return t, d.Finish()
}

func marshalChain(c *proto.Chain) []byte {
	e := wire.NewEnc(nil)
	c.Encode(e)
	return e.B
}

// unmarshalChain also reads the first format, which had no member states
// (every member serving).
func unmarshalChain(b []byte) (proto.Chain, error) {
	var c proto.Chain
	d := wire.NewDec(b)
	c.Decode(d)
	if err := d.Finish(); err != nil {
		d = wire.NewDec(b)
		c = proto.Chain{ID: d.U32(), Version: d.U32(), Targets: d.U32s(8)}
		if err := d.Finish(); err != nil {
			return c, err
		}
	}
	if len(c.States) != len(c.Targets) {
		c.States = make([]uint8, len(c.Targets))
		c.SinceMs = make([]int64, len(c.Targets))
	}
	return c, nil
}
