// Package nfsclient is a small NFSv3 client over one TCP connection, with
// the MOUNT protocol on a port of its own: enough to drive an NFS server
// as `tandem bench nfs` does (files by handle, reads, writes, commits,
// creates), for TandemFS's gateway and for other servers alike. Calls on
// one Conn are sent one at a time.
package nfsclient

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/mount"
	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv3"
	"github.com/buildbarn/go-xdr/pkg/protocols/rpcv2"
	"github.com/buildbarn/go-xdr/pkg/runtime"

	"tandemfs/internal/nfs"
)

// Conn is one connection to an NFS server, calling as root (AUTH_SYS).
type Conn struct {
	conn net.Conn
	cred rpcv2.OpaqueAuth
}

var xids atomic.Uint32

// Dial connects to addr (host:port).
func Dial(addr string) (*Conn, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	p := rpcv2.AuthsysParms{Machinename: "tandem-bench"}
	p.WriteTo(&b)
	return &Conn{conn: c, cred: rpcv2.OpaqueAuth{Flavor: rpcv2.AUTH_SYS, Body: b.Bytes()}}, nil
}

// Close closes the connection.
func (c *Conn) Close() error { return c.conn.Close() }

func (c *Conn) call(prog, proc uint32, args ...io.WriterTo) (*bytes.Reader, error) {
	var b bytes.Buffer
	for _, a := range args {
		if _, err := a.WriteTo(&b); err != nil {
			return nil, err
		}
	}
	xid := xids.Add(1)
	if err := nfs.WriteCall(c.conn, xid, prog, 3, proc, c.cred, b.Bytes()); err != nil {
		return nil, err
	}
	got, res, err := nfs.ReadReply(c.conn)
	if err != nil {
		return nil, err
	}
	if got != xid {
		return nil, fmt.Errorf("reply to call %d, not %d", got, xid)
	}
	return bytes.NewReader(res), nil
}

type xdrString string

func (s xdrString) WriteTo(w io.Writer) (int64, error) {
	return runtime.WriteASCIIString(w, 1024, string(s))
}

// StatusError is an NFS or MOUNT status other than OK.
type StatusError struct {
	Proc   string
	Status int32
}

func (e *StatusError) Error() string { return fmt.Sprintf("%s: status %d", e.Proc, e.Status) }

// Mount returns the root handle of export.
func (c *Conn) Mount(export string) ([]byte, error) {
	r, err := c.call(mount.MOUNT_PROGRAM_PROGRAM_NUMBER, 1, xdrString(export))
	if err != nil {
		return nil, err
	}
	res, _, err := mount.ReadMountres3(r)
	if err != nil {
		return nil, err
	}
	ok, yes := res.(*mount.Mountres3_MNT3_OK)
	if !yes {
		return nil, &StatusError{"MNT " + export, int32(res.(*mount.Mountres3_default).FhsStatus)}
	}
	return ok.Mountinfo.Fhandle, nil
}

func fh(b []byte) nfsv3.NfsFh3 { return nfsv3.NfsFh3{Data: b} }

func sattr(mode uint32) nfsv3.Sattr3 {
	return nfsv3.Sattr3{Mode: &nfsv3.SetMode3_TRUE{Mode: mode}, Uid: &nfsv3.SetUid3_default{}, Gid: &nfsv3.SetGid3_default{},
		Size: &nfsv3.SetSize3_default{}, Atime: &nfsv3.SetAtime_default{}, Mtime: &nfsv3.SetMtime_default{}}
}

// Lookup returns the handle of name in dir.
func (c *Conn) Lookup(dir []byte, name string) ([]byte, error) {
	r, err := c.call(nfsv3.NFS_PROGRAM_PROGRAM_NUMBER, 3, &nfsv3.Lookup3args{What: nfsv3.Diropargs3{Dir: fh(dir), Name: name}})
	if err != nil {
		return nil, err
	}
	res, _, err := nfsv3.ReadLookup3res(r)
	if err != nil {
		return nil, err
	}
	if ok, yes := res.(*nfsv3.Lookup3res_NFS3_OK); yes {
		return ok.Resok.Object.Data, nil
	}
	return nil, &StatusError{"LOOKUP " + name, int32(res.GetStatus())}
}

