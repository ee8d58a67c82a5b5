// Package acl holds the rules of POSIX access control lists (POSIX.1e
// draft 17) as Linux applies them, on the binary form Linux keeps them in:
// the extended attributes system.posix_acl_access and
// system.posix_acl_default. The metadata service applies these rules in
// the same Raft command as the change they belong to, so every client of
// the cluster sees the same ACLs and mode bits.
//
// The rules follow fs/posix_acl.c: an access ACL sets the mode's group
// bits to its mask (Mode), chmod rewrites the owner, mask and other
// entries (Chmod), and a new file inherits its directory's default ACL,
// masked by the mode it was created with (Inherit). Permits answers a
// permission check as the kernel's generic_permission does, for servers
// that check on a client's behalf (the NFS gateway) and for FUSE's
// ACCESS; a FUSE mount's kernel checks by itself.
package acl

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The extended attributes that hold a file's ACLs.
const (
	XattrAccess  = "system.posix_acl_access"
	XattrDefault = "system.posix_acl_default"
)

// Tag says whom an entry is for (linux/posix_acl.h).
type Tag uint16

const (
	UserObj  Tag = 0x01 // the file's owner
	User     Tag = 0x02 // a named user
	GroupObj Tag = 0x04 // the file's group
	Group    Tag = 0x08 // a named group
	Mask     Tag = 0x10 // the most any named entry or the group may grant
	Other    Tag = 0x20 // everyone else
)

// Permission bits of an entry.
const (
	Read    = 4
	Write   = 2
	Execute = 1
)

// Entry is one line of an ACL. ID is a uid for User, a gid for Group, and
// undefinedID for the other tags.
type Entry struct {
	Tag  Tag
	Perm uint16
	ID   uint32
}

// ACL is a list of entries in Linux's order: owner, named users, group,
// named groups, mask, other.
type ACL []Entry

const (
	xattrVersion = 2
	headerSize   = 4
	entrySize    = 8
	undefinedID  = 0xffffffff
	// MaxEntries bounds an ACL as ext4 does with a 4 KiB block.
	MaxEntries = 500
)

// ErrInvalid is wrapped by every error Parse returns for a malformed ACL.
var ErrInvalid = errors.New("invalid POSIX ACL")

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, a...))
}

// Parse decodes and validates an ACL in the extended attribute's form. A
// header without entries is the empty ACL (nil): setting it removes the
// ACL.
func Parse(b []byte) (ACL, error) {
	if len(b) < headerSize {
		return nil, invalid("%d bytes, shorter than the header", len(b))
	}
	if v := binary.LittleEndian.Uint32(b); v != xattrVersion {
		return nil, invalid("version %d, want %d", v, xattrVersion)
	}
	body := b[headerSize:]
	if len(body)%entrySize != 0 {
		return nil, invalid("%d bytes of entries is not a whole number of %d-byte entries", len(body), entrySize)
	}
	n := len(body) / entrySize
	if n == 0 {
		return nil, nil
	}
	if n > MaxEntries {
		return nil, invalid("%d entries, at most %d", n, MaxEntries)
	}
	a := make(ACL, n)
	for i := range a {
		e := body[i*entrySize:]
		a[i] = Entry{
			Tag:  Tag(binary.LittleEndian.Uint16(e)),
			Perm: binary.LittleEndian.Uint16(e[2:]),
			ID:   binary.LittleEndian.Uint32(e[4:]),
		}
	}
	return a, a.Valid()
}

// Bytes encodes a in the extended attribute's form.
func (a ACL) Bytes() []byte {
	b := make([]byte, headerSize+entrySize*len(a))
	binary.LittleEndian.PutUint32(b, xattrVersion)
	for i, e := range a {
		p := b[headerSize+i*entrySize:]
		binary.LittleEndian.PutUint16(p, uint16(e.Tag))
		binary.LittleEndian.PutUint16(p[2:], e.Perm)
		id := e.ID
		if e.Tag != User && e.Tag != Group {
			id = undefinedID
		}
		binary.LittleEndian.PutUint32(p[4:], id)
	}
	return b
}

