package nfs

import (
	"context"
	"syscall"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv3"
	"golang.org/x/sys/unix"

	"tandemfs/internal/acl"
	"tandemfs/internal/proto"
)

// The procedures that change names. Each is one metadata service call,
// which returns once the change is in the Raft log of a majority: durable
// before the reply, as RFC 1813 asks of them.

// parentFor resolves a directory to change for r's caller, who must be
// allowed to write and search it.
func (s *Server) parentFor(ctx context.Context, fh nfsv3.NfsFh3) (*request, *proto.Inode, error) {
	r, dir, err := s.resolve(ctx, fh)
	if err != nil {
		return nil, nil, err
	}
	if err := r.writable(); err != nil {
		return r, dir, err
	}
	if dir.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return r, dir, syscall.ENOTDIR
	}
	return r, dir, s.require(dir, &r.who, acl.MayWrite|acl.MayExec)
}

// made answers a CREATE, MKDIR, SYMLINK or MKNOD.
type made struct {
	fh    nfsv3.PostOpFh3
	attrs nfsv3.PostOpAttr
	wcc   nfsv3.WccData
}

func (s *Server) madeReply(r *request, dir *proto.Inode, n *proto.Inode) made {
	return made{fh: &nfsv3.PostOpFh3_TRUE{Handle: s.handleOf(r.exp.root.Load(), n.Ino)},
		attrs: s.postOp(n), wcc: s.wcc(dir, dir.Ino)}
}

func (s *Server) dirWcc(dir *proto.Inode) nfsv3.WccData {
	if dir == nil {
		return noWcc()
	}
	return s.wcc(dir, dir.Ino)
}

// makeNode creates name in dir with mode (type and permissions) for r's
// caller, and then the other attributes a asks for (owner, size, times),
// as knfsd does.
func (s *Server) makeNode(r *request, dir *proto.Inode, name string, mode, rdev uint32, target string, a *nfsv3.Sattr3) (*proto.Inode, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if m, ok := a.Mode.(*nfsv3.SetMode3_TRUE); ok {
		mode = mode&syscall.S_IFMT | m.Mode&0o7777
	}
	gid := uint32(0)
	if len(r.who.GIDs) > 0 {
		gid = r.who.GIDs[0]
	}
	// The client applied its umask already; a default ACL of dir still
	// applies (the metadata service applies it when Umask is zero).
	n, err := s.c.Create(&proto.CreateReq{Parent: dir.Ino, Name: name, Mode: mode, Rdev: rdev, Target: target,
		Creds: proto.Creds{Uid: r.who.UID, Gid: gid}})
	if err != nil {
		return nil, err
	}
	rest := *a
	rest.Mode = &nfsv3.SetMode3_default{}
	if setAttrReq(n.Ino, &rest).Valid != 0 {
		if m, err := s.setAttr(r, n, &rest); err == nil {
			n = m
		}
	}
	return n, nil
}

func (p *nfsProgram) NfsV3Nfsproc3Create(ctx context.Context, a *nfsv3.Create3args) (nfsv3.Create3res, error) {
	s := p.s
	r, dir, err := s.parentFor(ctx, a.Where.Dir)
	fail := func(err error) (nfsv3.Create3res, error) {
		return &nfsv3.Create3res_default{Status: status(err), Resfail: nfsv3.Create3resfail{DirWcc: s.dirWcc(dir)}}, nil
	}
	if err != nil {
		return fail(err)
	}
	var n *proto.Inode
	switch how := a.How.(type) {
	case *nfsv3.Createhow3_UNCHECKED:
		n, err = s.createUnchecked(r, dir, a.Where.Name, &how.ObjAttributes)
	case *nfsv3.Createhow3_GUARDED:
		n, err = s.makeNode(r, dir, a.Where.Name, syscall.S_IFREG|0o644, 0, "", &how.ObjAttributes)
	case *nfsv3.Createhow3_EXCLUSIVE:
		n, err = s.createExclusive(r, dir, a.Where.Name, how.Verf)
	default:
		err = syscall.EINVAL
	}
	if err != nil {
		return fail(err)
	}
	m := s.madeReply(r, dir, n)
	return &nfsv3.Create3res_NFS3_OK{Resok: nfsv3.Create3resok{Obj: m.fh, ObjAttributes: m.attrs, DirWcc: m.wcc}}, nil
}

