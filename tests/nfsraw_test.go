package tests

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/mount"
	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv3"
	"github.com/buildbarn/go-xdr/pkg/protocols/rpcv2"
	"github.com/buildbarn/go-xdr/pkg/runtime"

	"tandemfs/internal/nfs"
	"tandemfs/internal/testcluster"
)

// rawNFS is one connection to a gateway that sends calls by hand, for
// what the client libraries do not let a test say: UNSTABLE writes and
// their verifiers, pipelined calls, and malformed requests.
type rawNFS struct {
	t    testing.TB
	conn net.Conn
	cred rpcv2.OpaqueAuth
	xid  uint32
}

func dialRaw(t testing.TB, addr string, uid, gid uint32) *rawNFS {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &rawNFS{t: t, conn: conn, cred: authSys(uid, gid), xid: 1}
}

func authSys(uid, gid uint32) rpcv2.OpaqueAuth {
	var b bytes.Buffer
	p := rpcv2.AuthsysParms{Machinename: "tandem-test", Uid: uid, Gid: gid}
	p.WriteTo(&b)
	return rpcv2.OpaqueAuth{Flavor: rpcv2.AUTH_SYS, Body: b.Bytes()}
}

// encode is the XDR of args, in order.
func encode(args ...io.WriterTo) []byte {
	var b bytes.Buffer
	for _, a := range args {
		a.WriteTo(&b)
	}
	return b.Bytes()
}

// send writes a call and returns its xid; reply reads the next reply.
func (r *rawNFS) send(prog, vers, proc uint32, args []byte) uint32 {
	r.t.Helper()
	r.xid++
	if err := nfs.WriteCall(r.conn, r.xid, prog, vers, proc, r.cred, args); err != nil {
		r.t.Fatal(err)
	}
	return r.xid
}

func (r *rawNFS) reply() (uint32, *bytes.Reader, error) {
	r.conn.SetReadDeadline(time.Now().Add(60 * time.Second))
	xid, res, err := nfs.ReadReply(r.conn)
	return xid, bytes.NewReader(res), err
}

func (r *rawNFS) call(prog, vers, proc uint32, args []byte) *bytes.Reader {
	r.t.Helper()
	xid := r.send(prog, vers, proc, args)
	got, res, err := r.reply()
	if err != nil || got != xid {
		r.t.Fatalf("call %d of program %d: reply to %d, %v", proc, prog, got, err)
	}
	return res
}

type xdrString string

func (s xdrString) WriteTo(w io.Writer) (int64, error) {
	return runtime.WriteASCIIString(w, 1<<20, string(s))
}

func (r *rawNFS) mnt(path string) ([]byte, mount.Mountstat3) {
	r.t.Helper()
	res, _, err := mount.ReadMountres3(r.call(mount.MOUNT_PROGRAM_PROGRAM_NUMBER, 3, 1, encode(xdrString(path))))
	if err != nil {
		r.t.Fatal(err)
	}
	if ok, yes := res.(*mount.Mountres3_MNT3_OK); yes {
		return ok.Mountinfo.Fhandle, mount.MNT3_OK
	}
	return nil, res.(*mount.Mountres3_default).FhsStatus
}

func (r *rawNFS) create(dir []byte, name string) ([]byte, nfsv3.Nfsstat3) {
	r.t.Helper()
	a := nfsv3.Create3args{Where: nfsv3.Diropargs3{Dir: nfsv3.NfsFh3{Data: dir}, Name: name},
		How: &nfsv3.Createhow3_UNCHECKED{ObjAttributes: nfsv3.Sattr3{Mode: &nfsv3.SetMode3_TRUE{Mode: 0o644},
			Uid: &nfsv3.SetUid3_default{}, Gid: &nfsv3.SetGid3_default{}, Size: &nfsv3.SetSize3_default{},
			Atime: &nfsv3.SetAtime_default{}, Mtime: &nfsv3.SetMtime_default{}}}}
	res, _, err := nfsv3.ReadCreate3res(r.call(nfsv3.NFS_PROGRAM_PROGRAM_NUMBER, 3, 8, encode(&a)))
	if err != nil {
		r.t.Fatal(err)
	}
	if ok, yes := res.(*nfsv3.Create3res_NFS3_OK); yes {
		return ok.Resok.Obj.(*nfsv3.PostOpFh3_TRUE).Handle.Data, nfsv3.NFS3_OK
	}
	return nil, res.GetStatus()
}

