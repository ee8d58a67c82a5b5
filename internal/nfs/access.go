package nfs

import (
	"sync"
	"syscall"

	"tandemfs/internal/acl"
	"tandemfs/internal/client"
	"tandemfs/internal/proto"
)

// A FUSE mount leaves permission checks to the kernel (default
// permissions); the gateway makes the same checks itself, with the same
// rules (acl.Permits, Linux's generic_permission with POSIX ACLs), for
// the caller the export's squash rule makes of the request's AUTH_SYS
// credentials.

// aclCache keeps files' access ACLs by inode and version: a change of the
// ACL changes the inode, so a cached one is current while the version is.
type aclCache struct {
	mu sync.Mutex
	m  map[uint64]cachedACL
}

type cachedACL struct {
	version uint64
	acl     acl.ACL
}

const maxCachedACLs = 65536

func (a *aclCache) get(c *client.Client, n *proto.Inode) (acl.ACL, error) {
	a.mu.Lock()
	e, ok := a.m[n.Ino]
	a.mu.Unlock()
	if ok && e.version == n.Version {
		return e.acl, nil
	}
	var parsed acl.ACL
	v, err := c.GetXattr(n.Ino, acl.XattrAccess)
	switch {
	case err == nil:
		if parsed, err = acl.Parse(v); err != nil {
			return nil, syscall.EIO
		}
	case errnoIs(err, syscall.ENODATA):
	default:
		return nil, err
	}
	a.mu.Lock()
	if a.m == nil || len(a.m) >= maxCachedACLs {
		a.m = map[uint64]cachedACL{}
	}
	a.m[n.Ino] = cachedACL{version: n.Version, acl: parsed}
	a.mu.Unlock()
	return parsed, nil
}

// permits reports whether who may access n for want (acl.MayRead, ...).
// The ACL is fetched only when it can matter: not for the owner or root,
// and not when the group bits (the ACL's mask) are zero, as Linux's
// acl_permission_check then does not look at it either.
func (s *Server) permits(n *proto.Inode, who *acl.Caller, want uint16) (bool, error) {
	f := &acl.File{Mode: n.Mode, UID: n.Uid, GID: n.Gid}
	if who.UID == 0 || who.UID == n.Uid || n.Mode&0o070 == 0 {
		return acl.Permits(f, who, want), nil
	}
	a, err := s.acls.get(s.c, n)
	if err != nil {
		return false, err
	}
	f.AccessACL = a
	return acl.Permits(f, who, want), nil
}

// require returns EACCES unless who may access n for want.
func (s *Server) require(n *proto.Inode, who *acl.Caller, want uint16) error {
	ok, err := s.permits(n, who, want)
	if err != nil {
		return err
	}
	if !ok {
		return syscall.EACCES
	}
	return nil
}

// requireData checks a READ or WRITE. As knfsd, the owner may read and
// write a file whatever its mode says: the client checked the mode when
// the file was opened, and a file created read-only is still written
// through the descriptor that created it.
func (s *Server) requireData(n *proto.Inode, who *acl.Caller, want uint16) error {
	if who.UID == n.Uid {
		return nil
	}
	if want == acl.MayRead {
		// As knfsd: execute permission lets a client read (to run it).
		if ok, err := s.permits(n, who, acl.MayRead); err != nil || ok {
			return err
		}
		return s.require(n, who, acl.MayExec)
	}
	return s.require(n, who, want)
}

// mayDelete is Linux's may_delete for victim in dir: write and search on
// the directory, and in a sticky directory only the owner of the victim
// or of the directory (or root) may remove it.
func (s *Server) mayDelete(dir, victim *proto.Inode, who *acl.Caller) error {
	if err := s.require(dir, who, acl.MayWrite|acl.MayExec); err != nil {
		return err
	}
	if dir.Mode&syscall.S_ISVTX != 0 && who.UID != 0 && who.UID != dir.Uid && who.UID != victim.Uid {
		return syscall.EPERM
	}
	return nil
}

// inGroup reports whether who is in group gid.
func inGroup(who *acl.Caller, gid uint32) bool {
	for _, g := range who.GIDs {
		if g == gid {
			return true
		}
	}
	return false
}

// checkSetAttr is Linux's setattr_prepare: only the owner (or root)
// changes the mode or sets times to given values; only root changes the
// owner, and the owner may change the group to one of its own; setting
// the times to now needs ownership or write permission; a size change
// needs write permission (the owner always has it, as for WRITE). It
// returns the mode to set, with set-group-ID cleared where the kernel
// clears it.
func (s *Server) checkSetAttr(n *proto.Inode, who *acl.Caller, r *proto.SetAttrReq) error {
	owner := who.UID == 0 || who.UID == n.Uid
	if r.Valid&proto.SetUid != 0 && r.Uid != n.Uid && who.UID != 0 {
		return syscall.EPERM
	}
	if r.Valid&proto.SetGid != 0 && r.Gid != n.Gid && who.UID != 0 && !(who.UID == n.Uid && inGroup(who, r.Gid)) {
		return syscall.EPERM
	}
	if r.Valid&proto.SetMode != 0 {
		if !owner {
			return syscall.EPERM
		}
		gid := n.Gid
		if r.Valid&proto.SetGid != 0 {
			gid = r.Gid
		}
		if who.UID != 0 && !inGroup(who, gid) {
			r.Mode &^= syscall.S_ISGID
		}
	}
	if r.Valid&(proto.SetAtime|proto.SetMtime) != 0 && !owner {
		return syscall.EPERM
	}
	if r.Valid&(proto.SetAtimeNow|proto.SetMtimeNow) != 0 && !owner {
		if err := s.require(n, who, acl.MayWrite); err != nil {
			return err
		}
	}
	if r.Valid&proto.SetSize != 0 {
		if n.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			return syscall.EISDIR
		}
		if err := s.requireData(n, who, acl.MayWrite); err != nil {
			return err
		}
	}
	return nil
}

// killPrivileges adds to r what a change by who must clear, as Linux
// does: a chown or chgrp of a non-directory clears set-user-ID and
// set-group-ID (the latter when group execute is set); a truncate or
// write by anyone but root clears them too.
func killPrivileges(n *proto.Inode, who *acl.Caller, r *proto.SetAttrReq) {
	if n.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		return
	}
	chown := r.Valid&proto.SetUid != 0 && r.Uid != n.Uid || r.Valid&proto.SetGid != 0 && r.Gid != n.Gid
	truncate := r.Valid&proto.SetSize != 0 && who.UID != 0
	if !chown && !truncate {
		return
	}
	mode := n.Mode
	if r.Valid&proto.SetMode != 0 {
		mode = r.Mode | n.Mode&syscall.S_IFMT
	}
	cleared := acl.KillSuidGid(mode)
	if cleared != mode {
		r.Valid |= proto.SetMode
		r.Mode = cleared
	}
}