// createUnchecked creates name, or opens the file of that name: only its
// size is set then (to truncate it), as knfsd does.
func (s *Server) createUnchecked(r *request, dir *proto.Inode, name string, a *nfsv3.Sattr3) (*proto.Inode, error) {
	n, err := s.makeNode(r, dir, name, syscall.S_IFREG|0o644, 0, "", a)
	if !errnoIs(err, syscall.EEXIST) {
		return n, err
	}
	if n, err = s.c.Lookup(dir.Ino, name); err != nil {
		return nil, err
	}
	if n.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return nil, syscall.EEXIST
	}
	if sz, ok := a.Size.(*nfsv3.SetSize3_TRUE); ok {
		return s.setAttr(r, n, &nfsv3.Sattr3{Mode: &nfsv3.SetMode3_default{}, Uid: &nfsv3.SetUid3_default{},
			Gid: &nfsv3.SetGid3_default{}, Size: sz, Atime: &nfsv3.SetAtime_default{}, Mtime: &nfsv3.SetMtime_default{}})
	}
	return n, nil
}

// createExclusive creates name with the client's verifier kept in its
// atime and mtime (RFC 1813, 3.3.8; as knfsd), so that a retransmitted
// CREATE finds its own file and succeeds; the client then sets the real
// attributes with SETATTR.
func (s *Server) createExclusive(r *request, dir *proto.Inode, name string, verf [8]byte) (*proto.Inode, error) {
	stamp := func(b []byte) int64 {
		return int64(uint32(b[0])<<24|uint32(b[1])<<16|uint32(b[2])<<8|uint32(b[3])) * 1e9
	}
	atime, mtime := stamp(verf[:4]), stamp(verf[4:])
	n, err := s.makeNode(r, dir, name, syscall.S_IFREG|0o600, 0, "", &nfsv3.Sattr3{Mode: &nfsv3.SetMode3_default{},
		Uid: &nfsv3.SetUid3_default{}, Gid: &nfsv3.SetGid3_default{}, Size: &nfsv3.SetSize3_default{},
		Atime: &nfsv3.SetAtime_default{}, Mtime: &nfsv3.SetMtime_default{}})
	if errnoIs(err, syscall.EEXIST) {
		if n, err = s.c.Lookup(dir.Ino, name); err != nil {
			return nil, err
		}
		if n.Atime == atime && n.Mtime == mtime && n.Mode&syscall.S_IFMT == syscall.S_IFREG {
			return n, nil // our own, created by the first transmission
		}
		return nil, syscall.EEXIST
	}
	if err != nil {
		return nil, err
	}
	return s.c.SetAttr(&proto.SetAttrReq{Ino: n.Ino, Valid: proto.SetAtime | proto.SetMtime, Atime: atime, Mtime: mtime})
}

func (p *nfsProgram) NfsV3Nfsproc3Mkdir(ctx context.Context, a *nfsv3.Mkdir3args) (nfsv3.Mkdir3res, error) {
	s := p.s
	r, dir, err := s.parentFor(ctx, a.Where.Dir)
	if err == nil {
		var n *proto.Inode
		if n, err = s.makeNode(r, dir, a.Where.Name, syscall.S_IFDIR|0o755, 0, "", &a.Attributes); err == nil {
			m := s.madeReply(r, dir, n)
			return &nfsv3.Mkdir3res_NFS3_OK{Resok: nfsv3.Mkdir3resok{Obj: m.fh, ObjAttributes: m.attrs, DirWcc: m.wcc}}, nil
		}
	}
	return &nfsv3.Mkdir3res_default{Status: status(err), Resfail: nfsv3.Mkdir3resfail{DirWcc: s.dirWcc(dir)}}, nil
}

func (p *nfsProgram) NfsV3Nfsproc3Symlink(ctx context.Context, a *nfsv3.Symlink3args) (nfsv3.Symlink3res, error) {
	s := p.s
	r, dir, err := s.parentFor(ctx, a.Where.Dir)
	if err == nil && (a.Symlink.SymlinkData == "" || len(a.Symlink.SymlinkData) > 4095) {
		err = syscall.EINVAL
	}
	if err == nil {
		attrs := a.Symlink.SymlinkAttributes
		attrs.Mode = &nfsv3.SetMode3_default{} // a symlink's mode is 0777
		var n *proto.Inode
		if n, err = s.makeNode(r, dir, a.Where.Name, syscall.S_IFLNK|0o777, 0, a.Symlink.SymlinkData, &attrs); err == nil {
			m := s.madeReply(r, dir, n)
			return &nfsv3.Symlink3res_NFS3_OK{Resok: nfsv3.Symlink3resok{Obj: m.fh, ObjAttributes: m.attrs, DirWcc: m.wcc}}, nil
		}
	}
	return &nfsv3.Symlink3res_default{Status: status(err), Resfail: nfsv3.Symlink3resfail{DirWcc: s.dirWcc(dir)}}, nil
}