func (r *rawNFS) lookup(dir []byte, name string) ([]byte, nfsv3.Nfsstat3) {
	r.t.Helper()
	a := nfsv3.Lookup3args{What: nfsv3.Diropargs3{Dir: nfsv3.NfsFh3{Data: dir}, Name: name}}
	res, _, err := nfsv3.ReadLookup3res(r.call(nfsv3.NFS_PROGRAM_PROGRAM_NUMBER, 3, 3, encode(&a)))
	if err != nil {
		r.t.Fatal(err)
	}
	if ok, yes := res.(*nfsv3.Lookup3res_NFS3_OK); yes {
		return ok.Resok.Object.Data, nfsv3.NFS3_OK
	}
	return nil, res.GetStatus()
}

func (r *rawNFS) getattr(fh []byte) (*nfsv3.Fattr3, nfsv3.Nfsstat3) {
	r.t.Helper()
	res, _, err := nfsv3.ReadGetattr3res(r.call(nfsv3.NFS_PROGRAM_PROGRAM_NUMBER, 3, 1, getattrArgs(fh)))
	if err != nil {
		r.t.Fatal(err)
	}
	if ok, yes := res.(*nfsv3.Getattr3res_NFS3_OK); yes {
		return &ok.Resok.ObjAttributes, nfsv3.NFS3_OK
	}
	return nil, res.GetStatus()
}

func getattrArgs(fh []byte) []byte {
	return encode(&nfsv3.Getattr3args{Object: nfsv3.NfsFh3{Data: fh}})
}

func (r *rawNFS) write(fh []byte, off uint64, data []byte, stable nfsv3.StableHow) (*nfsv3.Write3resok, nfsv3.Nfsstat3) {
	r.t.Helper()
	a := nfsv3.Write3args{File: nfsv3.NfsFh3{Data: fh}, Offset: off, Count: uint32(len(data)), Stable: stable, Data: data}
	res, _, err := nfsv3.ReadWrite3res(r.call(nfsv3.NFS_PROGRAM_PROGRAM_NUMBER, 3, 7, encode(&a)))
	if err != nil {
		r.t.Fatal(err)
	}
	if ok, yes := res.(*nfsv3.Write3res_NFS3_OK); yes {
		return &ok.Resok, nfsv3.NFS3_OK
	}
	return nil, res.GetStatus()
}

func (r *rawNFS) commit(fh []byte) ([8]byte, nfsv3.Nfsstat3) {
	r.t.Helper()
	a := nfsv3.Commit3args{File: nfsv3.NfsFh3{Data: fh}}
	res, _, err := nfsv3.ReadCommit3res(r.call(nfsv3.NFS_PROGRAM_PROGRAM_NUMBER, 3, 21, encode(&a)))
	if err != nil {
		r.t.Fatal(err)
	}
	if ok, yes := res.(*nfsv3.Commit3res_NFS3_OK); yes {
		return ok.Resok.Verf, nfsv3.NFS3_OK
	}
	return [8]byte{}, res.GetStatus()
}

