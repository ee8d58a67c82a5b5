package tests

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	nfsc "github.com/willscott/go-nfs-client/nfs"
	nfsrpc "github.com/willscott/go-nfs-client/nfs/rpc"
	nfsxdr "github.com/willscott/go-nfs-client/nfs/xdr"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv3"

	"tandemfs/internal/testcluster"
	"tandemfs/internal/testenv"
)

// The NFS gateway (`tandem nfs`) serves the cluster over NFSv3 to an
// independent client (the Go NFS client library here, libnfs in
// TestNFSGatewayWithLibnfs): what a client writes over NFS reads back
// identical through a FUSE mount of the same cluster and the other way
// round, and the gateway checks AUTH_SYS callers as the FUSE mount does.

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// nfsWrite writes data at off of path (created if missing) over NFS.
func nfsWrite(t *testing.T, v *nfsc.Target, path string, off int64, data []byte) {
	t.Helper()
	f, err := v.OpenFile(path, 0o644)
	if err != nil {
		t.Fatalf("open %s over NFS: %v", path, err)
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatalf("write %s over NFS: %v", path, err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close (COMMIT) %s over NFS: %v", path, err)
	}
}

// nfsRead reads all of path over NFS.
func nfsRead(t *testing.T, v *nfsc.Target, path string) []byte {
	t.Helper()
	f, err := v.Open(path)
	if err != nil {
		t.Fatalf("open %s over NFS: %v", path, err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatalf("read %s over NFS: %v", path, err)
	}
	return b
}

// nfsReadBlocks reads f over NFS in reads of size bytes and compares
// each with want.
func nfsReadBlocks(f *nfsc.File, want []byte, size int) error {
	b := make([]byte, size)
	for off := 0; off < len(want); off += size {
		n, err := f.ReadAt(b, int64(off))
		if err != nil && !(errors.Is(err, io.EOF) && n == len(want)-off) {
			return fmt.Errorf("read at %d over NFS: %d bytes, %v", off, n, err)
		}
		if !bytes.Equal(b[:n], want[off:min(off+size, len(want))]) {
			return fmt.Errorf("read at %d over NFS: not the bytes written", off)
		}
	}
	return nil
}

func fuseRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// nfsStatus is the NFS3ERR_* name of err from the Go client ("" for nil).
func nfsStatus(err error) string {
	if err == nil {
		return ""
	}
	if e, ok := err.(*nfsc.Error); ok {
		return e.ErrorString
	}
	// The client library turns three statuses into os errors.
	switch {
	case errors.Is(err, os.ErrPermission):
		return "NFS3ERR_PERM"
	case errors.Is(err, os.ErrExist):
		return "NFS3ERR_EXIST"
	case errors.Is(err, os.ErrNotExist):
		return "NFS3ERR_NOENT"
	}
	return err.Error()
}

func TestNFSGateway(t *testing.T) {
	c := testcluster.Start(t)
	mnt := c.Mount()
	g := startGateway(t, c, "/ 127.0.0.0/8(rw,no_root_squash)")
	v := g.nfsMount(t, "/", 0, 0)

	t.Run("WriteAtOffsetsReadsBackThroughFUSE", func(t *testing.T) {
		head, tail := randomBytes(t, 3<<20), randomBytes(t, 100_000)
		nfsWrite(t, v, "/offsets", 0, head)
		nfsWrite(t, v, "/offsets", 5<<20+7, tail)
		want := append(append(head, make([]byte, 5<<20+7-len(head))...), tail...)
		if got := fuseRead(t, filepath.Join(mnt, "offsets")); !bytes.Equal(got, want) {
			t.Fatalf("FUSE reads %d bytes, not the %d written over NFS (with a hole between)", len(got), len(want))
		}
		if got := nfsRead(t, v, "/offsets"); !bytes.Equal(got, want) {
			t.Fatalf("NFS reads %d bytes, not the %d written", len(got), len(want))
		}
	})

	t.Run("WrittenThroughFUSEReadsBackOverNFS", func(t *testing.T) {
		p := filepath.Join(mnt, "from-fuse")
		for i, size := range []int{100, 2<<20 + 3} { // inline, then on targets
			data := randomBytes(t, size)
			if err := os.WriteFile(p, data, 0o644); err != nil {
				t.Fatal(err)
			}
			if got := nfsRead(t, v, "/from-fuse"); !bytes.Equal(got, data) {
				t.Fatalf("write %d: NFS reads %d bytes, not the %d closed through FUSE", i, len(got), len(data))
			}
		}
	})

	t.Run("WhatAClientWroteIsReadBackFromTheGatewaysMemory", func(t *testing.T) {
		// As a server's page cache keeps what its clients write, the
		// gateway's block cache does: 4 KiB reads of what was just
		// written are answered with every storage server stopped.
		data := randomBytes(t, 1<<20)
		nfsWrite(t, v, "/kept", 0, data)
		f, err := v.Open("/kept")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		c.Signal("storage1", syscall.SIGSTOP)
		c.Signal("storage2", syscall.SIGSTOP)
		read := make(chan error, 1)
		go func() { read <- nfsReadBlocks(f, data, 4096) }()
		select {
		case err := <-read:
			c.Signal("storage1", syscall.SIGCONT)
			c.Signal("storage2", syscall.SIGCONT)
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(2 * time.Second): // well before the servers would be failed over
			c.Signal("storage1", syscall.SIGCONT)
			c.Signal("storage2", syscall.SIGCONT)
			<-read
			t.Fatal("4 KiB reads of what was just written over NFS waited for the stopped storage servers")
		}
		// A change through FUSE replaces what the gateway kept before
		// the next read over NFS.
		changed := randomBytes(t, 1<<20)
		if err := os.WriteFile(filepath.Join(mnt, "kept"), changed, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := nfsReadBlocks(f, changed, 4096); err != nil {
			t.Fatalf("after a change through FUSE: %v", err)
		}
	})

	t.Run("Truncate", func(t *testing.T) {
		data := randomBytes(t, 1<<20)
		nfsWrite(t, v, "/trunc", 0, data)
		for _, size := range []uint64{1000, 3 << 20, 0} {
			if err := v.Setattr("/trunc", nfsc.Sattr3{Size: nfsc.SetSize{SetIt: true, Size: size}}); err != nil {
				t.Fatalf("truncate to %d: %v", size, err)
			}
			// The FUSE mount's kernel hears of the change from its
			// client, as of another mount's change (coherence_test.go).
			showsSoon(t, fmt.Sprintf("a truncate to %d over NFS", size), func() bool {
				fi, err := os.Stat(filepath.Join(mnt, "trunc"))
				return err == nil && uint64(fi.Size()) == size
			})
		}
	})

	t.Run("RenameAlsoOverAnExistingFile", func(t *testing.T) {
		a, b := randomBytes(t, 5000), randomBytes(t, 7000)
		nfsWrite(t, v, "/ren-a", 0, a)
		nfsWrite(t, v, "/ren-b", 0, b)
		if err := v.Rename("/ren-a", "/ren-c"); err != nil {
			t.Fatal(err)
		}
		if err := v.Rename("/ren-c", "/ren-b"); err != nil {
			t.Fatalf("rename over an existing file: %v", err)
		}
		if got := fuseRead(t, filepath.Join(mnt, "ren-b")); !bytes.Equal(got, a) {
			t.Fatal("the renamed file did not replace the target")
		}
		for _, gone := range []string{"ren-a", "ren-c"} {
			if _, err := os.Stat(filepath.Join(mnt, gone)); !os.IsNotExist(err) {
				t.Fatalf("%s still exists: %v", gone, err)
			}
		}
	})

	t.Run("LinkAndSymlink", func(t *testing.T) {
		data := randomBytes(t, 3000)
		nfsWrite(t, v, "/orig", 0, data)
		if st := nfsLink(t, v, "/orig", "/", "hard"); st != 0 {
			t.Fatalf("LINK: status %d", st)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(mnt, "hard"), &st); err != nil || st.Nlink != 2 {
			t.Fatalf("hard link through FUSE: nlink %d, %v", st.Nlink, err)
		}
		if err := v.Symlink("orig", "/soft"); err != nil {
			t.Fatal(err)
		}
		if target, err := os.Readlink(filepath.Join(mnt, "soft")); err != nil || target != "orig" {
			t.Fatalf("symlink made over NFS reads %q, %v through FUSE", target, err)
		}
		if err := os.Symlink("somewhere/else", filepath.Join(mnt, "soft2")); err != nil {
			t.Fatal(err)
		}
		f, err := v.Open("/soft2")
		if err == nil {
			target, err := f.Readlink()
			if err != nil || target != "somewhere/else" {
				t.Fatalf("READLINK of a FUSE symlink: %q, %v", target, err)
			}
		}
	})

	t.Run("ReadDirOfALargeDirectory", func(t *testing.T) {
		const n = 3000
		dir := filepath.Join(mnt, "big")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%05d", i)), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		entries, err := v.ReadDirPlus("/big")
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, e := range entries {
			if e.Name() == "." || e.Name() == ".." {
				continue
			}
			if seen[e.Name()] {
				t.Fatalf("%s listed twice", e.Name())
			}
			seen[e.Name()] = true
		}
		if len(seen) != n {
			t.Fatalf("READDIRPLUS listed %d entries of %d", len(seen), n)
		}
	})

	t.Run("NamesAreBytesNotASCII", func(t *testing.T) {
		names := []string{"café", "日本語のファイル", "latin1-\xe9"}
		if err := os.Mkdir(filepath.Join(mnt, "names"), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			nfsWrite(t, v, "/names/"+name, 0, []byte(name))
			if got := string(fuseRead(t, filepath.Join(mnt, "names", name))); got != name {
				t.Fatalf("%q reads %q through FUSE", name, got)
			}
		}
		entries, err := v.ReadDirPlus("/names")
		if err != nil {
			t.Fatal(err)
		}
		listed := map[string]bool{}
		for _, e := range entries {
			listed[e.Name()] = true
		}
		for _, name := range names {
			if !listed[name] {
				t.Fatalf("READDIRPLUS does not list %q: %v", name, listed)
			}
		}
	})

	t.Run("SetAttr", func(t *testing.T) {
		nfsWrite(t, v, "/attrs", 0, []byte("x"))
		if err := v.Setattr("/attrs", nfsc.Sattr3{Mode: nfsc.SetMode{SetIt: true, Mode: 0o640},
			UID: nfsc.SetUID{SetIt: true, UID: 1234}, GID: nfsc.SetUID{SetIt: true, UID: 5678}}); err != nil {
			t.Fatal(err)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(mnt, "attrs"), &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode&0o7777 != 0o640 || st.Uid != 1234 || st.Gid != 5678 {
			t.Fatalf("after SETATTR, FUSE stats mode %o uid %d gid %d", st.Mode&0o7777, st.Uid, st.Gid)
		}
	})

	t.Run("PermissionsOfOtherUsers", func(t *testing.T) {
		sh(t, `mkdir -m 755 "$1/private" && mkdir -m 777 "$1/open" && echo secret > "$1/open/mine" && chmod 600 "$1/open/mine"`, mnt)
		alice := g.nfsMount(t, "/", 1000, 1000)
		if _, err := alice.Create("/private/f", 0o644); nfsStatus(err) != "NFS3ERR_ACCES" {
			t.Fatalf("uid 1000 creating in root's 0755 directory: %v, want NFS3ERR_ACCES", err)
		}
		nfsWrite(t, alice, "/open/alices", 0, []byte("by alice"))
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(mnt, "open/alices"), &st); err != nil || st.Uid != 1000 || st.Gid != 1000 {
			t.Fatalf("a file alice created: uid %d gid %d, %v", st.Uid, st.Gid, err)
		}
		if _, err := alice.Open("/open/mine"); err == nil {
			f, _ := alice.Open("/open/mine")
			if _, err := io.ReadAll(f); nfsStatus(err) != "NFS3ERR_ACCES" {
				t.Fatalf("uid 1000 reading root's 0600 file: %v, want NFS3ERR_ACCES", err)
			}
		}
		bob := g.nfsMount(t, "/", 1001, 1001)
		if err := nfsTryWrite(bob, "/open/alices", []byte("by bob")); nfsStatus(err) != "NFS3ERR_ACCES" {
			t.Fatalf("uid 1001 writing alice's 0644 file: %v, want NFS3ERR_ACCES", err)
		}
		if err := bob.Setattr("/open/alices", nfsc.Sattr3{Mode: nfsc.SetMode{SetIt: true, Mode: 0o666}}); nfsStatus(err) != "NFS3ERR_PERM" {
			t.Fatalf("uid 1001 chmod of alice's file: %v, want NFS3ERR_PERM", err)
		}
		// An ACL entry set through FUSE lets bob write at once.
		testenv.RequireCommand(t, "setfacl")
		run(t, "setfacl", "-m", "u:1001:rw", filepath.Join(mnt, "open/alices"))
		if err := nfsTryWrite(bob, "/open/alices", []byte("by bob")); err != nil {
			t.Fatalf("uid 1001 writing with an ACL entry granting it: %v", err)
		}
		showsSoon(t, "bob's write over NFS", func() bool {
			return string(fuseRead(t, filepath.Join(mnt, "open/alices"))) == "by bobce"
		})
	})

	t.Run("HandleOfARemovedFileIsStale", func(t *testing.T) {
		nfsWrite(t, v, "/doomed", 0, []byte("soon gone"))
		_, fh, err := v.Lookup("/doomed")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(mnt, "doomed")); err != nil {
			t.Fatal(err)
		}
		if _, err := v.GetAttr(fh); nfsStatus(err) != "NFS3ERR_STALE" {
			t.Fatalf("GETATTR of a removed file's handle: %v, want NFS3ERR_STALE", err)
		}
	})
}

// nfsTryWrite writes data at 0 of an existing file, reporting errors.
func nfsTryWrite(v *nfsc.Target, path string, data []byte) error {
	f, err := v.OpenFile(path, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	return f.Close()
}

// nfsLink makes dir/name a hard link of file with a raw LINK call (the Go
// client has none) and returns the NFS status.
func nfsLink(t *testing.T, v *nfsc.Target, file, dir, name string) uint32 {
	t.Helper()
	_, fh, err := v.Lookup(file)
	if err != nil {
		t.Fatal(err)
	}
	_, dfh, err := v.Lookup(dir)
	if err != nil {
		t.Fatal(err)
	}
	res, err := v.Call(&struct {
		nfsrpc.Header
		File []byte
		Dir  []byte
		Name string
	}{nfsrpc.Header{Rpcvers: 2, Prog: nfsc.Nfs3Prog, Vers: nfsc.Nfs3Vers, Proc: 15, Cred: rootAuth(), Verf: nfsrpc.AuthNull}, fh, dfh, name})
	if err != nil {
		t.Fatal(err)
	}
	st, err := nfsxdr.ReadUint32(res)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func rootAuth() nfsrpc.Auth {
	a := nfsrpc.NewAuthUnix("tandem-test", 0, 0)
	return a.Auth()
}

// The libnfs utilities (nfs-cp, nfs-cat, nfs-ls), a client written
// without our code, copy files in and out.
func TestNFSGatewayWithLibnfs(t *testing.T) {
	testenv.RequireCommand(t, "nfs-cp")
	c := testcluster.Start(t)
	mnt := c.Mount()
	g := startGateway(t, c, "/ 127.0.0.0/8(rw,no_root_squash)")
	src := filepath.Join(t.TempDir(), "src")
	data := randomBytes(t, 20<<20+12345)
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(mnt, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "nfs-cp", src, g.url("/d/copy"))
	if got := fuseRead(t, filepath.Join(mnt, "d/copy")); !bytes.Equal(got, data) {
		t.Fatalf("nfs-cp in: FUSE reads %d bytes, not the %d copied", len(got), len(data))
	}
	back := filepath.Join(t.TempDir(), "back")
	run(t, "nfs-cp", g.url("/d/copy"), back)
	if got := fuseRead(t, back); !bytes.Equal(got, data) {
		t.Fatalf("nfs-cp out: %d bytes, not the %d stored", len(got), len(data))
	}
	if err := os.WriteFile(filepath.Join(mnt, "d/small"), []byte("hello over NFS\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := run(t, "nfs-cat", g.url("/d/small")); got != "hello over NFS\n" {
		t.Fatalf("nfs-cat: %q", got)
	}
	ls := run(t, "nfs-ls", g.url("/d"))
	for _, name := range []string{"copy", "small"} {
		if !strings.Contains(ls, name) {
			t.Fatalf("nfs-ls does not list %s:\n%s", name, ls)
		}
	}
	out, err := exec.Command("nfs-ls", g.url("/missing")).CombinedOutput()
	if err == nil {
		t.Fatalf("nfs-ls of a missing directory succeeded:\n%s", out)
	}
}

// A directory of 100,000 entries lists completely over READDIRPLUS, page
// by page as a Linux client asks (8 KiB of names, 64 KiB of reply), and
// the gateway's memory stays bounded: pages come from the metadata
// service 1,024 entries at a time, and what it keeps is capped whatever
// the directory's size: the client library's namespace cache at 131,072
// inodes and names (which a listing this large fills most of), the
// cookies at 262,144.
func TestNFSGatewayListsAHundredThousandEntriesInBoundedMemory(t *testing.T) {
	const n = 100_000
	c := testcluster.Start(t)
	dir := filepath.Join(c.Mount(), "huge")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 4 {
				f, err := os.Create(filepath.Join(dir, fmt.Sprintf("entry-%06d", i)))
				if err != nil {
					t.Error(err)
					return
				}
				f.Close()
			}
		}()
	}
	wg.Wait()
	g := startGateway(t, c, "/ 127.0.0.0/8(rw,no_root_squash)")
	r := dialRaw(t, g.addr, 0, 0)
	root, _ := r.mnt("/")
	fh, _ := r.lookup(root, "huge")
	// The head takes its block cache's memory as it starts (not what
	// this test measures): the listing begins once that is done.
	steadyRSS(t, g.cmd.Process.Pid)
	before := peakRSS(t, g.cmd.Process.Pid)
	seen := map[string]bool{}
	cookie, calls := uint64(0), 0
	for eof := false; !eof; calls++ {
		a := nfsv3.Readdirplus3args{Dir: nfsv3.NfsFh3{Data: fh}, Cookie: cookie, Dircount: 8192, Maxcount: 65536}
		res, _, err := nfsv3.ReadReaddirplus3res(r.call(nfsv3.NFS_PROGRAM_PROGRAM_NUMBER, 3, 17, encode(&a)))
		ok, yes := res.(*nfsv3.Readdirplus3res_NFS3_OK)
		if err != nil || !yes {
			t.Fatalf("READDIRPLUS at cookie %d: %v %v", cookie, err, res)
		}
		for e := ok.Resok.Reply.Entries; e != nil; e = e.Nextentry {
			if e.Name != "." && e.Name != ".." {
				if seen[e.Name] {
					t.Fatalf("%s listed twice", e.Name)
				}
				seen[e.Name] = true
			}
			cookie = e.Cookie
		}
		eof = ok.Resok.Reply.Eof
	}
	if len(seen) != n {
		t.Fatalf("listed %d entries of %d", len(seen), n)
	}
	peak := peakRSS(t, g.cmd.Process.Pid)
	t.Logf("%d entries in %d READDIRPLUS calls; the gateway's peak resident memory: %d MiB before, %d MiB after", n, calls, before>>20, peak>>20)
	if peak-before > 128<<20 {
		t.Fatalf("the gateway grew by %d MiB listing one directory", (peak-before)>>20)
	}
}

// peakRSS is a process's peak resident memory (VmHWM), in bytes.
func peakRSS(t *testing.T, pid int) int64 { return procStatus(t, pid, "VmHWM:") }

// steadyRSS waits until a process's resident memory (VmRSS) has grown by
// less than 1 MiB in half a second, for at most 20 s.
func steadyRSS(t *testing.T, pid int) {
	t.Helper()
	last := procStatus(t, pid, "VmRSS:")
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		time.Sleep(500 * time.Millisecond)
		now := procStatus(t, pid, "VmRSS:")
		if now-last < 1<<20 {
			return
		}
		last = now
	}
	t.Fatalf("the resident memory of pid %d still grows after 20 s (%d MiB)", pid, last>>20)
}

// procStatus is a size field of /proc/PID/status (such as "VmRSS:"), in
// bytes.
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == field {
			var kib int64
			fmt.Sscan(f[1], &kib)
			return kib << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
