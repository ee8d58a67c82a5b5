package nfs

import (
	"context"
	"slices"
	"syscall"

	"github.com/buildbarn/go-xdr/pkg/protocols/mount"
	"github.com/buildbarn/go-xdr/pkg/protocols/rpcv2"
)

// mountProgram implements MOUNT version 3 (RFC 1813, appendix I) on the
// NFS port. The gateway keeps no table of mounts (NFSv3 needs none, and
// a table would be lost at a failover anyway): DUMP lists none, UMNT and
// UMNTALL succeed. Version 1 is refused, as NFSv2 is not served.
type mountProgram struct{ s *Server }

func (m *mountProgram) MountV3Mountproc3Null(ctx context.Context) error { return nil }

// MountV3Mountproc3Mnt mounts an export or, as Linux's mountd allows, a
// directory below one (the export's rules apply).
func (m *mountProgram) MountV3Mountproc3Mnt(ctx context.Context, dirPath string) (mount.Mountres3, error) {
	s := m.s
	e, below := s.exportOf(dirPath)
	cred := credentialsOf(ctx)
	if e == nil {
		if s.denied.allow() {
			s.logf("nfs: %s asked to mount %q, which is not exported", cred.from, dirPath)
		}
		return &mount.Mountres3_default{FhsStatus: mount.MNT3ERR_NOENT}, nil
	}
	r, err := s.admit(ctx, e)
	if err != nil {
		return &mount.Mountres3_default{FhsStatus: mount.MNT3ERR_ACCES}, nil
	}
	root, err := s.resolveExport(e)
	n := root
	for _, name := range below {
		if err != nil {
			break
		}
		n, err = s.lookupIn(r, n, name)
	}
	if err == nil && n.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		err = syscall.ENOTDIR
	}
	if err != nil {
		s.logf("nfs: mount of %s by %s: %v", dirPath, cred.from, err)
		return &mount.Mountres3_default{FhsStatus: mountStatus(err)}, nil
	}
	return &mount.Mountres3_MNT3_OK{Mountinfo: mount.Mountres3Ok{
		Fhandle:     s.handleOf(root.Ino, n.Ino).Data,
		AuthFlavors: []int32{int32(rpcv2.AUTH_SYS), int32(rpcv2.AUTH_NONE)}}}, nil
}

func mountStatus(err error) mount.Mountstat3 {
	switch {
	case errnoIs(err, syscall.ENOENT):
		return mount.MNT3ERR_NOENT
	case errnoIs(err, syscall.ENOTDIR):
		return mount.MNT3ERR_NOTDIR
	case errnoIs(err, syscall.EACCES):
		return mount.MNT3ERR_ACCES
	case errnoIs(err, syscall.ENAMETOOLONG):
		return mount.MNT3ERR_NAMETOOLONG
	}
	return mount.MNT3ERR_IO
}

// exportOf finds the export holding a MOUNT path: the one with the
// longest path that is the path or one of its ancestors, and the names
// from there down.
func (s *Server) exportOf(p string) (*export, []string) {
	names := splitPath(p)
	var best *export
	var rest []string
	for _, e := range s.exports {
		root := splitPath(e.Path)
		if len(root) > len(names) || best != nil && len(root) <= len(splitPath(best.Path)) {
			continue
		}
		if slices.Equal(root, names[:len(root)]) {
			best, rest = e, names[len(root):]
		}
	}
	return best, rest
}

func (m *mountProgram) MountV3Mountproc3Dump(ctx context.Context) (*mount.Mountbody, error) {
	return nil, nil
}

func (m *mountProgram) MountV3Mountproc3Umnt(ctx context.Context, dirPath string) error { return nil }

func (m *mountProgram) MountV3Mountproc3Umntall(ctx context.Context) error { return nil }

// MountV3Mountproc3Export lists the exports and, as groups, the client
// networks of each.
func (m *mountProgram) MountV3Mountproc3Export(ctx context.Context) (*mount.Exportnode, error) {
	var head *mount.Exportnode
	for i := len(m.s.exports) - 1; i >= 0; i-- {
		e := m.s.exports[i]
		var groups *mount.Groupnode
		for j := len(e.Rules) - 1; j >= 0; j-- {
			name := "*"
			if e.Rules[j].Net.IsValid() {
				name = e.Rules[j].Net.String()
			}
			groups = &mount.Groupnode{GrName: name, GrNext: groups}
		}
		head = &mount.Exportnode{ExDir: e.Path, ExGroups: groups, ExNext: head}
	}
	return head, nil
}

// Version 1 (for NFSv2) answers nothing but NULL.
func (m *mountProgram) MountV1MountprocNull(ctx context.Context) error { return nil }

func (m *mountProgram) MountV1MountprocMnt(ctx context.Context, dirPath string) (mount.Fhstatus, error) {
	return &mount.Fhstatus_default{Status: uint32(mount.MNT3ERR_NOTSUPP)}, nil
}

func (m *mountProgram) MountV1MountprocDump(ctx context.Context) (*mount.Mountbody, error) {
	return nil, nil
}

func (m *mountProgram) MountV1MountprocUmnt(ctx context.Context, dirPath string) error { return nil }

func (m *mountProgram) MountV1MountprocUmntall(ctx context.Context) error { return nil }

func (m *mountProgram) MountV1MountprocExport(ctx context.Context) (*mount.Exportnode, error) {
	return m.MountV3Mountproc3Export(ctx)
}
