package meta_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"tandemfs/internal/client"
	"tandemfs/internal/meta"
	"tandemfs/internal/proto"
)

// Quotas: the metadata service sums every user's, group's and project's
// files and bytes in the same command as each change, and refuses creates
// and inline writes past their limits.

func quotaOf(t *testing.T, c *client.Client, kind proto.QuotaKind, id uint32) proto.QuotaRecord {
	t.Helper()
	r, err := c.QuotaList(proto.QuotaListReq{Kind: kind, ID: id})
	if err != nil {
		t.Fatal(err)
	}
	return r.Records[0]
}

func setQuota(t *testing.T, c *client.Client, r *proto.QuotaSetReq) {
	t.Helper()
	if err := c.QuotaSet(r); err != nil {
		t.Fatal(err)
	}
}

func wantUsage(t *testing.T, c *client.Client, kind proto.QuotaKind, id uint32, inodes, bytes uint64) {
	t.Helper()
	if q := quotaOf(t, c, kind, id); q.Inodes != inodes || q.Bytes != bytes {
		t.Fatalf("%s %d: %d inodes, %d bytes; want %d and %d", kind, id, q.Inodes, q.Bytes, inodes, bytes)
	}
}

func TestUsageFollowsCreatesWritesChownsAndRemoves(t *testing.T) {
	_, c := setup(t) // mk creates as uid 1000, gid 100
	d := mk(t, c, proto.RootIno, "d", syscall.S_IFDIR|0o755)
	f := mk(t, c, d.Ino, "f", syscall.S_IFREG|0o644)
	wantUsage(t, c, proto.QuotaUser, 1000, 2, 0)
	wantUsage(t, c, proto.QuotaGroup, 100, 2, 0)

	h, err := c.Open(f, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Write(make([]byte, 3000), 0); err != nil { // inline
		t.Fatal(err)
	}
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
	wantUsage(t, c, proto.QuotaUser, 1000, 2, 3000)

	// chown moves the file's charge from one user to the other.
	if _, err := c.SetAttr(&proto.SetAttrReq{Ino: f.Ino, Valid: proto.SetUid, Uid: 2000}); err != nil {
		t.Fatal(err)
	}
	wantUsage(t, c, proto.QuotaUser, 1000, 1, 0)
	wantUsage(t, c, proto.QuotaUser, 2000, 1, 3000)
	// A hard link is one inode, charged once.
	if _, err := c.Link(f.Ino, proto.RootIno, "also"); err != nil {
		t.Fatal(err)
	}
	wantUsage(t, c, proto.QuotaUser, 2000, 1, 3000)
	if err := c.Unlink(d.Ino, "f", false); err != nil {
		t.Fatal(err)
	}
	wantUsage(t, c, proto.QuotaUser, 2000, 1, 3000)
	if err := c.Unlink(proto.RootIno, "also", false); err != nil {
		t.Fatal(err)
	}
	wantUsage(t, c, proto.QuotaUser, 2000, 0, 0)
	wantUsage(t, c, proto.QuotaGroup, 100, 1, 0)
}

func TestAnInodeLimitRefusesCreatesWithEDQUOT(t *testing.T) {
	_, c := setup(t)
	setQuota(t, c, &proto.QuotaSetReq{Kind: proto.QuotaUser, ID: 1000, Set: proto.QuotaSetInodeHard,
		QuotaLimits: proto.QuotaLimits{InodeHard: 3}})
	for _, name := range []string{"a", "b", "c"} {
		mk(t, c, proto.RootIno, name, syscall.S_IFREG|0o644)
	}
	_, err := c.Create(&proto.CreateReq{Parent: proto.RootIno, Name: "d", Mode: syscall.S_IFREG | 0o644,
		Creds: proto.Creds{Uid: 1000, Gid: 100}})
	wantErrno(t, err, syscall.EDQUOT)
	// Another user, and root, are not held by uid 1000's limit.
	if _, err := c.Create(&proto.CreateReq{Parent: proto.RootIno, Name: "e", Mode: syscall.S_IFREG | 0o644,
		Creds: proto.Creds{Uid: 1001, Gid: 100}}); err != nil {
		t.Fatal(err)
	}
	// Once a file is removed there is room again.
	if err := c.Unlink(proto.RootIno, "a", false); err != nil {
		t.Fatal(err)
	}
	mk(t, c, proto.RootIno, "d", syscall.S_IFREG|0o644)
}

func TestASoftLimitIsHeldOnlyForItsGracePeriod(t *testing.T) {
	_, c := setup(t)
	setQuota(t, c, &proto.QuotaSetReq{Kind: proto.QuotaGroup, ID: 100, Set: proto.QuotaSetInodeSoft,
		QuotaLimits: proto.QuotaLimits{InodeSoft: 1}, Grace: proto.QuotaGrace{Inode: int64(time.Second)}})
	mk(t, c, proto.RootIno, "a", syscall.S_IFREG|0o644)
	mk(t, c, proto.RootIno, "b", syscall.S_IFREG|0o644) // over the soft limit: the grace period starts
	q := quotaOf(t, c, proto.QuotaGroup, 100)
	if q.InodeGraceEnd == 0 {
		t.Fatalf("over the soft limit without a grace period: %+v", q)
	}
	mk(t, c, proto.RootIno, "c", syscall.S_IFREG|0o644) // still within it
	time.Sleep(1100 * time.Millisecond)
	_, err := c.Create(&proto.CreateReq{Parent: proto.RootIno, Name: "d", Mode: syscall.S_IFREG | 0o644,
		Creds: proto.Creds{Uid: 1000, Gid: 100}})
	wantErrno(t, err, syscall.EDQUOT)
	for _, name := range []string{"a", "b", "c"} {
		if err := c.Unlink(proto.RootIno, name, false); err != nil {
			t.Fatal(err)
		}
	}
	if q := quotaOf(t, c, proto.QuotaGroup, 100); q.InodeGraceEnd != 0 {
		t.Fatalf("back under the soft limit, the grace period still runs: %+v", q)
	}
}

func TestAByteLimitRefusesInlineWritesPastIt(t *testing.T) {
	_, c := setup(t)
	setQuota(t, c, &proto.QuotaSetReq{Kind: proto.QuotaUser, ID: 1000, Set: proto.QuotaSetBlockHard,
		QuotaLimits: proto.QuotaLimits{BlockHard: 2000}})
	f := mk(t, c, proto.RootIno, "f", syscall.S_IFREG|0o644)
	h, err := c.Open(f, syscall.O_RDWR|syscall.O_SYNC)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	if _, err := h.Write(make([]byte, 1500), 0); err != nil {
		t.Fatal(err)
	}
	_, err = h.Write(make([]byte, 1000), 1500)
	wantErrno(t, err, syscall.EDQUOT)
	wantUsage(t, c, proto.QuotaUser, 1000, 1, 1500)
}

func TestProjectsAreInheritedAndRenamesAcrossThemAreRefused(t *testing.T) {
	_, c := setup(t)
	p := mk(t, c, proto.RootIno, "p", syscall.S_IFDIR|0o755)
	if _, err := c.SetAttr(&proto.SetAttrReq{Ino: p.Ino, Valid: proto.SetProject, Project: 42}); err != nil {
		t.Fatal(err)
	}
	sub := mk(t, c, p.Ino, "sub", syscall.S_IFDIR|0o755)
	f := mk(t, c, sub.Ino, "f", syscall.S_IFREG|0o644)
	if sub.Project != 42 || f.Project != 42 {
		t.Fatalf("projects of new entries: %d, %d; want 42", sub.Project, f.Project)
	}
	wantUsage(t, c, proto.QuotaProject, 42, 3, 0)
	outside := mk(t, c, proto.RootIno, "outside", syscall.S_IFREG|0o644)
	err := c.Rename(proto.RootIno, "outside", p.Ino, "in", 0)
	wantErrno(t, err, syscall.EXDEV)
	_, err = c.Link(outside.Ino, p.Ino, "in")
	wantErrno(t, err, syscall.EXDEV)
	// Out of the project is allowed (the root directory has none).
	if err := c.Rename(sub.Ino, "f", proto.RootIno, "f", 0); err != nil {
		t.Fatal(err)
	}
}

func TestUsageSurvivesACrashAndIsSummedForAnOldFileSystem(t *testing.T) {
	dir := t.TempDir()
	svc := startMeta(t, dir)
	c := newClient(t, svc)
	for _, name := range []string{"a", "b"} {
		mk(t, c, proto.RootIno, name, syscall.S_IFREG|0o644)
	}
	svc.CrashStoreOnClose()
	svc.Close()
	c.Close()
	svc = startMeta(t, dir)
	defer svc.Close()
	c = newClient(t, svc)
	wantUsage(t, c, proto.QuotaUser, 1000, 2, 0)

	// A file system from before quotas: its usage is summed at start.
	svc.ForgetQuotaUsage()
	svc.Close()
	c.Close()
	svc = startMeta(t, dir)
	defer svc.Close()
	c = newClient(t, svc)
	wantUsage(t, c, proto.QuotaUser, 1000, 2, 0)
	wantUsage(t, c, proto.QuotaUser, 0, 1, 0) // the root directory
}

func TestALongListingComesInPages(t *testing.T) {
	defer meta.SetQuotaPage(2)()
	_, c := setup(t)
	for uid := uint32(1); uid <= 5; uid++ {
		if _, err := c.Create(&proto.CreateReq{Parent: proto.RootIno, Name: fmt.Sprint("f", uid), Mode: syscall.S_IFREG | 0o644,
			Creds: proto.Creds{Uid: uid, Gid: 100}}); err != nil {
			t.Fatal(err)
		}
	}
	r, err := c.QuotaList(proto.QuotaListReq{All: true, Kind: proto.QuotaUser})
	if err != nil {
		t.Fatal(err)
	}
	var uids []uint32
	for _, q := range r.Records {
		uids = append(uids, q.ID)
	}
	if fmt.Sprint(uids) != "[0 1 2 3 4 5]" {
		t.Fatalf("users listed in pages of 2: %v; want root and 1-5, each once", uids)
	}
}

func TestAChownThatWouldTakeTheNewOwnerOverALimitIsRefused(t *testing.T) {
	_, c := setup(t)
	setQuota(t, c, &proto.QuotaSetReq{Kind: proto.QuotaUser, ID: 2000, Set: proto.QuotaSetInodeHard,
		QuotaLimits: proto.QuotaLimits{InodeHard: 1}})
	a := mk(t, c, proto.RootIno, "a", syscall.S_IFREG|0o644)
	b := mk(t, c, proto.RootIno, "b", syscall.S_IFREG|0o644)
	if _, err := c.SetAttr(&proto.SetAttrReq{Ino: a.Ino, Valid: proto.SetUid, Uid: 2000}); err != nil {
		t.Fatal(err)
	}
	_, err := c.SetAttr(&proto.SetAttrReq{Ino: b.Ino, Valid: proto.SetUid, Uid: 2000})
	wantErrno(t, err, syscall.EDQUOT)
	wantUsage(t, c, proto.QuotaUser, 2000, 1, 0)
	// A chmod of a file already charged to a user at the limit is fine.
	if _, err := c.SetAttr(&proto.SetAttrReq{Ino: a.Ino, Valid: proto.SetUid | proto.SetMode, Uid: 2000, Mode: 0o600}); err != nil {
		t.Fatal(err)
	}
}
