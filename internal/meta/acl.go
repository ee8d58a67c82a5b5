package meta

import (
	"syscall"

	"tandemfs/internal/acl"
	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
)

// POSIX ACLs live in an inode's extended attributes, as on ext4 and XFS.
// The rules that tie them to the mode bits are applied here, in the same
// command as the change, so every client sees one answer; each client's
// kernel then enforces them (FUSE_POSIX_ACL).

// isACL says whether an extended attribute is one of the two ACLs.
func isACL(name string) bool { return name == acl.XattrAccess || name == acl.XattrDefault }

// loadACL returns inode ino's ACL of the given attribute, nil if it has
// none.
func (t *tx) loadACL(ino uint64, name string) (acl.ACL, error) {
	v, ok, err := get(t.b, xattrKey(ino, name))
	if err != nil || !ok {
		return nil, err
	}
	a, err := acl.Parse(v)
	if err != nil {
		return nil, rpc.Errorf(syscall.EIO, "inode %d: stored %s: %v", ino, name, err)
	}
	return a, nil
}

// inheritACL gives new inode n what its directory's default ACL says, or,
// without one, applies the creator's umask (posix_acl_create). A new
// directory also takes the default ACL as its own. Symbolic links have
// no ACLs.
func (t *tx) inheritACL(parent, n *inodeRec, umask uint32) error {
	if n.Mode&sIFMT == sIFLNK {
		return nil
	}
	def, err := t.loadACL(parent.Ino, acl.XattrDefault)
	if err != nil {
		return err
	}
	if def == nil {
		n.Mode &^= umask & 0o777
		return nil
	}
	access, mode := acl.Inherit(def, n.Mode)
	n.Mode = mode
	if access != nil {
		t.b.Set(xattrKey(n.Ino, acl.XattrAccess), access.Bytes(), nil)
	}
	if n.isDir() {
		t.b.Set(xattrKey(n.Ino, acl.XattrDefault), def.Bytes(), nil)
	}
	return nil
}

// setACL sets (or, for an empty ACL, removes) one of n's ACLs, as
// set_posix_acl and ext4_set_acl do: an access ACL sets the mode's
// permission bits and is not kept when the mode says it all; a default
// ACL belongs to directories only. The create and replace flags of
// setxattr do not apply to ACLs.
func (t *tx) setACL(n *inodeRec, name string, value []byte, flags uint32) error {
	if n.Mode&sIFMT == sIFLNK {
		return rpc.Errorf(syscall.EOPNOTSUPP, "symbolic links have no ACLs")
	}
	a, err := acl.Parse(value)
	if err != nil {
		return rpc.Errorf(syscall.EINVAL, "%s: %v", name, err)
	}
	key := xattrKey(n.Ino, name)
	if name == acl.XattrDefault {
		if !n.isDir() {
			return rpc.Errorf(syscall.EACCES, "only directories have a default ACL")
		}
		if a == nil {
			t.b.Delete(key, nil)
		} else {
			t.b.Set(key, a.Bytes(), nil)
		}
		return nil
	}
	if a == nil {
		t.b.Delete(key, nil)
		return nil
	}
	perm, equivalent := a.Mode()
	n.Mode = n.Mode&^0o777 | perm
	if flags&proto.XattrKillSgid != 0 {
		n.Mode &^= sISGID
	}
	if equivalent {
		t.b.Delete(key, nil)
	} else {
		t.b.Set(key, a.Bytes(), nil)
	}
	return nil
}

// chmodACL rewrites n's access ACL, if it has one, after its mode changed
// (posix_acl_chmod).
func (t *tx) chmodACL(n *inodeRec) error {
	if n.Mode&sIFMT == sIFLNK {
		return nil
	}
	a, err := t.loadACL(n.Ino, acl.XattrAccess)
	if err != nil || a == nil {
		return err
	}
	t.b.Set(xattrKey(n.Ino, acl.XattrAccess), a.Chmod(n.Mode).Bytes(), nil)
	return nil
}
