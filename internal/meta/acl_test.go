package meta_test

import (
	"bytes"
	"syscall"
	"testing"

	"tandemfs/internal/acl"
	"tandemfs/internal/client"
	"tandemfs/internal/proto"
)

// The metadata service keeps POSIX ACLs and mode bits in step, as ext4
// does, for every client at once.

const none = 0xffffffff

// u::rw-,u:2000:rwx,g::r--,m::rwx,o::---
var withNamedUser = acl.ACL{
	{Tag: acl.UserObj, Perm: 6, ID: none},
	{Tag: acl.User, Perm: 7, ID: 2000},
	{Tag: acl.GroupObj, Perm: 4, ID: none},
	{Tag: acl.Mask, Perm: 7, ID: none},
	{Tag: acl.Other, Perm: 0, ID: none},
}

// attr asks the service, not the client's cache.
func attr(t *testing.T, c *client.Client, ino uint64) *proto.Inode {
	t.Helper()
	n, err := c.FreshAttr(ino)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestSettingAnAccessACLSetsTheModeBits(t *testing.T) {
	_, c := setup(t)
	f := mk(t, c, proto.RootIno, "f", syscall.S_IFREG|0o600)
	if err := c.SetXattr(f.Ino, acl.XattrAccess, withNamedUser.Bytes(), 0); err != nil {
		t.Fatal(err)
	}
	if got := attr(t, c, f.Ino).Mode; got != syscall.S_IFREG|0o670 {
		t.Fatalf("mode %o, want 100670 (group bits from the mask)", got)
	}
	v, err := c.GetXattr(f.Ino, acl.XattrAccess)
	if err != nil || !bytes.Equal(v, withNamedUser.Bytes()) {
		t.Fatalf("stored ACL %x, %v", v, err)
	}
	// An ACL that says no more than a mode is kept as the mode alone.
	plain := acl.ACL{{Tag: acl.UserObj, Perm: 7, ID: none}, {Tag: acl.GroupObj, Perm: 5, ID: none}, {Tag: acl.Other, Perm: 4, ID: none}}
	if err := c.SetXattr(f.Ino, acl.XattrAccess, plain.Bytes(), 0); err != nil {
		t.Fatal(err)
	}
	if got := attr(t, c, f.Ino).Mode; got != syscall.S_IFREG|0o754 {
		t.Fatalf("mode %o, want 100754", got)
	}
	_, err = c.GetXattr(f.Ino, acl.XattrAccess)
	wantErrno(t, err, syscall.ENODATA)
}

func TestChmodRewritesTheACLMask(t *testing.T) {
	_, c := setup(t)
	f := mk(t, c, proto.RootIno, "f", syscall.S_IFREG|0o600)
	if err := c.SetXattr(f.Ino, acl.XattrAccess, withNamedUser.Bytes(), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetAttr(&proto.SetAttrReq{Ino: f.Ino, Valid: proto.SetMode, Mode: 0o640}); err != nil {
		t.Fatal(err)
	}
	v, err := c.GetXattr(f.Ino, acl.XattrAccess)
	if err != nil {
		t.Fatal(err)
	}
	got, err := acl.Parse(v)
	if err != nil {
		t.Fatal(err)
	}
	if got[1].Perm != 7 || got[3].Perm != 4 || got[2].Perm != 4 || got[0].Perm != 6 || got[4].Perm != 0 {
		t.Fatalf("after chmod 640: %v; want the mask r--, the named user still rwx", got)
	}
}

func TestNewEntriesInheritTheDefaultACLInsteadOfTheUmask(t *testing.T) {
	_, c := setup(t)
	d := mk(t, c, proto.RootIno, "d", syscall.S_IFDIR|0o755)
	if err := c.SetXattr(d.Ino, acl.XattrDefault, withNamedUser.Bytes(), 0); err != nil {
		t.Fatal(err)
	}
	f, err := c.Create(&proto.CreateReq{Parent: d.Ino, Name: "f", Mode: syscall.S_IFREG | 0o666, Umask: 0o077})
	if err != nil {
		t.Fatal(err)
	}
	if f.Mode != syscall.S_IFREG|0o660 {
		t.Fatalf("file mode %o, want 100660 (default ACL limited by 666, umask ignored)", f.Mode)
	}
	if _, err := c.GetXattr(f.Ino, acl.XattrAccess); err != nil {
		t.Fatalf("the new file has no access ACL: %v", err)
	}
	_, err = c.GetXattr(f.Ino, acl.XattrDefault)
	wantErrno(t, err, syscall.ENODATA)
	sub, err := c.Create(&proto.CreateReq{Parent: d.Ino, Name: "sub", Mode: syscall.S_IFDIR | 0o777, Umask: 0o077})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := c.GetXattr(sub.Ino, acl.XattrDefault); err != nil || !bytes.Equal(v, withNamedUser.Bytes()) {
		t.Fatalf("a new directory's default ACL: %x, %v; want its parent's", v, err)
	}
	// Without a default ACL the umask applies.
	g, err := c.Create(&proto.CreateReq{Parent: proto.RootIno, Name: "g", Mode: syscall.S_IFREG | 0o666, Umask: 0o027})
	if err != nil {
		t.Fatal(err)
	}
	if g.Mode != syscall.S_IFREG|0o640 {
		t.Fatalf("mode %o, want 100640", g.Mode)
	}
}

func TestBadACLsAreRefusedAndChangeNothing(t *testing.T) {
	_, c := setup(t)
	f := mk(t, c, proto.RootIno, "f", syscall.S_IFREG|0o600)
	noMask := acl.ACL{{Tag: acl.UserObj, Perm: 6, ID: none}, {Tag: acl.User, Perm: 7, ID: 1},
		{Tag: acl.GroupObj, Perm: 4, ID: none}, {Tag: acl.Other, Perm: 0, ID: none}}
	err := c.SetXattr(f.Ino, acl.XattrAccess, noMask.Bytes(), 0)
	wantErrno(t, err, syscall.EINVAL)
	err = c.SetXattr(f.Ino, acl.XattrAccess, []byte{2, 0, 0}, 0)
	wantErrno(t, err, syscall.EINVAL)
	if got := attr(t, c, f.Ino).Mode; got != syscall.S_IFREG|0o600 {
		t.Fatalf("mode %o after refused ACLs", got)
	}
	// Default ACLs are for directories only.
	err = c.SetXattr(f.Ino, acl.XattrDefault, withNamedUser.Bytes(), 0)
	wantErrno(t, err, syscall.EACCES)
	// Removing an ACL that is not there succeeds, as on ext4.
	if err := c.RemoveXattr(f.Ino, acl.XattrAccess); err != nil {
		t.Fatal(err)
	}
}
