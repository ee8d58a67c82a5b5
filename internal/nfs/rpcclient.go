package nfs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"

	"github.com/buildbarn/go-xdr/pkg/protocols/rpcv2"
)

// A minimal ONC RPC client over a stream connection: the gateway
// registers with rpcbind through it, and tests send with it what no NFS
// client library would (pipelined calls, unknown programs, garbage).

// CallRPC sends one call and returns the result of its successful reply.
func CallRPC(conn io.ReadWriter, prog, vers, proc uint32, cred rpcv2.OpaqueAuth, args []byte) ([]byte, error) {
	xid := rand.Uint32()
	if err := WriteCall(conn, xid, prog, vers, proc, cred, args); err != nil {
		return nil, err
	}
	got, res, err := ReadReply(conn)
	if err == nil && got != xid {
		return nil, fmt.Errorf("reply to call %d, not %d", got, xid)
	}
	return res, err
}

// WriteCall sends a call as one record.
func WriteCall(w io.Writer, xid, prog, vers, proc uint32, cred rpcv2.OpaqueAuth, args []byte) error {
	msg := rpcv2.RpcMsg{Xid: xid, Body: &rpcv2.RpcMsgBody_CALL{Cbody: rpcv2.CallBody{
		Rpcvers: 2, Prog: prog, Vers: vers, Proc: proc, Cred: cred,
		Verf: rpcv2.OpaqueAuth{Flavor: rpcv2.AUTH_NONE}}}}
	var b bytes.Buffer
	b.Write(make([]byte, 4))
	if _, err := msg.WriteTo(&b); err != nil {
		return err
	}
	b.Write(args)
	out := b.Bytes()
	binary.BigEndian.PutUint32(out, uint32(len(out)-4)|0x80000000)
	_, err := w.Write(out)
	return err
}

// ReadReply reads one reply record and returns its call's xid and the
// result, or an error naming why the call was not accepted or did not
// succeed (*RPCError).
func ReadReply(r io.Reader) (xid uint32, result []byte, err error) {
	record, err := readRecord(r)
	if err != nil {
		return 0, nil, err
	}
	rd := bytes.NewReader(record)
	var reply rpcv2.RpcMsg
	if _, err := reply.ReadFrom(rd); err != nil {
		return 0, nil, err
	}
	body, ok := reply.Body.(*rpcv2.RpcMsgBody_REPLY)
	if !ok {
		return reply.Xid, nil, errors.New("not a reply")
	}
	accepted, ok := body.Rbody.(*rpcv2.ReplyBody_MSG_ACCEPTED)
	if !ok {
		return reply.Xid, nil, &RPCError{Denied: true}
	}
	if st := accepted.Areply.ReplyData.GetStat(); st != rpcv2.SUCCESS {
		return reply.Xid, nil, &RPCError{Stat: st}
	}
	rest, _ := io.ReadAll(rd)
	return reply.Xid, rest, nil
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