// UNSTABLE writes are answered before they are durable, under a write
// verifier; COMMIT answers with the same verifier once they are. A
// gateway that restarts answers with another verifier, so a client
// resends the writes it had not committed; its file handles stay valid.
func TestNFSGatewayCommitAndWriteVerifier(t *testing.T) {
	c := testcluster.Start(t)
	g := startGateway(t, c, "/ 127.0.0.0/8(rw,no_root_squash,unstable)")
	r := dialRaw(t, g.addr, 0, 0)
	root, mst := r.mnt("/")
	if mst != mount.MNT3_OK {
		t.Fatalf("MNT /: %d", mst)
	}
	fh, st := r.create(root, "unstable")
	if st != nfsv3.NFS3_OK {
		t.Fatalf("CREATE: %d", st)
	}
	data := randomBytes(t, 3<<20)
	var verf [8]byte
	for off := 0; off < len(data); off += 1 << 20 {
		res, st := r.write(fh, uint64(off), data[off:off+1<<20], nfsv3.UNSTABLE)
		if st != nfsv3.NFS3_OK {
			t.Fatalf("WRITE: %d", st)
		}
		if res.Committed != nfsv3.UNSTABLE {
			t.Fatalf("an UNSTABLE write through an unstable export answered %v, not UNSTABLE", res.Committed)
		}
		if off > 0 && res.Verf != verf {
			t.Fatal("the verifier changed between two UNSTABLE writes to a healthy gateway")
		}
		verf = res.Verf
	}
	got, st := r.commit(fh)
	if st != nfsv3.NFS3_OK || got != verf {
		t.Fatalf("COMMIT: status %d, verifier %x (writes had %x)", st, got, verf)
	}
	if !bytes.Equal(fuseRead(t, filepath.Join(c.Mount(), "unstable")), data) {
		t.Fatal("after COMMIT the FUSE mount does not read what was written")
	}
	res, st := r.write(fh, 0, []byte("sync"), nfsv3.FILE_SYNC)
	if st != nfsv3.NFS3_OK || res.Committed != nfsv3.FILE_SYNC {
		t.Fatalf("FILE_SYNC write: status %d, committed %v", st, res)
	}

	g.stop()
	g2 := startGateway(t, c, "/ 127.0.0.0/8(rw,no_root_squash,unstable)")
	r2 := dialRaw(t, g2.addr, 0, 0)
	if attrs, st := r2.getattr(fh); st != nfsv3.NFS3_OK || attrs.Size != uint64(len(data)) {
		t.Fatalf("a handle from before the restart: status %d, attributes %+v", st, attrs)
	}
	if got, st := r2.commit(fh); st != nfsv3.NFS3_OK || got == verf {
		t.Fatalf("COMMIT after a restart: status %d, verifier %x, the same as before: a client would not resend", st, got)
	}
}

// Without the unstable option every write is durable before its reply:
// an UNSTABLE one is answered FILE_SYNC, so that a client that ignores
// the write verifier (libnfs) loses nothing when the head dies.
func TestNFSGatewayAnswersUnstableWritesStableByDefault(t *testing.T) {
	c := testcluster.Start(t)
	g := startGateway(t, c, "/ 127.0.0.0/8(rw,no_root_squash)")
	r := dialRaw(t, g.addr, 0, 0)
	root, _ := r.mnt("/")
	fh, _ := r.create(root, "f")
	res, st := r.write(fh, 0, []byte("durable"), nfsv3.UNSTABLE)
	if st != nfsv3.NFS3_OK || res.Committed != nfsv3.FILE_SYNC {
		t.Fatalf("UNSTABLE write: status %d, committed %v; want FILE_SYNC", st, res)
	}
}