// Valid checks a as posix_acl_valid does: entries in order of their tags,
// exactly one owner, group and other entry, a mask whenever there is a
// named entry, and permissions within rwx. Like Linux, it does not order
// named entries by id.
func (a ACL) Valid() error {
	const done = 0
	state := UserObj
	needsMask := false
	for i, e := range a {
		if e.Perm&^(Read|Write|Execute) != 0 {
			return invalid("entry %d has permission bits %#o", i, e.Perm)
		}
		switch e.Tag {
		case UserObj:
			if state != UserObj {
				return invalid("entry %d: a second owner entry, or one out of order", i)
			}
			state = User
		case User, Group:
			if (e.Tag == User && state != User) || (e.Tag == Group && state != Group) {
				return invalid("entry %d: a named entry out of order", i)
			}
			if e.ID == undefinedID {
				return invalid("entry %d: a named entry without an id", i)
			}
			needsMask = true
		case GroupObj:
			if state != User {
				return invalid("entry %d: a group entry out of order", i)
			}
			state = Group
		case Mask:
			if state != Group {
				return invalid("entry %d: a mask entry out of order", i)
			}
			state = Other
		case Other:
			if state != Other && (state != Group || needsMask) {
				return invalid("entry %d: the other entry out of order, or a named entry without a mask", i)
			}
			state = done
		default:
			return invalid("entry %d has unknown tag %#x", i, e.Tag)
		}
	}
	if state != done {
		return invalid("owner, group or other entry missing")
	}
	return nil
}

// Mode returns the permission bits (0777) a valid access ACL stands for,
// and whether the ACL says no more than those bits (only owner, group and
// other entries), in which case a file keeps no ACL, only its mode
// (posix_acl_equiv_mode).
func (a ACL) Mode() (perm uint32, equivalent bool) {
	equivalent = true
	for _, e := range a {
		p := uint32(e.Perm & 7)
		switch e.Tag {
		case UserObj:
			perm |= p << 6
		case GroupObj:
			perm |= p << 3
		case Other:
			perm |= p
		case Mask:
			// Listed after the group entry: the group bits show the mask.
			perm = perm&^0o070 | p<<3
			equivalent = false
		case User, Group:
			equivalent = false
		}
	}
	return perm, equivalent
}

// Chmod returns a copy of access ACL a after a chmod to mode: the owner
// and other entries take the new bits, and the group bits go to the mask
// if there is one, else to the group entry (posix_acl_chmod_masq). Named
// entries keep their permissions; the mask limits them.
func (a ACL) Chmod(mode uint32) ACL {
	c := append(ACL(nil), a...)
	group, mask := -1, -1
	for i := range c {
		switch c[i].Tag {
		case UserObj:
			c[i].Perm = uint16(mode>>6) & 7
		case Other:
			c[i].Perm = uint16(mode) & 7
		case GroupObj:
			group = i
		case Mask:
			mask = i
		}
	}
	if mask >= 0 {
		c[mask].Perm = uint16(mode>>3) & 7
	} else if group >= 0 {
		c[group].Perm = uint16(mode>>3) & 7
	}
	return c
}

// Inherit applies a directory's default ACL to a new file created with
// mode (type and permission bits): the file's access ACL is the default
// ACL with each class limited by the mode's bits, and the mode keeps only
// what that ACL grants (posix_acl_create_masq). access is nil when the
// result says no more than the mode. The umask does not apply when a
// default ACL exists.
func Inherit(def ACL, mode uint32) (access ACL, newMode uint32) {
	c := append(ACL(nil), def...)
	perm := mode & 0o7777
	equivalent := true
	group, mask := -1, -1
	for i := range c {
		e := &c[i]
		switch e.Tag {
		case UserObj:
			e.Perm &= uint16(perm>>6) & 7
			perm &= uint32(e.Perm)<<6 | ^uint32(0o700)
		case Other:
			e.Perm &= uint16(perm) & 7
			perm &= uint32(e.Perm) | ^uint32(0o007)
		case GroupObj:
			group = i
		case Mask:
			mask = i
			equivalent = false
		case User, Group:
			equivalent = false
		}
	}
	class := group
	if mask >= 0 {
		class = mask
	}
	if class >= 0 {
		c[class].Perm &= uint16(perm>>3) & 7
		perm &= uint32(c[class].Perm)<<3 | ^uint32(0o070)
	}
	newMode = mode&^0o7777 | perm
	if equivalent {
		return nil, newMode
	}
	return c, newMode
}
