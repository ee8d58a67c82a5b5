package nfs

import (
	"context"
	"syscall"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv3"

	"tandemfs/internal/acl"
	"tandemfs/internal/proto"
)

// nfsProgram implements the NFSv3 procedures (RFC 1813). Every procedure
// answers with a status; none returns an error, which would close the
// connection.
type nfsProgram struct{ s *Server }

func (p *nfsProgram) NfsV3Nfsproc3Null(ctx context.Context) error { return nil }

func (p *nfsProgram) NfsV3Nfsproc3Getattr(ctx context.Context, a *nfsv3.Getattr3args) (nfsv3.Getattr3res, error) {
	s := p.s
	_, n, err := s.resolve(ctx, a.Object)
	if err != nil {
		return &nfsv3.Getattr3res_default{Status: status(err)}, nil
	}
	return &nfsv3.Getattr3res_NFS3_OK{Resok: nfsv3.Getattr3resok{ObjAttributes: s.fattr(n)}}, nil
}

// setAttrReq turns an sattr3 into a metadata service request for ino.
func setAttrReq(ino uint64, a *nfsv3.Sattr3) proto.SetAttrReq {
	r := proto.SetAttrReq{Ino: ino, Now: time.Now().UnixNano()}
	if m, ok := a.Mode.(*nfsv3.SetMode3_TRUE); ok {
		r.Valid |= proto.SetMode
		r.Mode = m.Mode & 0o7777
	}
	if u, ok := a.Uid.(*nfsv3.SetUid3_TRUE); ok {
		r.Valid |= proto.SetUid
		r.Uid = u.Uid
	}
	if g, ok := a.Gid.(*nfsv3.SetGid3_TRUE); ok {
		r.Valid |= proto.SetGid
		r.Gid = g.Gid
	}
	if sz, ok := a.Size.(*nfsv3.SetSize3_TRUE); ok {
		r.Valid |= proto.SetSize
		r.Size = sz.Size
	}
	switch t := a.Atime.(type) {
	case *nfsv3.SetAtime_SET_TO_CLIENT_TIME:
		r.Valid |= proto.SetAtime
		r.Atime = int64(t.Atime.Seconds)*1e9 + int64(t.Atime.Nseconds)
	case *nfsv3.SetAtime_default:
		if t.SetIt == nfsv3.SET_TO_SERVER_TIME {
			r.Valid |= proto.SetAtimeNow
		}
	}
	switch t := a.Mtime.(type) {
	case *nfsv3.SetMtime_SET_TO_CLIENT_TIME:
		r.Valid |= proto.SetMtime
		r.Mtime = int64(t.Mtime.Seconds)*1e9 + int64(t.Mtime.Nseconds)
	case *nfsv3.SetMtime_default:
		if t.SetIt == nfsv3.SET_TO_SERVER_TIME {
			r.Valid |= proto.SetMtimeNow
		}
	}
	return r
}

// setAttr applies the attributes a asks for to n, as r's caller may.
func (s *Server) setAttr(r *request, n *proto.Inode, a *nfsv3.Sattr3) (*proto.Inode, error) {
	req := setAttrReq(n.Ino, a)
	if req.Valid == 0 {
		return n, nil
	}
	if err := r.writable(); err != nil {
		return nil, err
	}
	if err := s.checkSetAttr(n, &r.who, &req); err != nil {
		return nil, err
	}
	killPrivileges(n, &r.who, &req)
	if req.Valid&proto.SetSize != 0 {
		// Writes this head holds for the file go first, then the
		// truncate, which the client library orders after them.
		h, done, err := s.files.open(n)
		if err != nil {
			return nil, err
		}
		defer done()
		if err := h.Flush(); err != nil {
			return nil, err
		}
	}
	return s.c.SetAttr(&req)
}