func (p *nfsProgram) NfsV3Nfsproc3Mknod(ctx context.Context, a *nfsv3.Mknod3args) (nfsv3.Mknod3res, error) {
	s := p.s
	r, dir, err := s.parentFor(ctx, a.Where.Dir)
	if err == nil {
		var n *proto.Inode
		if n, err = s.mknod(r, dir, a.Where.Name, a.What); err == nil {
			m := s.madeReply(r, dir, n)
			return &nfsv3.Mknod3res_NFS3_OK{Resok: nfsv3.Mknod3resok{Obj: m.fh, ObjAttributes: m.attrs, DirWcc: m.wcc}}, nil
		}
	}
	return &nfsv3.Mknod3res_default{Status: status(err), Resfail: nfsv3.Mknod3resfail{DirWcc: s.dirWcc(dir)}}, nil
}

// mknod makes a device (root only, as CAP_MKNOD), a socket or a FIFO.
func (s *Server) mknod(r *request, dir *proto.Inode, name string, what nfsv3.Mknoddata3) (*proto.Inode, error) {
	device := func(typ uint32, d nfsv3.Devicedata3) (*proto.Inode, error) {
		if r.who.UID != 0 {
			return nil, syscall.EPERM
		}
		rdev := uint32(unix.Mkdev(d.Spec.Specdata1, d.Spec.Specdata2))
		return s.makeNode(r, dir, name, typ|0o644, rdev, "", &d.DevAttributes)
	}
	switch w := what.(type) {
	case *nfsv3.Mknoddata3_NF3CHR:
		return device(syscall.S_IFCHR, w.Device)
	case *nfsv3.Mknoddata3_NF3BLK:
		return device(syscall.S_IFBLK, w.Device)
	case *nfsv3.Mknoddata3_NF3SOCK:
		return s.makeNode(r, dir, name, syscall.S_IFSOCK|0o644, 0, "", &w.PipeAttributes)
	case *nfsv3.Mknoddata3_NF3FIFO:
		return s.makeNode(r, dir, name, syscall.S_IFIFO|0o644, 0, "", &w.PipeAttributes)
	}
	return nil, errBadType
}

// removeName removes name from dir (a directory when dir is true) for r's
// caller, with the sticky-directory rule, and closes this head's handle
// on the removed inode so that its last link takes it.
func (s *Server) removeName(r *request, dir *proto.Inode, name string, isDir bool) error {
	if err := checkName(name); err != nil {
		return err
	}
	victim, err := s.c.Lookup(dir.Ino, name)
	if err != nil {
		return err
	}
	if err := s.mayDelete(dir, victim, &r.who); err != nil {
		return err
	}
	if err := s.c.Unlink(dir.Ino, name, isDir); err != nil {
		return err
	}
	s.files.forget(victim.Ino)
	return nil
}

func (p *nfsProgram) NfsV3Nfsproc3Remove(ctx context.Context, a *nfsv3.Remove3args) (nfsv3.Remove3res, error) {
	s := p.s
	r, dir, err := s.parentFor(ctx, a.Object.Dir)
	if err == nil {
		if err = s.removeName(r, dir, a.Object.Name, false); err == nil {
			return &nfsv3.Remove3res_NFS3_OK{Resok: nfsv3.Remove3resok{DirWcc: s.wcc(dir, dir.Ino)}}, nil
		}
	}
	return &nfsv3.Remove3res_default{Status: status(err), Resfail: nfsv3.Remove3resfail{DirWcc: s.dirWcc(dir)}}, nil
}