// A Linux client sends a whole mount over one connection: a request that
// waits (here a READ while every storage server is stopped) must not hold
// up the ones behind it (a GETATTR, which only the metadata service
// answers).
func TestNFSGatewayServesRequestsOfOneConnectionConcurrently(t *testing.T) {
	c := testcluster.Start(t)
	data := randomBytes(t, 2<<20)
	if err := os.WriteFile(filepath.Join(c.Mount(), "f"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, c, "/ 127.0.0.0/8(rw,no_root_squash)")
	r := dialRaw(t, g.addr, 0, 0)
	root, _ := r.mnt("/")
	fh, st := r.lookup(root, "f")
	if st != nfsv3.NFS3_OK {
		t.Fatalf("LOOKUP: %d", st)
	}
	c.Signal("storage1", syscall.SIGSTOP)
	c.Signal("storage2", syscall.SIGSTOP)
	stopped := true
	defer func() {
		if stopped {
			c.Signal("storage1", syscall.SIGCONT)
			c.Signal("storage2", syscall.SIGCONT)
		}
	}()
	readXid := r.send(nfsv3.NFS_PROGRAM_PROGRAM_NUMBER, 3, 6, encode(&nfsv3.Read3args{File: nfsv3.NfsFh3{Data: fh}, Offset: 0, Count: 1 << 20}))
	attrXid := r.send(nfsv3.NFS_PROGRAM_PROGRAM_NUMBER, 3, 1, getattrArgs(fh))
	r.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	xid, _, err := nfs.ReadReply(r.conn)
	if err != nil || xid != attrXid {
		t.Fatalf("first reply: to call %d (GETATTR is %d, the READ %d), %v", xid, attrXid, readXid, err)
	}
	c.Signal("storage1", syscall.SIGCONT)
	c.Signal("storage2", syscall.SIGCONT)
	stopped = false
	xid, res, err := r.reply()
	if err != nil || xid != readXid {
		t.Fatalf("second reply: to call %d, %v", xid, err)
	}
	read, _, err := nfsv3.ReadRead3res(res)
	if err != nil {
		t.Fatal(err)
	}
	ok, yes := read.(*nfsv3.Read3res_NFS3_OK)
	if !yes || !bytes.Equal(ok.Resok.Data, data[:1<<20]) {
		t.Fatalf("the READ that waited: status %d, or wrong data", read.GetStatus())
	}
}

// Exports name the client networks, read-only or read-write, and whom
// they squash to the anonymous ids.
func TestNFSGatewayExports(t *testing.T) {
	c := testcluster.Start(t)
	for _, d := range []string{"ro", "sq", "all", "far"} {
		if err := os.Mkdir(filepath.Join(c.Mount(), d), 0); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(c.Mount(), d), 0o777); err != nil {
			t.Fatal(err)
		}
	}
	g := startGateway(t, c,
		"/ro 127.0.0.0/8(ro)",
		"/sq 127.0.0.1(rw)",
		"/all *(rw,all_squash,anonuid=2000,anongid=3000)",
		"/far 10.0.0.0/8(rw) 192.168.0.0/16")
	owner := func(name string) (uint32, uint32) {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(c.Mount(), name), &st); err != nil {
			t.Fatal(err)
		}
		return st.Uid, st.Gid
	}
	root := dialRaw(t, g.addr, 0, 0)

	if _, st := root.mnt("/far"); st != mount.MNT3ERR_ACCES {
		t.Fatalf("MNT of an export for other networks: %d, want MNT3ERR_ACCES", st)
	}
	if _, st := root.mnt("/nothere"); st != mount.MNT3ERR_NOENT {
		t.Fatalf("MNT of a path not exported: %d, want MNT3ERR_NOENT", st)
	}
	waitForLog(t, g.log, "refused 127.0.0.1")

	ro, _ := root.mnt("/ro")
	if _, st := root.create(ro, "f"); st != nfsv3.NFS3ERR_ROFS {
		t.Fatalf("CREATE in a read-only export: %d, want NFS3ERR_ROFS", st)
	}

	sq, _ := root.mnt("/sq")
	if _, st := root.create(sq, "by-root"); st != nfsv3.NFS3_OK {
		t.Fatalf("CREATE by root: %d", st)
	}
	if uid, gid := owner("sq/by-root"); uid != 65534 || gid != 65534 {
		t.Fatalf("root_squash: root's file belongs to %d:%d, want 65534:65534", uid, gid)
	}
	alice := dialRaw(t, g.addr, 1000, 1000)
	if _, st := alice.create(sq, "by-alice"); st != nfsv3.NFS3_OK {
		t.Fatalf("CREATE by uid 1000: %d", st)
	}
	if uid, gid := owner("sq/by-alice"); uid != 1000 || gid != 1000 {
		t.Fatalf("root_squash leaves other users: %d:%d, want 1000:1000", uid, gid)
	}

	all, _ := alice.mnt("/all")
	if _, st := alice.create(all, "squashed"); st != nfsv3.NFS3_OK {
		t.Fatalf("CREATE: %d", st)
	}
	if uid, gid := owner("all/squashed"); uid != 2000 || gid != 3000 {
		t.Fatalf("all_squash with anonuid=2000,anongid=3000: %d:%d", uid, gid)
	}
}

