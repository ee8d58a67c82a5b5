package acl

// Access bits a caller asks for (MAY_READ, MAY_WRITE, MAY_EXEC).
const (
	MayRead  = Read
	MayWrite = Write
	MayExec  = Execute
)

// Caller is whom a permission check is for: a user and the groups it is
// in (its primary group among them).
type Caller struct {
	UID  uint32
	GIDs []uint32
}

func (c *Caller) inGroup(gid uint32) bool {
	for _, g := range c.GIDs {
		if g == gid {
			return true
		}
	}
	return false
}

// File is what a permission check looks at: the mode (type and
// permission bits), the owner and group, and the access ACL (nil: none).
type File struct {
	Mode      uint32
	UID, GID  uint32
	AccessACL ACL
}

// Permits reports whether c may access f for want (MayRead, MayWrite,
// MayExec, or'ed), as Linux's generic_permission answers with POSIX ACLs:
// the owner gets the owner bits; otherwise an ACL with group bits decides
// (named users, then the groups, limited by the mask); otherwise the group
// or other bits. Root (uid 0) has CAP_DAC_OVERRIDE: it may read and write
// anything, search any directory, and execute a file any execute bit is
// set on. A server that answers for clients (NFS) squashes root before it
// asks.
func Permits(f *File, c *Caller, want uint16) bool {
	want &= MayRead | MayWrite | MayExec
	if aclPermits(f, c, want) {
		return true
	}
	if c.UID != 0 {
		return false
	}
	if f.Mode&0o170000 == 0o040000 {
		return true
	}
	return want&MayExec == 0 || f.Mode&0o111 != 0
}

// aclPermits is acl_permission_check and posix_acl_permission.
func aclPermits(f *File, c *Caller, want uint16) bool {
	mode := uint16(f.Mode)
	if c.UID == f.UID {
		return want&^(mode>>6)&7 == 0
	}
	if f.AccessACL != nil && mode&0o070 != 0 {
		return f.AccessACL.permits(f, c, want)
	}
	if c.inGroup(f.GID) {
		mode >>= 3
	}
	return want&^mode&7 == 0
}

// permits walks the ACL as posix_acl_permission does: the first entry that
// names the caller decides, limited by the mask for all but the owner and
// other entries; a caller in several of the groups it names is granted if
// any one grants.
func (a ACL) permits(f *File, c *Caller, want uint16) bool {
	masked := func(i int) bool {
		for _, m := range a[i+1:] {
			if m.Tag == Mask {
				return a[i].Perm&m.Perm&want == want
			}
		}
		return a[i].Perm&want == want
	}
	found := false
	for i, e := range a {
		switch e.Tag {
		case UserObj:
			if c.UID == f.UID {
				return e.Perm&want == want
			}
		case User:
			if c.UID == e.ID {
				return masked(i)
			}
		case GroupObj:
			if c.inGroup(f.GID) {
				found = true
				if e.Perm&want == want {
					return masked(i)
				}
			}
		case Group:
			if c.inGroup(e.ID) {
				found = true
				if e.Perm&want == want {
					return masked(i)
				}
			}
		case Other:
			if found {
				return false
			}
			return e.Perm&want == want
		}
	}
	return false
}

// KillSuidGid is mode without set-user-ID, and without set-group-ID when
// group execute is set, as Linux clears them when an unprivileged user
// writes or truncates a file, and on every chown of one (without group
// execute, set-group-ID marks mandatory locking, and stays).
func KillSuidGid(mode uint32) uint32 {
	mode &^= 0o4000
	if mode&0o010 != 0 {
		mode &^= 0o2000
	}
	return mode
}
