package nfs

import (
	"context"
	"syscall"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv3"

	"tandemfs/internal/acl"
	"tandemfs/internal/proto"
)

// request is what one call may do: the export whose rules apply and the
// caller those rules make of its credentials.
type request struct {
	exp  *export
	rule Rule
	who  acl.Caller
}

// writable refuses changes through a read-only export.
func (r *request) writable() error {
	if r.rule.ReadOnly {
		return syscall.EROFS
	}
	return nil
}

// resolve decodes fh, checks that the caller's address may use its
// export, and returns the inode it names. A handle of a removed file is
// stale.
func (s *Server) resolve(ctx context.Context, fh nfsv3.NfsFh3) (*request, *proto.Inode, error) {
	h, err := decodeHandle(fh.Data)
	if err != nil {
		return nil, nil, err
	}
	if h.fsid != s.fsid {
		return nil, nil, errStale
	}
	e := s.exportByRoot(h.export)
	if e == nil {
		return nil, nil, errStale
	}
	r, err := s.admit(ctx, e)
	if err != nil {
		return nil, nil, err
	}
	n, err := s.c.GetAttr(h.ino)
	if err != nil {
		if errnoIs(err, syscall.ENOENT) {
			return nil, nil, errStale
		}
		return nil, nil, err
	}
	if n.Nlink == 0 && n.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return nil, nil, errStale // removed, kept only while open
	}
	return r, n, nil
}

// exportByRoot finds the export whose directory is inode root, resolving
// the exported paths again if none is known by it (after a restart, a
// client uses handles without mounting again).
func (s *Server) exportByRoot(root uint64) *export {
	if e, ok := s.byRoot.Load(root); ok {
		return e.(*export)
	}
	for _, e := range s.exports {
		if _, err := s.resolveExport(e); err == nil && e.root.Load() == root {
			return e
		}
	}
	return nil
}

// admit applies e's rules to the caller: its address must be one the
// export names (and, with `secure`, its port privileged).
func (s *Server) admit(ctx context.Context, e *export) (*request, error) {
	cred := credentialsOf(ctx)
	rule, ok := e.RuleFor(cred.from.Addr())
	if !ok {
		s.refused(cred, e, "its address is not among the export's clients")
		return nil, syscall.EACCES
	}
	if rule.Secure && cred.from.Port() >= 1024 {
		s.refused(cred, e, "the export is secure and the request came from an unprivileged port")
		return nil, syscall.EACCES
	}
	return &request{exp: e, rule: rule, who: cred.caller(rule)}, nil
}

func (s *Server) refused(cred *credentials, e *export, why string) {
	if s.denied.allow() {
		s.logf("nfs: refused %s access to %s: %s", cred.from, e.Path, why)
	}
}

// lookupIn finds name in dir for r's caller, who must be allowed to
// search dir. ".." of the export's directory is the directory itself: a
// client never leaves its export by name.
func (s *Server) lookupIn(r *request, dir *proto.Inode, name string) (*proto.Inode, error) {
	if dir.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return nil, syscall.ENOTDIR
	}
	if err := s.require(dir, &r.who, acl.MayExec); err != nil {
		return nil, err
	}
	switch name {
	case ".":
		return dir, nil
	case "..":
		if dir.Ino == r.exp.root.Load() {
			return dir, nil
		}
		return s.c.Parent(dir.Ino)
	}
	if err := checkName(name); err != nil {
		return nil, err
	}
	return s.c.Lookup(dir.Ino, name)
}

// checkName refuses names no directory entry may have.
func checkName(name string) error {
	if name == "" || name == "." || name == ".." {
		return syscall.EINVAL
	}
	if len(name) > proto.MaxName {
		return syscall.ENAMETOOLONG
	}
	for i := 0; i < len(name); i++ {
		if name[i] == '/' || name[i] == 0 {
			return syscall.EINVAL
		}
	}
	return nil
}
