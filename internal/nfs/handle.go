package nfs

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"

	"tandemfs/internal/rpc"
)

// A file handle names an inode of one cluster, under one export:
//
//	"TF" | version 1 | 0 | fsid (8) | export root inode (8) | inode (8)
//
// Nothing in it is local to a gateway head: the fsid comes from the
// cluster secret, which every head holds, and inode numbers come from the
// metadata service, which never reuses one (meta.tx.allocIno). So a
// handle stays valid on every head, across restarts and failovers, and a
// handle of a removed file can never name another file: it is stale.
const (
	handleSize    = 28
	handleVersion = 1
)

var errBadHandle = errors.New("not a TandemFS file handle")

// fileHandle is a decoded handle.
type fileHandle struct {
	fsid   uint64
	export uint64 // the export's root inode: whose rules apply
	ino    uint64
}

func (h fileHandle) encode() []byte {
	b := make([]byte, handleSize)
	b[0], b[1], b[2] = 'T', 'F', handleVersion
	binary.BigEndian.PutUint64(b[4:], h.fsid)
	binary.BigEndian.PutUint64(b[12:], h.export)
	binary.BigEndian.PutUint64(b[20:], h.ino)
	return b
}

func decodeHandle(b []byte) (fileHandle, error) {
	if len(b) != handleSize || b[0] != 'T' || b[1] != 'F' || b[2] != handleVersion || b[3] != 0 {
		return fileHandle{}, errBadHandle
	}
	return fileHandle{
		fsid:   binary.BigEndian.Uint64(b[4:]),
		export: binary.BigEndian.Uint64(b[12:]),
		ino:    binary.BigEndian.Uint64(b[20:]),
	}, nil
}

// FSID is the file system id a cluster's gateways report and put in their
// handles: the same on every head, as it is derived from the cluster
// secret, and different between clusters.
func FSID(secret rpc.Secret) uint64 {
	sum := sha256.Sum256(append([]byte("tandem nfs fsid\x00"), secret...))
	return binary.BigEndian.Uint64(sum[:8])
}
