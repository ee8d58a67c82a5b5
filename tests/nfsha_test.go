package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/mount"
	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv3"

	"tandemfs/internal/nfs"
	"tandemfs/internal/testcluster"
	"tandemfs/internal/testenv"
)

// The NFS gateway of `tandem up --nfs` is two heads and one service
// address, as NSS-HA's pair: when the active head dies or hangs, the
// other takes the address within seconds, and a client that retries, as
// a hard mount does, sees a stall, never an error or lost data.

// nfsStatusJSON is `tandem status --json`'s "nfs".
type nfsStatusJSON struct {
	Address string `json:"address"`
	Active  string `json:"active"`
	Heads   []struct {
		ID    string `json:"id"`
		State string `json:"state"`
	} `json:"heads"`
}

func gatewayStatus(t *testing.T, c *testcluster.Cluster) nfsStatusJSON {
	t.Helper()
	out, err := runTandem(t, "status", "--data", c.Dir(), "--json")
	if err != nil {
		t.Fatalf("tandem status: %v\n%s", err, out)
	}
	var st struct {
		NFS *nfsStatusJSON `json:"nfs"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.NFS == nil {
		t.Fatalf("tandem status --json has no nfs: %v\n%s", err, out)
	}
	return *st.NFS
}

// hardClient sends calls as a hard mount does: a call without a reply is
// sent again, over a new connection, until one comes. It records the
// longest wait.
type hardClient struct {
	t       *testing.T
	addr    string
	conn    net.Conn
	xid     uint32
	longest time.Duration
}

func (h *hardClient) call(prog, proc uint32, args []byte) *bytes.Reader {
	h.t.Helper()
	start := time.Now()
	for {
		if h.conn == nil {
			c, err := net.DialTimeout("tcp", h.addr, time.Second)
			if err != nil {
				h.wait(start)
				continue
			}
			h.conn = c
		}
		h.xid++
		h.conn.SetDeadline(time.Now().Add(5 * time.Second))
		err := nfs.WriteCall(h.conn, h.xid, prog, 3, proc, authSys(0, 0), args)
		var xid uint32
		var res []byte
		if err == nil {
			xid, res, err = nfs.ReadReply(h.conn)
		}
		if err == nil && xid == h.xid {
			h.longest = max(h.longest, time.Since(start))
			return bytes.NewReader(res)
		}
		h.conn.Close()
		h.conn = nil
		h.wait(start)
	}
}

func (h *hardClient) wait(start time.Time) {
	h.t.Helper()
	if time.Since(start) > 60*time.Second {
		h.t.Fatalf("no head answered on %s for 60 s", h.addr)
	}
	time.Sleep(50 * time.Millisecond)
}

// streamWriter writes a file with UNSTABLE writes and COMMITs, as the
// Linux client does, resending what it had not committed whenever a
// COMMIT's verifier differs from the writes' (a head restarted or took
// over).
type streamWriter struct {
	h       *hardClient
	fh      []byte
	pending map[uint64][]byte
	verf    [8]byte
	resent  int
}

func (w *streamWriter) write(off uint64, data []byte) {
	w.h.t.Helper()
	a := nfsv3.Write3args{File: nfsv3.NfsFh3{Data: w.fh}, Offset: off, Count: uint32(len(data)), Stable: nfsv3.UNSTABLE, Data: data}
	res, _, err := nfsv3.ReadWrite3res(w.h.call(nfsv3.NFS_PROGRAM_PROGRAM_NUMBER, 7, encode(&a)))
	ok, yes := res.(*nfsv3.Write3res_NFS3_OK)
	if err != nil || !yes {
		w.h.t.Fatalf("WRITE at %d: %v %v", off, err, res)
	}
	if ok.Resok.Verf != w.verf && len(w.pending) > 0 {
		w.resend(ok.Resok.Verf) // the writes before went to a head that is gone
	}
	w.verf = ok.Resok.Verf
	w.pending[off] = data
}

func (w *streamWriter) resend(verf [8]byte) {
	for off, data := range w.pending {
		a := nfsv3.Write3args{File: nfsv3.NfsFh3{Data: w.fh}, Offset: off, Count: uint32(len(data)), Stable: nfsv3.UNSTABLE, Data: data}
		w.h.call(nfsv3.NFS_PROGRAM_PROGRAM_NUMBER, 7, encode(&a))
		w.resent++
	}
	w.verf = verf
}

func (w *streamWriter) commit() {
	w.h.t.Helper()
	for {
		res, _, err := nfsv3.ReadCommit3res(w.h.call(nfsv3.NFS_PROGRAM_PROGRAM_NUMBER, 21, encode(&nfsv3.Commit3args{File: nfsv3.NfsFh3{Data: w.fh}})))
		ok, yes := res.(*nfsv3.Commit3res_NFS3_OK)
		if err != nil || !yes {
			w.h.t.Fatalf("COMMIT: %v %v", err, res)
		}
		if ok.Resok.Verf == w.verf {
			clear(w.pending)
			return
		}
		w.resend(ok.Resok.Verf)
	}
}

// writeThrough writes data to a new file name through the gateway, calling
// fail after the first quarter, and returns the longest stall.
func writeThrough(t *testing.T, addr, name string, data []byte, fail func()) (time.Duration, int) {
	h := &hardClient{t: t, addr: addr}
	mres, _, err := mount.ReadMountres3(h.call(mount.MOUNT_PROGRAM_PROGRAM_NUMBER, 1, encode(xdrString("/"))))
	if err != nil {
		t.Fatal(err)
	}
	root := mres.(*mount.Mountres3_MNT3_OK).Mountinfo.Fhandle
	cres, _, err := nfsv3.ReadCreate3res(h.call(nfsv3.NFS_PROGRAM_PROGRAM_NUMBER, 8, encode(&nfsv3.Create3args{
		Where: nfsv3.Diropargs3{Dir: nfsv3.NfsFh3{Data: root}, Name: name},
		How: &nfsv3.Createhow3_UNCHECKED{ObjAttributes: nfsv3.Sattr3{Mode: &nfsv3.SetMode3_TRUE{Mode: 0o644},
			Uid: &nfsv3.SetUid3_default{}, Gid: &nfsv3.SetGid3_default{}, Size: &nfsv3.SetSize3_default{},
			Atime: &nfsv3.SetAtime_default{}, Mtime: &nfsv3.SetMtime_default{}}}})))
	if err != nil {
		t.Fatal(err)
	}
	w := &streamWriter{h: h, fh: cres.(*nfsv3.Create3res_NFS3_OK).Resok.Obj.(*nfsv3.PostOpFh3_TRUE).Handle.Data, pending: map[uint64][]byte{}}
	h.longest = 0
	const piece = 256 << 10
	for off := 0; off < len(data); off += piece {
		if off == len(data)/4+3*piece { // with three writes not committed
			fail()
		}
		w.write(uint64(off), data[off:off+piece])
		if (off/piece)%8 == 7 {
			w.commit()
		}
	}
	w.commit()
	return h.longest, w.resent
}

func TestNFSHeadsFailOverAndClientsLoseNothing(t *testing.T) {
	c := testcluster.Start(t, testcluster.WithNFS())
	st := gatewayStatus(t, c)
	if st.Active == "" || len(st.Heads) != 2 {
		t.Fatalf("after up --nfs: %+v, want an active head of two", st)
	}
	for _, how := range []struct {
		name string
		fail func(head string)
	}{
		{"kill -9", func(head string) { c.KillProcess(head) }},
		{"SIGSTOP (fenced by fence_tandem_kill)", func(head string) { c.Signal(head, syscall.SIGSTOP) }},
	} {
		t.Run(how.name, func(t *testing.T) {
			before := gatewayStatus(t, c)
			data := randomBytes(t, 16<<20)
			name := "stream-" + before.Active
			stall, resent := writeThrough(t, before.Address, name, data, func() { how.fail(before.Active) })
			after := gatewayStatus(t, c)
			t.Logf("%s of %s: longest stall %v, %d writes resent after the verifier changed; %s now serves %s",
				how.name, before.Active, stall.Round(time.Millisecond), resent, after.Active, after.Address)
			if after.Active == before.Active || after.Active == "" {
				t.Fatalf("the address did not move: %+v", after)
			}
			if stall > 8*time.Second {
				t.Fatalf("clients stalled %v (NSS-HA: 30-60 s; the goal here: detection and move within 5 s)", stall)
			}
			if !bytes.Equal(fuseRead(t, filepath.Join(c.Mount(), name)), data) {
				t.Fatal("the file written across the failover differs from what the client wrote")
			}
			c.Up() // the failed head comes back, as a standby
		})
	}
}

// A head that hangs past its lease, and wakes, must not answer: neither
// a request that waited in its socket nor a new one. Here no fence agent
// kills it (the administrator's fence config names none for heads).
func TestNFSHeadThatWakesAfterItsLeaseDoesNotServe(t *testing.T) {
	noFence := filepath.Join(t.TempDir(), "fence.json")
	if err := os.WriteFile(noFence, []byte(`{"servers": {"some-other-server": [{"name": "none", "command": "/bin/false"}]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c := testcluster.Start(t, testcluster.WithNFS(), testcluster.WithFenceConfig(noFence))
	st := gatewayStatus(t, c)
	r := dialRaw(t, st.Address, 0, 0)
	root, _ := r.mnt("/")
	c.Signal(st.Active, syscall.SIGSTOP)
	xid := r.send(nfsv3.NFS_PROGRAM_PROGRAM_NUMBER, 3, 1, getattrArgs(root))
	time.Sleep(5 * time.Second) // well past its 3 s lease
	c.Signal(st.Active, syscall.SIGCONT)
	r.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if got, _, err := nfs.ReadReply(r.conn); err == nil {
		t.Fatalf("the head answered call %d (sent %d) after its lease had run out", got, xid)
	}
	waitForLog(t, filepath.Join(c.Dir(), "logs", st.Active+".log"), "stopped serving "+st.Address)
	// Then a head holds the address again under a new lease: on one
	// machine both heads bind the same loopback address, so the other
	// could not take it while the hung head held the socket, and either
	// may win the lease now. Service resumes.
	h := &hardClient{t: t, addr: st.Address}
	res, _, err := mount.ReadMountres3(h.call(mount.MOUNT_PROGRAM_PROGRAM_NUMBER, 1, encode(xdrString("/"))))
	if _, ok := res.(*mount.Mountres3_MNT3_OK); err != nil || !ok {
		t.Fatalf("MNT after the head woke: %v %v", err, res)
	}
}

// libnfs, a client that retries as a hard mount does, copies
// self-checking streams in and out through the service address while the
// active head is killed: checkstream finds no error in either copy.
func TestNFSHeadFailoverUnderLibnfsCopies(t *testing.T) {
	testenv.RequireCommand(t, "nfs-cp")
	c := testcluster.Start(t, testcluster.WithNFS())
	st := gatewayStatus(t, c)
	host, port, _ := net.SplitHostPort(st.Address)
	url := func(name string) string {
		return fmt.Sprintf("nfs://%s/%s?version=3&nfsport=%s&mountport=%s&auto-traverse-mounts=0", host, name, port, port)
	}
	dir := t.TempDir()
	in := filepath.Join(dir, "in")
	run(t, testcluster.Binary(t), "stream", "gen", "--size", "256M", "-o", in)
	// A stream already in the file system, to copy out during the failure.
	run(t, testcluster.Binary(t), "stream", "gen", "--size", "256M", "-o", filepath.Join(c.Mount(), "out-src"))

	type copied struct {
		what string
		err  error
		took time.Duration
	}
	done := make(chan copied, 2)
	for _, cp := range [][3]string{{"in", in, url("in-copy")}, {"out", url("out-src"), filepath.Join(dir, "out-copy")}} {
		go func() {
			start := time.Now()
			out, err := exec.Command("nfs-cp", cp[1], cp[2]).CombinedOutput()
			if err != nil {
				err = fmt.Errorf("%v: %s", err, out)
			}
			done <- copied{cp[0], err, time.Since(start)}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	c.KillProcess(st.Active)
	for range 2 {
		r := <-done
		if r.err != nil {
			t.Fatalf("nfs-cp %s across the failover: %v", r.what, r.err)
		}
		t.Logf("nfs-cp %s of 256 MiB took %v across the failover", r.what, r.took.Round(time.Millisecond))
	}
	for _, copy := range []string{filepath.Join(c.Mount(), "in-copy"), filepath.Join(dir, "out-copy")} {
		out, err := exec.Command(testcluster.Binary(t), "stream", "check", copy).CombinedOutput()
		if err != nil {
			t.Fatalf("checkstream of %s: %v\n%s", copy, err, out)
		}
	}
	if after := gatewayStatus(t, c); after.Active == st.Active || after.Active == "" {
		t.Fatalf("the address did not move: %+v", after)
	}
}
