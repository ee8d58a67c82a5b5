package nfs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
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

// CallRPC sends one ONC RPC call over a stream connection and returns the
// result of a successful reply (tests use it to send what no client
// library would).
func CallRPC(conn io.ReadWriter, prog, vers, proc uint32, cred rpcv2.OpaqueAuth, args []byte) ([]byte, error) {
	msg := rpcv2.RpcMsg{Xid: rand.Uint32(), Body: &rpcv2.RpcMsgBody_CALL{Cbody: rpcv2.CallBody{
		Rpcvers: 2, Prog: prog, Vers: vers, Proc: proc, Cred: cred,
		Verf: rpcv2.OpaqueAuth{Flavor: rpcv2.AUTH_NONE}}}}
	var b bytes.Buffer
	b.Write(make([]byte, 4))
	if _, err := msg.WriteTo(&b); err != nil {
		return nil, err
	}
	b.Write(args)
	out := b.Bytes()
	binary.BigEndian.PutUint32(out, uint32(len(out)-4)|0x80000000)
	if _, err := conn.Write(out); err != nil {
		return nil, err
	}
	return ReadReply(conn, msg.Xid)
}

// ReadReply reads one reply record and returns its result, or an error
// naming why the call was not accepted or did not succeed.
func ReadReply(conn io.Reader, xid uint32) ([]byte, error) {
	record, err := readRecord(conn)
	if err != nil {
		return nil, err
	}
	r := bytes.NewReader(record)
	var reply rpcv2.RpcMsg
	if _, err := reply.ReadFrom(r); err != nil {
		return nil, err
	}
	if reply.Xid != xid {
		return nil, fmt.Errorf("reply to call %d, not %d", reply.Xid, xid)
	}
	body, ok := reply.Body.(*rpcv2.RpcMsgBody_REPLY)
	if !ok {
		return nil, errors.New("not a reply")
	}
	accepted, ok := body.Rbody.(*rpcv2.ReplyBody_MSG_ACCEPTED)
	if !ok {
		return nil, &RPCError{Denied: true}
	}
	if st := accepted.Areply.ReplyData.GetStat(); st != rpcv2.SUCCESS {
		return nil, &RPCError{Stat: st}
	}
	rest, _ := io.ReadAll(r)
	return rest, nil
}

// RPCError is a call the server did not accept (Denied) or answered with
// an accept status other than SUCCESS.
type RPCError struct {
	Denied bool
	Stat   rpcv2.AcceptStat
}

func (e *RPCError) Error() string {
	if e.Denied {
		return "RPC call denied"
	}
	return fmt.Sprintf("RPC call not successful: %s", rpcv2.AcceptStat_name[e.Stat])
}

// readRecord reads one record of RFC 5531 record marking, of at most 16
// MiB.
func readRecord(r io.Reader) ([]byte, error) {
	var out []byte
	for {
		var hdr [4]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return nil, err
		}
		h := binary.BigEndian.Uint32(hdr[:])
		n := int(h &^ 0x80000000)
		if len(out)+n > 16<<20 {
			return nil, errors.New("reply record too long")
		}
		frag := make([]byte, n)
		if _, err := io.ReadFull(r, frag); err != nil {
			return nil, err
		}
		out = append(out, frag...)
		if h&0x80000000 != 0 {
			return out, nil
		}
	}
}