func (p *nfsProgram) NfsV3Nfsproc3Rmdir(ctx context.Context, a *nfsv3.Rmdir3args) (nfsv3.Rmdir3res, error) {
	s := p.s
	r, dir, err := s.parentFor(ctx, a.Object.Dir)
	if err == nil {
		if err = s.removeName(r, dir, a.Object.Name, true); err == nil {
			return &nfsv3.Rmdir3res_NFS3_OK{Resok: nfsv3.Rmdir3resok{DirWcc: s.wcc(dir, dir.Ino)}}, nil
		}
	}
	return &nfsv3.Rmdir3res_default{Status: status(err), Resfail: nfsv3.Rmdir3resfail{DirWcc: s.dirWcc(dir)}}, nil
}

func (p *nfsProgram) NfsV3Nfsproc3Rename(ctx context.Context, a *nfsv3.Rename3args) (nfsv3.Rename3res, error) {
	s := p.s
	r, from, err := s.parentFor(ctx, a.From.Dir)
	var to *proto.Inode
	if err == nil {
		var r2 *request
		if r2, to, err = s.parentFor(ctx, a.To.Dir); err == nil && r2.exp != r.exp {
			err = syscall.EXDEV
		}
	}
	if err == nil {
		err = s.rename(r, from, a.From.Name, to, a.To.Name)
	}
	if err != nil {
		return &nfsv3.Rename3res_default{Status: status(err), Resfail: nfsv3.Rename3resfail{FromdirWcc: s.dirWcc(from), TodirWcc: s.dirWcc(to)}}, nil
	}
	return &nfsv3.Rename3res_NFS3_OK{Resok: nfsv3.Rename3resok{FromdirWcc: s.wcc(from, from.Ino), TodirWcc: s.wcc(to, to.Ino)}}, nil
}

// rename is Linux's rename checks, then one metadata service call: the
// caller may delete from the source directory and the target's name (if
// taken), and a directory moved to another parent must be writable, as
// its ".." changes.
func (s *Server) rename(r *request, from *proto.Inode, oldName string, to *proto.Inode, newName string) error {
	if err := checkName(oldName); err != nil {
		return err
	}
	if err := checkName(newName); err != nil {
		return err
	}
	src, err := s.c.Lookup(from.Ino, oldName)
	if err != nil {
		return err
	}
	if err := s.mayDelete(from, src, &r.who); err != nil {
		return err
	}
	old, err := s.c.Lookup(to.Ino, newName)
	switch {
	case err == nil:
		if old.Ino == src.Ino {
			return nil // two names of one file: nothing to do (POSIX)
		}
		if err := s.mayDelete(to, old, &r.who); err != nil {
			return err
		}
	case !errnoIs(err, syscall.ENOENT):
		return err
	}
	if src.Mode&syscall.S_IFMT == syscall.S_IFDIR && from.Ino != to.Ino {
		if err := s.require(src, &r.who, acl.MayWrite); err != nil {
			return err
		}
	}
	if err := s.c.Rename(from.Ino, oldName, to.Ino, newName, 0); err != nil {
		return err
	}
	if old != nil {
		s.files.forget(old.Ino)
	}
	return nil
}

func (p *nfsProgram) NfsV3Nfsproc3Link(ctx context.Context, a *nfsv3.Link3args) (nfsv3.Link3res, error) {
	s := p.s
	r, file, err := s.resolve(ctx, a.File)
	var dir *proto.Inode
	if err == nil {
		var r2 *request
		if r2, dir, err = s.parentFor(ctx, a.Link.Dir); err == nil && r2.exp != r.exp {
			err = syscall.EXDEV
		}
	}
	if err == nil {
		err = checkName(a.Link.Name)
	}
	if err == nil && file.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		err = syscall.EPERM // as link(2)
	}
	if err == nil {
		if _, err = s.c.Link(file.Ino, dir.Ino, a.Link.Name); err == nil {
			return &nfsv3.Link3res_NFS3_OK{Resok: nfsv3.Link3resok{FileAttributes: s.postOpOf(file.Ino), LinkdirWcc: s.wcc(dir, dir.Ino)}}, nil
		}
	}
	var fileAttrs nfsv3.PostOpAttr = &nfsv3.PostOpAttr_FALSE{}
	if file != nil {
		fileAttrs = s.postOp(file)
	}
	return &nfsv3.Link3res_default{Status: status(err), Resfail: nfsv3.Link3resfail{FileAttributes: fileAttrs, LinkdirWcc: s.dirWcc(dir)}}, nil
}
