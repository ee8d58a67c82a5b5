package nfs

import (
	"errors"
	"syscall"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv3"
	"golang.org/x/sys/unix"

	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
)

func nfsTime(ns int64) nfsv3.Nfstime3 {
	if ns < 0 {
		ns = 0
	}
	return nfsv3.Nfstime3{Seconds: uint32(ns / 1e9), Nseconds: uint32(ns % 1e9)}
}

func fileType(mode uint32) nfsv3.Ftype3 {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		return nfsv3.NF3DIR
	case syscall.S_IFLNK:
		return nfsv3.NF3LNK
	case syscall.S_IFBLK:
		return nfsv3.NF3BLK
	case syscall.S_IFCHR:
		return nfsv3.NF3CHR
	case syscall.S_IFSOCK:
		return nfsv3.NF3SOCK
	case syscall.S_IFIFO:
		return nfsv3.NF3FIFO
	}
	return nfsv3.NF3REG
}

func (s *Server) fattr(n *proto.Inode) nfsv3.Fattr3 {
	size := n.Size
	if n.Mode&syscall.S_IFMT == syscall.S_IFLNK {
		size = uint64(len(n.Target))
	}
	return nfsv3.Fattr3{
		Type: fileType(n.Mode), Mode: n.Mode & 0o7777, Nlink: n.Nlink,
		Uid: n.Uid, Gid: n.Gid, Size: size, Used: n.Blocks() * 512,
		Rdev:   nfsv3.Specdata3{Specdata1: unix.Major(uint64(n.Rdev)), Specdata2: unix.Minor(uint64(n.Rdev))},
		Fsid:   s.fsid,
		Fileid: n.Ino,
		Atime:  nfsTime(n.Atime), Mtime: nfsTime(n.Mtime), Ctime: nfsTime(n.Ctime),
	}
}

func (s *Server) postOp(n *proto.Inode) nfsv3.PostOpAttr {
	if n == nil {
		return &nfsv3.PostOpAttr_FALSE{}
	}
	return &nfsv3.PostOpAttr_TRUE{Attributes: s.fattr(n)}
}

// postOpOf returns ino's attributes now, or none if they cannot be had.
func (s *Server) postOpOf(ino uint64) nfsv3.PostOpAttr {
	n, err := s.c.GetAttr(ino)
	if err != nil {
		return &nfsv3.PostOpAttr_FALSE{}
	}
	return s.postOp(n)
}

func preOp(n *proto.Inode) nfsv3.PreOpAttr {
	if n == nil {
		return &nfsv3.PreOpAttr_FALSE{}
	}
	return &nfsv3.PreOpAttr_TRUE{Attributes: nfsv3.WccAttr{Size: n.Size, Mtime: nfsTime(n.Mtime), Ctime: nfsTime(n.Ctime)}}
}

// wcc is weak cache consistency data: the attributes before (if known)
// and after a change.
func (s *Server) wcc(before *proto.Inode, ino uint64) nfsv3.WccData {
	return nfsv3.WccData{Before: preOp(before), After: s.postOpOf(ino)}
}

func noWcc() nfsv3.WccData {
	return nfsv3.WccData{Before: &nfsv3.PreOpAttr_FALSE{}, After: &nfsv3.PostOpAttr_FALSE{}}
}

func (s *Server) handleOf(export, ino uint64) nfsv3.NfsFh3 {
	return nfsv3.NfsFh3{Data: fileHandle{fsid: s.fsid, export: export, ino: ino}.encode()}
}

var (
	// errStale marks a handle that names no file (any more).
	errStale = errors.New("stale file handle")
	// errBadType marks a MKNOD of a type NFSv3 does not know.
	errBadType = errors.New("no such file type")
)

// status maps an error to the NFSv3 status a client expects.
func status(err error) nfsv3.Nfsstat3 {
	if err == nil {
		return nfsv3.NFS3_OK
	}
	if errors.Is(err, errStale) {
		return nfsv3.NFS3ERR_STALE
	}
	if errors.Is(err, errBadType) {
		return nfsv3.NFS3ERR_BADTYPE
	}
	if errors.Is(err, errBadHandle) {
		return nfsv3.NFS3ERR_BADHANDLE
	}
	switch rpc.ErrnoOf(err) {
	case syscall.EPERM:
		return nfsv3.NFS3ERR_PERM
	case syscall.ENOENT:
		return nfsv3.NFS3ERR_NOENT
	case syscall.ENXIO:
		return nfsv3.NFS3ERR_NXIO
	case syscall.EACCES:
		return nfsv3.NFS3ERR_ACCES
	case syscall.EEXIST:
		return nfsv3.NFS3ERR_EXIST
	case syscall.EXDEV:
		return nfsv3.NFS3ERR_XDEV
	case syscall.ENODEV:
		return nfsv3.NFS3ERR_NODEV
	case syscall.ENOTDIR:
		return nfsv3.NFS3ERR_NOTDIR
	case syscall.EISDIR:
		return nfsv3.NFS3ERR_ISDIR
	case syscall.EINVAL:
		return nfsv3.NFS3ERR_INVAL
	case syscall.EFBIG:
		return nfsv3.NFS3ERR_FBIG
	case syscall.ENOSPC:
		return nfsv3.NFS3ERR_NOSPC
	case syscall.EROFS:
		return nfsv3.NFS3ERR_ROFS
	case syscall.EMLINK:
		return nfsv3.NFS3ERR_MLINK
	case syscall.ENAMETOOLONG:
		return nfsv3.NFS3ERR_NAMETOOLONG
	case syscall.ENOTEMPTY:
		return nfsv3.NFS3ERR_NOTEMPTY
	case syscall.EDQUOT:
		return nfsv3.NFS3ERR_DQUOT
	case syscall.ESTALE:
		return nfsv3.NFS3ERR_STALE
	case syscall.ENOTSUP:
		return nfsv3.NFS3ERR_NOTSUPP
	}
	return nfsv3.NFS3ERR_IO
}

func errnoIs(err error, e syscall.Errno) bool { return rpc.ErrnoOf(err) == e }
