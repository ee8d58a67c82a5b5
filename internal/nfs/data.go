package nfs

import (
	"context"
	"syscall"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv3"

	"tandemfs/internal/acl"
	"tandemfs/internal/proto"
)

// READ, WRITE and COMMIT go through the file's open handle on this head
// (files.go). UNSTABLE writes are answered once they are in the client
// library's write-behind; DATA_SYNC and FILE_SYNC writes, and COMMIT,
// once the data is on the disks of every live replica and the size is in
// the metadata service's log.

func (p *nfsProgram) NfsV3Nfsproc3Read(ctx context.Context, a *nfsv3.Read3args) (nfsv3.Read3res, error) {
	s := p.s
	fail := func(err error, n *proto.Inode) (nfsv3.Read3res, error) {
		return &nfsv3.Read3res_default{Status: status(err), Resfail: nfsv3.Read3resfail{FileAttributes: s.postOp(n)}}, nil
	}
	r, n, err := s.resolve(ctx, a.File)
	if err != nil {
		return fail(err, nil)
	}
	if err := regular(n); err != nil {
		return fail(err, n)
	}
	if err := s.requireData(n, &r.who, acl.MayRead); err != nil {
		return fail(err, n)
	}
	h, done, err := s.files.open(n)
	if err != nil {
		return fail(err, n)
	}
	defer done()
	buf := make([]byte, min(a.Count, maxIO))
	got, err := h.Read(buf, a.Offset)
	if err != nil {
		return fail(err, n)
	}
	after, err := s.c.GetAttr(n.Ino)
	if err != nil {
		after = n
	}
	return &nfsv3.Read3res_NFS3_OK{Resok: nfsv3.Read3resok{FileAttributes: s.postOp(after),
		Count: uint32(got), Eof: a.Offset+uint64(got) >= after.Size, Data: buf[:got]}}, nil
}

// regular refuses data operations on what is not a regular file.
func regular(n *proto.Inode) error {
	switch n.Mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		return nil
	case syscall.S_IFDIR:
		return syscall.EISDIR
	}
	return syscall.EINVAL
}

func (p *nfsProgram) NfsV3Nfsproc3Write(ctx context.Context, a *nfsv3.Write3args) (nfsv3.Write3res, error) {
	s := p.s
	fail := func(err error, before *proto.Inode) (nfsv3.Write3res, error) {
		wcc := noWcc()
		if before != nil {
			wcc = s.wcc(before, before.Ino)
		}
		return &nfsv3.Write3res_default{Status: status(err), Resfail: nfsv3.Write3resfail{FileWcc: wcc}}, nil
	}
	r, n, err := s.resolve(ctx, a.File)
	if err != nil {
		return fail(err, nil)
	}
	if err := r.writable(); err != nil {
		return fail(err, n)
	}
	if err := regular(n); err != nil {
		return fail(err, n)
	}
	if err := s.requireData(n, &r.who, acl.MayWrite); err != nil {
		return fail(err, n)
	}
	data := a.Data
	if uint32(len(data)) > a.Count {
		data = data[:a.Count]
	}
	if uint32(len(data)) < a.Count || a.Offset+uint64(len(data)) < a.Offset || a.Stable > nfsv3.FILE_SYNC {
		return fail(syscall.EINVAL, n)
	}
	if err := s.dropPrivileges(r, n); err != nil {
		return fail(err, n)
	}
	// Stable writes go through the file's O_SYNC handle: data, size and
	// mtime durable before the reply (FILE_SYNC's promise, which covers
	// DATA_SYNC's). UNSTABLE ones too, unless the export says unstable.
	open, committed := s.files.openStable, nfsv3.FILE_SYNC
	if a.Stable == nfsv3.UNSTABLE && r.rule.Unstable {
		open, committed = s.files.open, nfsv3.UNSTABLE
	}
	h, done, err := open(n)
	if err != nil {
		return fail(err, n)
	}
	defer done()
	verf := s.files.verifier()
	if _, err := h.Write(data, a.Offset); err != nil {
		return fail(err, n)
	}
	return &nfsv3.Write3res_NFS3_OK{Resok: nfsv3.Write3resok{FileWcc: s.wcc(n, n.Ino),
		Count: uint32(len(data)), Committed: committed, Verf: verf}}, nil
}

// dropPrivileges clears set-user-ID and set-group-ID before a write by
// anyone but root, as Linux's file_remove_privs.
func (s *Server) dropPrivileges(r *request, n *proto.Inode) error {
	m := acl.KillSuidGid(n.Mode)
	if r.who.UID == 0 || m == n.Mode {
		return nil
	}
	_, err := s.c.SetAttr(&proto.SetAttrReq{Ino: n.Ino, Valid: proto.SetMode, Mode: m & 0o7777})
	return err
}

func (p *nfsProgram) NfsV3Nfsproc3Commit(ctx context.Context, a *nfsv3.Commit3args) (nfsv3.Commit3res, error) {
	s := p.s
	fail := func(err error, before *proto.Inode) (nfsv3.Commit3res, error) {
		wcc := noWcc()
		if before != nil {
			wcc = s.wcc(before, before.Ino)
		}
		return &nfsv3.Commit3res_default{Status: status(err), Resfail: nfsv3.Commit3resfail{FileWcc: wcc}}, nil
	}
	_, n, err := s.resolve(ctx, a.File)
	if err != nil {
		return fail(err, nil)
	}
	if err := regular(n); err != nil {
		return fail(err, n)
	}
	// The verifier is read first: writes buffered under it are durable
	// once Fsync returns, whatever happens to the verifier meanwhile.
	verf := s.files.verifier()
	h, done, err := s.files.open(n)
	if err != nil {
		return fail(err, n)
	}
	defer done()
	if err := h.Fsync(); err != nil {
		return fail(err, n)
	}
	return &nfsv3.Commit3res_NFS3_OK{Resok: nfsv3.Commit3resok{FileWcc: s.wcc(n, n.Ino), Verf: verf}}, nil
}
