package meta_test

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"

	"tandemfs/internal/client"
	"tandemfs/internal/meta"
	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
	"tandemfs/internal/wire"
)

var testSecret = rpc.Secret("0123456789abcdef0123456789abcdef")

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startMeta runs a one-voter metadata service in dir.
func startMeta(t *testing.T, dir string) *meta.Service {
	t.Helper()
	svc, err := meta.Start(meta.Config{Dir: dir, Listen: freeAddr(t), RaftListen: freeAddr(t),
		Secret: testSecret, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

func newClient(t *testing.T, svc *meta.Service) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{MetaAddr: svc.Addr(), Secret: testSecret, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func setup(t *testing.T) (*meta.Service, *client.Client) {
	svc := startMeta(t, t.TempDir())
	t.Cleanup(svc.Close)
	return svc, newClient(t, svc)
}

func mk(t *testing.T, c *client.Client, parent uint64, name string, mode uint32) *proto.Inode {
	t.Helper()
	n, err := c.Create(&proto.CreateReq{Parent: parent, Name: name, Mode: mode, Creds: proto.Creds{Uid: 1000, Gid: 100}})
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	return n
}

func wantErrno(t *testing.T, err error, want syscall.Errno) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("got error %v, want %v", err, want)
	}
}

func TestCreateLookupAndOwnership(t *testing.T) {
	_, c := setup(t)
	f := mk(t, c, proto.RootIno, "f", syscall.S_IFREG|0o640)
	if f.Uid != 1000 || f.Gid != 100 || f.Nlink != 1 || f.Mode != syscall.S_IFREG|0o640 {
		t.Fatalf("new file attrs %+v", f.Attr)
	}
	if !f.Inline {
		t.Fatal("new regular files start inline")
	}
	got, err := c.Lookup(proto.RootIno, "f")
	if err != nil || got.Ino != f.Ino {
		t.Fatalf("lookup: %v %+v", err, got)
	}
	_, err = c.Create(&proto.CreateReq{Parent: proto.RootIno, Name: "f", Mode: syscall.S_IFREG})
	wantErrno(t, err, syscall.EEXIST)
	_, err = c.Lookup(proto.RootIno, "missing")
	wantErrno(t, err, syscall.ENOENT)
}

func TestDirectoryLinkCounts(t *testing.T) {
	_, c := setup(t)
	d := mk(t, c, proto.RootIno, "d", syscall.S_IFDIR|0o755)
	mk(t, c, d.Ino, "sub", syscall.S_IFDIR|0o755)
	mk(t, c, d.Ino, "file", syscall.S_IFREG|0o644)
	d, _ = c.GetAttr(d.Ino)
	if d.Nlink != 3 {
		t.Fatalf("dir with one subdirectory has nlink %d, want 3", d.Nlink)
	}
	wantErrno(t, c.Unlink(proto.RootIno, "d", true), syscall.ENOTEMPTY)
	wantErrno(t, c.Unlink(d.Ino, "sub", false), syscall.EISDIR)
	wantErrno(t, c.Unlink(d.Ino, "file", true), syscall.ENOTDIR)
	if err := c.Unlink(d.Ino, "sub", true); err != nil {
		t.Fatal(err)
	}
	d, _ = c.GetAttr(d.Ino)
	if d.Nlink != 2 {
		t.Fatalf("nlink after rmdir %d, want 2", d.Nlink)
	}
}

func TestSetgidDirectoryGivesItsGroup(t *testing.T) {
	_, c := setup(t)
	d, err := c.Create(&proto.CreateReq{Parent: proto.RootIno, Name: "g", Mode: syscall.S_IFDIR | 0o2775, Creds: proto.Creds{Uid: 1, Gid: 50}})
	if err != nil {
		t.Fatal(err)
	}
	f := mk(t, c, d.Ino, "f", syscall.S_IFREG|0o644)
	sub := mk(t, c, d.Ino, "sub", syscall.S_IFDIR|0o755)
	if f.Gid != 50 || sub.Gid != 50 || sub.Mode&syscall.S_ISGID == 0 {
		t.Fatalf("file gid %d, subdir gid %d mode %o", f.Gid, sub.Gid, sub.Mode)
	}
}

func TestRename(t *testing.T) {
	_, c := setup(t)
	a := mk(t, c, proto.RootIno, "a", syscall.S_IFDIR|0o755)
	b := mk(t, c, proto.RootIno, "b", syscall.S_IFDIR|0o755)
	f := mk(t, c, a.Ino, "f", syscall.S_IFREG|0o644)
	g := mk(t, c, b.Ino, "g", syscall.S_IFREG|0o644)

	t.Run("replaces an existing file atomically", func(t *testing.T) {
		if err := c.Rename(a.Ino, "f", b.Ino, "g", 0); err != nil {
			t.Fatal(err)
		}
		got, err := c.Lookup(b.Ino, "g")
		if err != nil || got.Ino != f.Ino {
			t.Fatalf("b/g is %v %v, want inode %d", got, err, f.Ino)
		}
		_, err = c.Lookup(a.Ino, "f")
		wantErrno(t, err, syscall.ENOENT)
		_, err = c.GetAttr(g.Ino)
		wantErrno(t, err, syscall.ENOENT)
	})
	t.Run("moves a directory and fixes link counts", func(t *testing.T) {
		mk(t, c, a.Ino, "sub", syscall.S_IFDIR|0o755)
		if err := c.Rename(a.Ino, "sub", b.Ino, "sub", 0); err != nil {
			t.Fatal(err)
		}
		a, _ := c.GetAttr(a.Ino)
		b, _ := c.GetAttr(b.Ino)
		if a.Nlink != 2 || b.Nlink != 3 {
			t.Fatalf("nlink a=%d b=%d, want 2 and 3", a.Nlink, b.Nlink)
		}
	})
	t.Run("refuses to move a directory into itself", func(t *testing.T) {
		sub, _ := c.Lookup(b.Ino, "sub")
		wantErrno(t, c.Rename(proto.RootIno, "b", sub.Ino, "x", 0), syscall.EINVAL)
	})
	t.Run("noreplace and exchange", func(t *testing.T) {
		mk(t, c, a.Ino, "x", syscall.S_IFREG|0o644)
		wantErrno(t, c.Rename(a.Ino, "x", b.Ino, "g", proto.RenameNoReplace), syscall.EEXIST)
		x, _ := c.Lookup(a.Ino, "x")
		g, _ := c.Lookup(b.Ino, "g")
		if err := c.Rename(a.Ino, "x", b.Ino, "g", proto.RenameExchange); err != nil {
			t.Fatal(err)
		}
		x2, _ := c.Lookup(b.Ino, "g")
		g2, _ := c.Lookup(a.Ino, "x")
		if x2.Ino != x.Ino || g2.Ino != g.Ino {
			t.Fatal("exchange did not swap the names")
		}
	})
	t.Run("non-empty directory cannot be replaced", func(t *testing.T) {
		mk(t, c, proto.RootIno, "full", syscall.S_IFDIR|0o755)
		full, _ := c.Lookup(proto.RootIno, "full")
		mk(t, c, full.Ino, "x", syscall.S_IFREG|0o644)
		mk(t, c, proto.RootIno, "empty", syscall.S_IFDIR|0o755)
		wantErrno(t, c.Rename(proto.RootIno, "empty", proto.RootIno, "full", 0), syscall.ENOTEMPTY)
		wantErrno(t, c.Rename(proto.RootIno, "empty", full.Ino, "x", 0), syscall.ENOTDIR)
	})
}

func TestHardLinks(t *testing.T) {
	_, c := setup(t)
	f := mk(t, c, proto.RootIno, "f", syscall.S_IFREG|0o644)
	n, err := c.Link(f.Ino, proto.RootIno, "g")
	if err != nil || n.Nlink != 2 {
		t.Fatalf("link: %v nlink %d", err, n.Nlink)
	}
	if err := c.Unlink(proto.RootIno, "f", false); err != nil {
		t.Fatal(err)
	}
	n, err = c.GetAttr(f.Ino)
	if err != nil || n.Nlink != 1 {
		t.Fatalf("after unlink of one name: %v nlink %d", err, n.Nlink)
	}
	d := mk(t, c, proto.RootIno, "d", syscall.S_IFDIR|0o755)
	_, err = c.Link(d.Ino, proto.RootIno, "d2")
	wantErrno(t, err, syscall.EPERM)
}

func TestXattrs(t *testing.T) {
	_, c := setup(t)
	f := mk(t, c, proto.RootIno, "f", syscall.S_IFREG|0o644)
	wantErrno(t, c.SetXattr(f.Ino, "user.a", []byte("1"), proto.XattrReplace), syscall.ENODATA)
	if err := c.SetXattr(f.Ino, "user.a", []byte("1"), proto.XattrCreate); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, c.SetXattr(f.Ino, "user.a", []byte("2"), proto.XattrCreate), syscall.EEXIST)
	c.SetXattr(f.Ino, "user.b", nil, 0)
	names, _ := c.ListXattr(f.Ino)
	if fmt.Sprint(names) != "[user.a user.b]" {
		t.Fatalf("list %v", names)
	}
	v, err := c.GetXattr(f.Ino, "user.a")
	if err != nil || string(v) != "1" {
		t.Fatalf("get: %q %v", v, err)
	}
	if err := c.RemoveXattr(f.Ino, "user.a"); err != nil {
		t.Fatal(err)
	}
	_, err = c.GetXattr(f.Ino, "user.a")
	wantErrno(t, err, syscall.ENODATA)
}

func TestInlineFilesLiveInTheInode(t *testing.T) {
	_, c := setup(t)
	f := mk(t, c, proto.RootIno, "small", syscall.S_IFREG|0o644)
	h, err := c.Open(f, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("hello, inline world")
	if _, err := h.Write(data, 100); err != nil {
		t.Fatal(err)
	}
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
	n, _ := c.GetAttr(f.Ino)
	if !n.Inline || n.Size != 100+uint64(len(data)) || string(n.InlineData[100:]) != string(data) || !allZero(n.InlineData[:100]) {
		t.Fatalf("inline=%v size=%d data=%q", n.Inline, n.Size, n.InlineData)
	}
	// Truncating shrinks the inline bytes; truncating up adds zeros.
	if _, err := c.SetAttr(&proto.SetAttrReq{Ino: f.Ino, Valid: proto.SetSize, Size: 105}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetAttr(&proto.SetAttrReq{Ino: f.Ino, Valid: proto.SetSize, Size: 200}); err != nil {
		t.Fatal(err)
	}
	n, _ = c.GetAttr(f.Ino)
	if n.Size != 200 || string(n.InlineData[100:105]) != "hello" || !allZero(n.InlineData[105:]) {
		t.Fatalf("after truncates: size %d data %q", n.Size, n.InlineData)
	}
}

// Two clients buffering writes to different bytes of one small file both
// keep theirs: a commit carries the writes, not the whole file.
func TestBufferedInlineWritesOfTwoClientsMerge(t *testing.T) {
	svc, c1 := setup(t)
	c2 := newClient(t, svc)
	f := mk(t, c1, proto.RootIno, "shared", syscall.S_IFREG|0o644)
	h1, err := c1.Open(f, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	h2, err := c2.Open(f, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	h1.Write([]byte("first "), 0)
	h2.Write([]byte("second"), 10)
	h1.Write([]byte("half"), 6) // continues the first write
	h1.Write([]byte("!"), 20)   // h1's own view has zeros where h2 wrote
	for _, h := range []*client.Handle{h2, h1} {
		if err := h.Release(); err != nil {
			t.Fatal(err)
		}
	}
	n, _ := c1.GetAttr(f.Ino)
	if want := "first halfsecond\x00\x00\x00\x00!"; string(n.InlineData) != want || n.Size != uint64(len(want)) {
		t.Fatalf("inline data %q (size %d), want %q", n.InlineData, n.Size, want)
	}
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

func TestReadDirPagesThroughLargeDirectories(t *testing.T) {
	_, c := setup(t)
	const n = 2500
	for i := 0; i < n; i++ {
		mk(t, c, proto.RootIno, fmt.Sprintf("f%05d", i), syscall.S_IFREG|0o644)
	}
	seen, after := 0, ""
	for {
		r, err := c.ReadDir(proto.RootIno, after, 1000, seen == 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Entries) > 1000 {
			t.Fatalf("page of %d entries exceeds the limit", len(r.Entries))
		}
		for _, e := range r.Entries {
			if e.Name != fmt.Sprintf("f%05d", seen) {
				t.Fatalf("entry %d is %q", seen, e.Name)
			}
			seen++
		}
		if !r.More {
			break
		}
		after = r.Entries[len(r.Entries)-1].Name
	}
	if seen != n {
		t.Fatalf("listed %d entries, want %d", seen, n)
	}
}

func TestStateSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	svc := startMeta(t, dir)
	c := newClient(t, svc)
	d := mk(t, c, proto.RootIno, "keep", syscall.S_IFDIR|0o755)
	mk(t, c, d.Ino, "file", syscall.S_IFREG|0o600)
	c.Close()
	svc.Close()

	svc = startMeta(t, dir)
	defer svc.Close()
	c = newClient(t, svc)
	d2, err := c.Lookup(proto.RootIno, "keep")
	if err != nil || d2.Ino != d.Ino {
		t.Fatalf("after restart: %v %+v", err, d2)
	}
	if _, err := c.Lookup(d.Ino, "file"); err != nil {
		t.Fatal(err)
	}
	// New inode numbers continue after the old ones.
	n := mk(t, c, proto.RootIno, "new", syscall.S_IFREG|0o600)
	if n.Ino <= d.Ino {
		t.Fatalf("inode number %d reused after restart", n.Ino)
	}
}

func TestMalformedRequestsGetAnErrorNotACrash(t *testing.T) {
	svc, _ := setup(t)
	raw := rpc.NewClient(svc.Addr(), testSecret)
	defer raw.Close()
	for op := uint16(0); op < 30; op++ {
		err := raw.Call(op, func(e *wire.Enc) { e.B = append(e.B, 1, 2, 3) }, nil)
		if err == nil {
			t.Errorf("op %d accepted a 3-byte garbage request", op)
		}
	}
	// The service still works.
	c := newClient(t, svc)
	mk(t, c, proto.RootIno, "still-alive", syscall.S_IFREG|0o644)
}

func TestWrongSecretIsRefused(t *testing.T) {
	svc, _ := setup(t)
	bad := rpc.NewClient(svc.Addr(), rpc.Secret("not-the-cluster-secret-at-all!!"))
	defer bad.Close()
	err := bad.Call(proto.OpStatFs, nil, nil)
	if !errors.Is(err, rpc.ErrAuth) {
		t.Fatalf("got %v, want an authentication error", err)
	}
}

// TestACrashAfterASnapshotLosesNothing: the state machine's store keeps
// recent commands in memory only (it has no log of its own); a crash
// loses them, and Raft replays them from its log, which starts after the
// last snapshot, so a snapshot must never count what the store has not
// written out.
func TestACrashAfterASnapshotLosesNothing(t *testing.T) {
	dir := t.TempDir()
	svc := startMeta(t, dir)
	c := newClient(t, svc)
	for i := 0; i < 40; i++ {
		mk(t, c, proto.RootIno, fmt.Sprintf("before%d", i), syscall.S_IFREG|0o644)
	}
	if err := svc.TakeSnapshot(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 40; i++ {
		mk(t, c, proto.RootIno, fmt.Sprintf("after%d", i), syscall.S_IFREG|0o644)
	}
	c.Close()
	svc.CrashStoreOnClose()
	svc.Close()

	svc = startMeta(t, dir)
	defer svc.Close()
	c = newClient(t, svc)
	for _, name := range []string{"before", "after"} {
		for i := 0; i < 40; i++ {
			if _, err := c.Lookup(proto.RootIno, fmt.Sprintf("%s%d", name, i)); err != nil {
				t.Fatalf("%s%d after the crash: %v", name, i, err)
			}
		}
	}
}