func (p *nfsProgram) NfsV3Nfsproc3Setattr(ctx context.Context, a *nfsv3.Setattr3args) (nfsv3.Setattr3res, error) {
	s := p.s
	r, n, err := s.resolve(ctx, a.Object)
	if err != nil {
		return &nfsv3.Setattr3res_default{Status: status(err), Resfail: nfsv3.Setattr3resfail{ObjWcc: noWcc()}}, nil
	}
	if g, ok := a.Guard.(*nfsv3.Sattrguard3_TRUE); ok && nfsTime(n.Ctime) != g.ObjCtime {
		return &nfsv3.Setattr3res_default{Status: nfsv3.NFS3ERR_NOT_SYNC, Resfail: nfsv3.Setattr3resfail{ObjWcc: s.wcc(n, n.Ino)}}, nil
	}
	if _, err := s.setAttr(r, n, &a.NewAttributes); err != nil {
		return &nfsv3.Setattr3res_default{Status: status(err), Resfail: nfsv3.Setattr3resfail{ObjWcc: s.wcc(n, n.Ino)}}, nil
	}
	return &nfsv3.Setattr3res_NFS3_OK{Resok: nfsv3.Setattr3resok{ObjWcc: s.wcc(n, n.Ino)}}, nil
}

func (p *nfsProgram) NfsV3Nfsproc3Lookup(ctx context.Context, a *nfsv3.Lookup3args) (nfsv3.Lookup3res, error) {
	s := p.s
	r, dir, err := s.resolve(ctx, a.What.Dir)
	if err != nil {
		return &nfsv3.Lookup3res_default{Status: status(err), Resfail: nfsv3.Lookup3resfail{DirAttributes: s.postOp(nil)}}, nil
	}
	n, err := s.lookupIn(r, dir, a.What.Name)
	if err != nil {
		return &nfsv3.Lookup3res_default{Status: status(err), Resfail: nfsv3.Lookup3resfail{DirAttributes: s.postOp(dir)}}, nil
	}
	return &nfsv3.Lookup3res_NFS3_OK{Resok: nfsv3.Lookup3resok{
		Object: s.handleOf(r.exp.root.Load(), n.Ino), ObjAttributes: s.postOp(n), DirAttributes: s.postOp(dir)}}, nil
}

// ACCESS3 bits.
const (
	access3Read    = 0x01
	access3Lookup  = 0x02
	access3Modify  = 0x04
	access3Extend  = 0x08
	access3Delete  = 0x10
	access3Execute = 0x20
)

func (p *nfsProgram) NfsV3Nfsproc3Access(ctx context.Context, a *nfsv3.Access3args) (nfsv3.Access3res, error) {
	s := p.s
	r, n, err := s.resolve(ctx, a.Object)
	if err != nil {
		return &nfsv3.Access3res_default{Status: status(err), Resfail: nfsv3.Access3resfail{ObjAttributes: s.postOp(nil)}}, nil
	}
	isDir := n.Mode&syscall.S_IFMT == syscall.S_IFDIR
	checks := []struct {
		bit  uint32
		want uint16
	}{
		{access3Read, acl.MayRead},
		{access3Lookup, acl.MayExec},
		{access3Modify, acl.MayWrite},
		{access3Extend, acl.MayWrite},
		{access3Delete, acl.MayWrite | acl.MayExec},
		{access3Execute, acl.MayExec},
	}
	var granted uint32
	for _, c := range checks {
		if a.Access&c.bit == 0 {
			continue
		}
		if !isDir && (c.bit == access3Lookup || c.bit == access3Delete) || isDir && c.bit == access3Execute {
			continue // meaningless for this type (RFC 1813, 3.3.4)
		}
		if r.rule.ReadOnly && c.bit&(access3Modify|access3Extend|access3Delete) != 0 {
			continue
		}
		ok, err := s.permits(n, &r.who, c.want)
		if err != nil {
			return &nfsv3.Access3res_default{Status: status(err), Resfail: nfsv3.Access3resfail{ObjAttributes: s.postOp(n)}}, nil
		}
		if ok {
			granted |= c.bit
		}
	}
	return &nfsv3.Access3res_NFS3_OK{Resok: nfsv3.Access3resok{ObjAttributes: s.postOp(n), Access: granted}}, nil
}