func waitForLog(t *testing.T, path, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(readFile(t, path), want) {
		if time.Now().After(deadline) {
			t.Fatalf("the gateway's log does not say %q:\n%s", want, readFile(t, path))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Bad exports are refused before the gateway starts, naming the problem.
func TestNFSGatewayRefusesBadExports(t *testing.T) {
	for _, tc := range []struct{ export, says string }{
		{"/ *(async)", "async is refused"},
		{"/ nfs.example.com(rw)", "host names are not resolved"},
		{"/ 10.0.0.0/33(rw)", "10.0.0.0/33"},
		{"relative *(rw)", "not absolute"},
		{"/ *(rw,anonuid=x)", "anonuid"},
		{"/ *(rw,no_such_option)", "unknown export option"},
		{"/", "at least one client"},
	} {
		out, err := runTandem(t, "nfs", "--secret-file", "/dev/null", "--listen", "127.0.0.1:0", "--export", tc.export)
		if err == nil || !strings.Contains(out, tc.says) {
			t.Errorf("--export %q: %v, output %q; want an error saying %q", tc.export, err, out, tc.says)
		}
	}
}

// Malformed, unknown and oversized calls get the replies RFC 5531 names,
// or a closed connection, and the gateway goes on serving.
func TestNFSGatewayAnswersBadRPCs(t *testing.T) {
	c := testcluster.Start(t)
	g := startGateway(t, c, "/ 127.0.0.0/8(rw,no_root_squash)")
	r := dialRaw(t, g.addr, 0, 0)
	root, _ := r.mnt("/")
	expect := func(what string, prog, vers, proc uint32, args []byte, want rpcv2.AcceptStat) {
		t.Helper()
		xid := r.send(prog, vers, proc, args)
		got, _, err := r.reply()
		var rerr *nfs.RPCError
		if got != xid || !errors.As(err, &rerr) || rerr.Denied || rerr.Stat != want {
			t.Fatalf("%s: reply to %d, %v; want %s", what, got, err, rpcv2.AcceptStat_name[want])
		}
	}
	expect("an unknown program", 100099, 1, 0, nil, rpcv2.PROG_UNAVAIL)
	expect("NFS version 2", nfsv3.NFS_PROGRAM_PROGRAM_NUMBER, 2, 0, nil, rpcv2.PROG_MISMATCH)
	expect("MOUNT version 2", mount.MOUNT_PROGRAM_PROGRAM_NUMBER, 2, 0, nil, rpcv2.PROG_MISMATCH)
	expect("NFS procedure 99", nfsv3.NFS_PROGRAM_PROGRAM_NUMBER, 3, 99, nil, rpcv2.PROC_UNAVAIL)

	r.cred = rpcv2.OpaqueAuth{Flavor: rpcv2.RPCSEC_GSS}
	xid := r.send(nfsv3.NFS_PROGRAM_PROGRAM_NUMBER, 3, 1, getattrArgs(root))
	var rerr *nfs.RPCError
	if got, _, err := r.reply(); got != xid || !errors.As(err, &rerr) || !rerr.Denied {
		t.Fatalf("a Kerberos credential: %v, want the call denied", err)
	}
	r.cred = authSys(0, 0)

	closes := func(what string, record []byte) {
		t.Helper()
		conn, err := net.Dial("tcp", g.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.Write(record)
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, _, err := nfs.ReadReply(conn); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%s: %v, want the connection closed", what, err)
		}
	}
	expect("GETATTR with a truncated handle", nfsv3.NFS_PROGRAM_PROGRAM_NUMBER, 3, 1, []byte{0, 0}, rpcv2.GARBAGE_ARGS)
	expect("CREATE with createmode 7", nfsv3.NFS_PROGRAM_PROGRAM_NUMBER, 3, 8,
		append(encode(&nfsv3.Diropargs3{Dir: nfsv3.NfsFh3{Data: root}, Name: "x"}), 0, 0, 0, 7), rpcv2.GARBAGE_ARGS)
	expect("MNT with a path longer than the record", mount.MOUNT_PROGRAM_PROGRAM_NUMBER, 3, 1, []byte{0, 0, 1, 0, '/'}, rpcv2.GARBAGE_ARGS)
	huge := binary.BigEndian.AppendUint32(nil, 0x80000000|100<<20)
	closes("a record of 100 MiB", append(huge, make([]byte, 64<<10)...))
	closes("a reply where a call belongs", []byte{0x80, 0, 0, 8, 0, 0, 0, 1, 0, 0, 0, 1})

	if attrs, st := r.getattr(root); st != nfsv3.NFS3_OK || attrs.Type != nfsv3.NF3DIR {
		t.Fatalf("after the bad calls, GETATTR of the root: %d", st)
	}
	if _, st := r.getattr(append([]byte("XX"), root[2:]...)); st != nfsv3.NFS3ERR_BADHANDLE {
		t.Fatalf("GETATTR of a foreign handle: %d, want NFS3ERR_BADHANDLE", st)
	}
}

// inProcessGateway serves c over NFS from this process, so that a fuzzer
// sees (and is guided by) the code that decodes what it sends.
func inProcessGateway(t testing.TB, c *testcluster.Cluster, exports ...string) *gateway {
	t.Helper()
	cl, secret := libraryClient(t, c)
	var parsed []nfs.Export
	for _, line := range exports {
		e, err := nfs.ParseExport(line)
		if err != nil {
			t.Fatal(err)
		}
		parsed = append(parsed, e)
	}
	srv, err := nfs.New(nfs.Config{Client: cl, Secret: secret, Exports: parsed})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(srv.Close) // before the client's Cleanup: last in, first run
	return &gateway{addr: l.Addr().String()}
}

// FuzzNFSGatewayRecords sends byte streams (record marks included) to a
// gateway exporting the file system read-only. Whatever comes, the
// gateway answers or closes the connection, goes on serving, and changes
// no file. `go test` runs the seeds (well-formed calls); `go test -fuzz
// FuzzNFSGatewayRecords ./tests` mutates them.
func FuzzNFSGatewayRecords(f *testing.F) {
	c := testcluster.Start(f)
	sentinel := filepath.Join(c.Mount(), "sentinel")
	content := []byte("must not change")
	if err := os.WriteFile(sentinel, content, 0o644); err != nil {
		f.Fatal(err)
	}
	g := inProcessGateway(f, c, "/ 127.0.0.0/8(ro,no_root_squash)")
	r := dialRaw(f, g.addr, 0, 0)
	root, _ := r.mnt("/")
	fh, _ := r.lookup(root, "sentinel")
	record := func(prog, proc uint32, args []byte) []byte {
		var b bytes.Buffer
		nfs.WriteCall(&b, 1, prog, 3, proc, authSys(0, 0), args)
		return b.Bytes()
	}
	const nfsProg, mountProg = nfsv3.NFS_PROGRAM_PROGRAM_NUMBER, mount.MOUNT_PROGRAM_PROGRAM_NUMBER
	f.Add(record(nfsProg, 0, nil))
	f.Add(record(mountProg, 1, encode(xdrString("/"))))
	f.Add(record(nfsProg, 1, getattrArgs(fh)))
	f.Add(record(nfsProg, 3, encode(&nfsv3.Lookup3args{What: nfsv3.Diropargs3{Dir: nfsv3.NfsFh3{Data: root}, Name: "sentinel"}})))
	f.Add(record(nfsProg, 6, encode(&nfsv3.Read3args{File: nfsv3.NfsFh3{Data: fh}, Count: 100})))
	f.Add(record(nfsProg, 7, encode(&nfsv3.Write3args{File: nfsv3.NfsFh3{Data: fh}, Count: 1, Stable: nfsv3.FILE_SYNC, Data: []byte("X")})))
	f.Add(record(nfsProg, 17, encode(&nfsv3.Readdirplus3args{Dir: nfsv3.NfsFh3{Data: root}, Dircount: 4096, Maxcount: 32768})))
	f.Add(record(nfsProg, 12, encode(&nfsv3.Remove3args{Object: nfsv3.Diropargs3{Dir: nfsv3.NfsFh3{Data: root}, Name: "sentinel"}})))
	f.Add(append(record(nfsProg, 1, getattrArgs(fh)), record(nfsProg, 4, encode(&nfsv3.Access3args{Object: nfsv3.NfsFh3{Data: fh}, Access: 0x3f}))...))

	f.Fuzz(func(t *testing.T, stream []byte) {
		conn, err := net.Dial("tcp", g.addr)
		if err != nil {
			t.Fatalf("the gateway no longer accepts connections: %v", err)
		}
		conn.Write(stream)
		conn.(*net.TCPConn).CloseWrite() // the end of the stream, as the gateway sees it
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.Copy(io.Discard, conn); err != nil { // replies, until the gateway closes
			t.Fatalf("the gateway did not close a connection the client had ended: %v", err)
		}
		conn.Close()
		alive := dialRaw(t, g.addr, 0, 0)
		alive.call(nfsProg, 3, 0, nil) // NULL
		if got := fuseRead(t, sentinel); !bytes.Equal(got, content) {
			t.Fatalf("the sentinel file changed through a read-only export: %q", got)
		}
		if _, err := os.Stat(sentinel); err != nil {
			t.Fatal(err)
		}
	})
}