// Mkdir makes directory name in dir (or finds it) and returns its handle.
func (c *Conn) Mkdir(dir []byte, name string) ([]byte, error) {
	r, err := c.call(nfsv3.NFS_PROGRAM_PROGRAM_NUMBER, 9, &nfsv3.Mkdir3args{Where: nfsv3.Diropargs3{Dir: fh(dir), Name: name}, Attributes: sattr(0o755)})
	if err != nil {
		return nil, err
	}
	res, _, err := nfsv3.ReadMkdir3res(r)
	if err != nil {
		return nil, err
	}
	if res.GetStatus() == nfsv3.NFS3ERR_EXIST {
		return c.Lookup(dir, name)
	}
	if ok, yes := res.(*nfsv3.Mkdir3res_NFS3_OK); yes {
		if h, yes := ok.Resok.Obj.(*nfsv3.PostOpFh3_TRUE); yes {
			return h.Handle.Data, nil
		}
		return c.Lookup(dir, name)
	}
	return nil, &StatusError{"MKDIR " + name, int32(res.GetStatus())}
}

// Create makes file name in dir (GUARDED: an existing name fails) and
// returns its handle.
func (c *Conn) Create(dir []byte, name string) ([]byte, error) {
	r, err := c.call(nfsv3.NFS_PROGRAM_PROGRAM_NUMBER, 8, &nfsv3.Create3args{Where: nfsv3.Diropargs3{Dir: fh(dir), Name: name},
		How: &nfsv3.Createhow3_GUARDED{ObjAttributes: sattr(0o644)}})
	if err != nil {
		return nil, err
	}
	res, _, err := nfsv3.ReadCreate3res(r)
	if err != nil {
		return nil, err
	}
	if ok, yes := res.(*nfsv3.Create3res_NFS3_OK); yes {
		if h, yes := ok.Resok.Obj.(*nfsv3.PostOpFh3_TRUE); yes {
			return h.Handle.Data, nil
		}
		return c.Lookup(dir, name)
	}
	return nil, &StatusError{"CREATE " + name, int32(res.GetStatus())}
}

// Remove removes file name from dir.
func (c *Conn) Remove(dir []byte, name string) error {
	r, err := c.call(nfsv3.NFS_PROGRAM_PROGRAM_NUMBER, 12, &nfsv3.Remove3args{Object: nfsv3.Diropargs3{Dir: fh(dir), Name: name}})
	if err != nil {
		return err
	}
	res, _, err := nfsv3.ReadRemove3res(r)
	if err == nil && res.GetStatus() != nfsv3.NFS3_OK {
		err = &StatusError{"REMOVE " + name, int32(res.GetStatus())}
	}
	return err
}

// Write writes data at off; stable is nfsv3.UNSTABLE, DATA_SYNC or
// FILE_SYNC.
func (c *Conn) Write(file []byte, off uint64, data []byte, stable nfsv3.StableHow) error {
	r, err := c.call(nfsv3.NFS_PROGRAM_PROGRAM_NUMBER, 7, &nfsv3.Write3args{File: fh(file), Offset: off,
		Count: uint32(len(data)), Stable: stable, Data: data})
	if err != nil {
		return err
	}
	res, _, err := nfsv3.ReadWrite3res(r)
	if err != nil {
		return err
	}
	if ok, yes := res.(*nfsv3.Write3res_NFS3_OK); !yes || ok.Resok.Count != uint32(len(data)) {
		return &StatusError{"WRITE", int32(res.GetStatus())}
	}
	return nil
}

// Read reads len(buf) bytes at off and returns how many came.
func (c *Conn) Read(file []byte, off uint64, buf []byte) (int, error) {
	r, err := c.call(nfsv3.NFS_PROGRAM_PROGRAM_NUMBER, 6, &nfsv3.Read3args{File: fh(file), Offset: off, Count: uint32(len(buf))})
	if err != nil {
		return 0, err
	}
	res, _, err := nfsv3.ReadRead3res(r)
	if err != nil {
		return 0, err
	}
	ok, yes := res.(*nfsv3.Read3res_NFS3_OK)
	if !yes {
		return 0, &StatusError{"READ", int32(res.GetStatus())}
	}
	return copy(buf, ok.Resok.Data), nil
}

// Commit makes the file's unstable writes durable.
func (c *Conn) Commit(file []byte) error {
	r, err := c.call(nfsv3.NFS_PROGRAM_PROGRAM_NUMBER, 21, &nfsv3.Commit3args{File: fh(file)})
	if err != nil {
		return err
	}
	res, _, err := nfsv3.ReadCommit3res(r)
	if err == nil && res.GetStatus() != nfsv3.NFS3_OK {
		err = &StatusError{"COMMIT", int32(res.GetStatus())}
	}
	return err
}