func (p *nfsProgram) NfsV3Nfsproc3Readlink(ctx context.Context, a *nfsv3.Readlink3args) (nfsv3.Readlink3res, error) {
	s := p.s
	_, n, err := s.resolve(ctx, a.Symlink)
	if err != nil {
		return &nfsv3.Readlink3res_default{Status: status(err), Resfail: nfsv3.Readlink3resfail{SymlinkAttributes: s.postOp(nil)}}, nil
	}
	if n.Mode&syscall.S_IFMT != syscall.S_IFLNK {
		return &nfsv3.Readlink3res_default{Status: nfsv3.NFS3ERR_INVAL, Resfail: nfsv3.Readlink3resfail{SymlinkAttributes: s.postOp(n)}}, nil
	}
	return &nfsv3.Readlink3res_NFS3_OK{Resok: nfsv3.Readlink3resok{SymlinkAttributes: s.postOp(n), Data: n.Target}}, nil
}

func (p *nfsProgram) NfsV3Nfsproc3Fsstat(ctx context.Context, a *nfsv3.Fsstat3args) (nfsv3.Fsstat3res, error) {
	s := p.s
	_, n, err := s.resolve(ctx, a.Fsroot)
	if err != nil {
		return &nfsv3.Fsstat3res_default{Status: status(err), Resfail: nfsv3.Fsstat3resfail{ObjAttributes: s.postOp(nil)}}, nil
	}
	st, err := s.c.StatFs()
	if err != nil {
		return &nfsv3.Fsstat3res_default{Status: status(err), Resfail: nfsv3.Fsstat3resfail{ObjAttributes: s.postOp(n)}}, nil
	}
	// As the FUSE mount's statfs: inodes are allocated, never exhausted.
	files := st.Inodes + 1<<32
	return &nfsv3.Fsstat3res_NFS3_OK{Resok: nfsv3.Fsstat3resok{ObjAttributes: s.postOp(n),
		Tbytes: st.TotalBytes, Fbytes: st.FreeBytes, Abytes: st.FreeBytes,
		Tfiles: files, Ffiles: 1 << 32, Afiles: 1 << 32}}, nil
}

// maxIO is the largest READ and WRITE the gateway takes: 1 MiB, a chunk.
const maxIO = 1 << 20

// FSINFO3 properties.
const (
	fsf3Link        = 0x1
	fsf3Symlink     = 0x2
	fsf3Homogeneous = 0x8
	fsf3CanSetTime  = 0x10
)

func (p *nfsProgram) NfsV3Nfsproc3Fsinfo(ctx context.Context, a *nfsv3.Fsinfo3args) (nfsv3.Fsinfo3res, error) {
	s := p.s
	_, n, err := s.resolve(ctx, a.Fsroot)
	if err != nil {
		return &nfsv3.Fsinfo3res_default{Status: status(err), Resfail: nfsv3.Fsinfo3resfail{ObjAttributes: s.postOp(nil)}}, nil
	}
	return &nfsv3.Fsinfo3res_NFS3_OK{Resok: nfsv3.Fsinfo3resok{ObjAttributes: s.postOp(n),
		Rtmax: maxIO, Rtpref: maxIO, Rtmult: 4096, Wtmax: maxIO, Wtpref: maxIO, Wtmult: 4096,
		Dtpref: 64 << 10, Maxfilesize: 1<<63 - 1, TimeDelta: nfsv3.Nfstime3{Nseconds: 1},
		Properties: fsf3Link | fsf3Symlink | fsf3Homogeneous | fsf3CanSetTime}}, nil
}

func (p *nfsProgram) NfsV3Nfsproc3Pathconf(ctx context.Context, a *nfsv3.Pathconf3args) (nfsv3.Pathconf3res, error) {
	s := p.s
	_, n, err := s.resolve(ctx, a.Object)
	if err != nil {
		return &nfsv3.Pathconf3res_default{Status: status(err), Resfail: nfsv3.Pathconf3resfail{ObjAttributes: s.postOp(nil)}}, nil
	}
	return &nfsv3.Pathconf3res_NFS3_OK{Resok: nfsv3.Pathconf3resok{ObjAttributes: s.postOp(n),
		Linkmax: 1<<31 - 1, NameMax: proto.MaxName, NoTrunc: true, ChownRestricted: true, CasePreserving: true}}, nil
}
