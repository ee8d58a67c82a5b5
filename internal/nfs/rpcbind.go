package nfs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/mount"
	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv3"
	"github.com/buildbarn/go-xdr/pkg/protocols/rpcv2"
)

// Portmapper (rpcbind version 2, RFC 1833) procedures and the program
// number; the arguments are four unsigned ints, (prog, vers, prot, port).
const (
	pmapProgram = 100000
	pmapSet     = 1
	pmapUnset   = 2
	ipprotoTCP  = 6
)

// RegisterWithRpcbind registers NFS 3 and MOUNT 3 over TCP on port with
// the rpcbind of this host, if one runs, replacing older registrations.
func RegisterWithRpcbind(port int) error {
	for _, prog := range []uint32{nfsv3.NFS_PROGRAM_PROGRAM_NUMBER, mount.MOUNT_PROGRAM_PROGRAM_NUMBER} {
		if _, err := pmapCall(pmapUnset, prog, 3, 0); err != nil {
			return err
		}
		ok, err := pmapCall(pmapSet, prog, 3, uint32(port))
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("rpcbind refused to register program %d", prog)
		}
	}
	return nil
}

// UnregisterFromRpcbind removes the registrations of RegisterWithRpcbind.
func UnregisterFromRpcbind() {
	for _, prog := range []uint32{nfsv3.NFS_PROGRAM_PROGRAM_NUMBER, mount.MOUNT_PROGRAM_PROGRAM_NUMBER} {
		pmapCall(pmapUnset, prog, 3, 0)
	}
}

func pmapCall(proc, prog, vers, port uint32) (bool, error) {
	conn, err := net.DialTimeout("tcp", "127.0.0.1:111", time.Second)
	if err != nil {
		return false, errors.New("no rpcbind on 127.0.0.1:111")
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	args := binary.BigEndian.AppendUint32(nil, prog)
	args = binary.BigEndian.AppendUint32(args, vers)
	args = binary.BigEndian.AppendUint32(args, ipprotoTCP)
	args = binary.BigEndian.AppendUint32(args, port)
	res, err := CallRPC(conn, pmapProgram, 2, proc, rpcv2.OpaqueAuth{Flavor: rpcv2.AUTH_NONE}, args)
	if err != nil {
		return false, err
	}
	return len(res) == 4 && binary.BigEndian.Uint32(res) == 1, nil
}
