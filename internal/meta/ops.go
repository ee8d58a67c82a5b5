package meta

import (
	"bytes"
	"syscall"

	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
	"tandemfs/internal/wire"
)

// Every namespace operation below follows the same discipline: load and
// check everything first, then write. The tx batch is discarded when an
// operation returns an error, so checks may fail at any point.

func (t *tx) create(r *proto.CreateReq, out *wire.Enc) error {
	t.session = r.Session
	if err := checkName(r.Name); err != nil {
		return err
	}
	parent, err := t.dir(r.Parent)
	if err != nil {
		return err
	}
	if parent.Nlink == 0 {
		return rpc.Errorf(syscall.ENOENT, "directory %d was removed", r.Parent)
	}
	if _, _, found, err := t.lookup(r.Parent, r.Name); err != nil {
		return err
	} else if found {
		return rpc.Errorf(syscall.EEXIST, "%q exists", r.Name)
	}
	ino, err := t.allocIno()
	if err != nil {
		return err
	}
	t.created = ino
	n := &inodeRec{Inode: proto.Inode{Attr: proto.Attr{
		Ino: ino, Mode: r.Mode, Nlink: 1, Uid: r.Creds.Uid, Gid: r.Creds.Gid, Rdev: r.Rdev,
		Atime: t.now, Mtime: t.now, Ctime: t.now,
	}, Project: parent.Project}}
	// BSD/SysV group semantics: in a set-group-ID directory new entries
	// take the directory's group, and new directories keep the bit.
	if parent.Mode&sISGID != 0 {
		n.Gid = parent.Gid
		if r.Mode&sIFMT == sIFDIR {
			n.Mode |= sISGID
		}
	}
	switch r.Mode & sIFMT {
	case sIFDIR:
		n.Nlink = 2
		n.Parent = r.Parent
		n.Stripe = parent.Stripe
		parent.Nlink++
	case sIFLNK:
		if r.Target == "" {
			return rpc.Errorf(syscall.ENOENT, "empty symlink target")
		}
		n.Target = r.Target
		n.Size = uint64(len(r.Target))
	case sIFREG, 0:
		n.Mode |= sIFREG
		n.Stripe = parent.Stripe
		n.Inline = t.f.inlineLimit > 0
		// A file without chains yet (no targets, or too few servers for
		// its erasure coding) can still live inline; writing past the
		// inline limit then gets the error.
		if err := t.assignChains(n); err != nil && n.Stripe.EC.On() && !n.Inline {
			return err
		}
	}
	if err := t.inheritACL(parent, n, r.Umask); err != nil {
		return err
	}
	if err := t.checkInodes(n); err != nil {
		return err
	}
	t.touch(parent)
	t.putInode(parent)
	t.putInode(n)
	t.putDent(r.Parent, r.Name, ino, n.Mode)
	(&proto.EntryReply{Inode: n.Inode, Parent: parent.Inode}).Encode(out)
	return nil
}

func checkName(name string) error {
	switch {
	case name == "" || name == "." || name == "..":
		return rpc.Errorf(syscall.EINVAL, "invalid name %q", name)
	case len(name) > proto.MaxName:
		return rpc.Errorf(syscall.ENAMETOOLONG, "name of %d bytes is too long", len(name))
	case bytes.IndexByte([]byte(name), '/') >= 0 || bytes.IndexByte([]byte(name), 0) >= 0:
		return rpc.Errorf(syscall.EINVAL, "name %q contains '/' or NUL", name)
	}
	return nil
}

func (t *tx) link(r *proto.LinkReq, out *wire.Enc) error {
	t.session = r.Session
	if err := checkName(r.NewName); err != nil {
		return err
	}
	n, err := t.inode(r.Ino)
	if err != nil {
		return err
	}
	if n.isDir() {
		return rpc.Errorf(syscall.EPERM, "cannot hard-link a directory")
	}
	if n.Nlink == 0 {
		return rpc.Errorf(syscall.ENOENT, "inode %d was removed", r.Ino)
	}
	if n.Nlink >= 65000 {
		return rpc.Errorf(syscall.EMLINK, "too many links")
	}
	parent, err := t.dir(r.NewParent)
	if err != nil {
		return err
	}
	if err := crossesProject(n, parent); err != nil {
		return err
	}
	if _, _, found, err := t.lookup(r.NewParent, r.NewName); err != nil {
		return err
	} else if found {
		return rpc.Errorf(syscall.EEXIST, "%q exists", r.NewName)
	}
	n.Nlink++
	n.Ctime = t.now
	t.touch(parent)
	t.putInode(parent)
	t.putInode(n)
	t.putDent(r.NewParent, r.NewName, n.Ino, n.Mode)
	(&proto.EntryReply{Inode: n.Inode, Parent: parent.Inode}).Encode(out)
	return nil
}

func (t *tx) unlink(r *proto.UnlinkReq, out *wire.Enc) error {
	t.session = r.Session
	parent, err := t.dir(r.Parent)
	if err != nil {
		return err
	}
	ino, _, found, err := t.lookup(r.Parent, r.Name)
	if err != nil {
		return err
	}
	if !found {
		return rpc.Errorf(syscall.ENOENT, "%q not found", r.Name)
	}
	n, err := t.inode(ino)
	if err != nil {
		return err
	}
	if r.Dir {
		if !n.isDir() {
			return rpc.Errorf(syscall.ENOTDIR, "%q is not a directory", r.Name)
		}
		if empty, err := dirEmpty(t.b, ino); err != nil {
			return err
		} else if !empty {
			return rpc.Errorf(syscall.ENOTEMPTY, "directory %q is not empty", r.Name)
		}
		parent.Nlink--
	} else if n.isDir() {
		return rpc.Errorf(syscall.EISDIR, "%q is a directory", r.Name)
	}
	t.delDent(r.Parent, r.Name)
	t.touch(parent)
	t.putInode(parent)
	removed := t.unlinkInode(n, r.Open, r.Session)
	reply := proto.UnlinkReply{Ino: ino, Removed: removed, Parent: parent.Inode}
	reply.Encode(out)
	return nil
}

// isAncestor reports whether dir a is dir b or one of b's ancestors.
func (t *tx) isAncestor(a, b uint64) (bool, error) {
	for i := 0; i < 1<<16; i++ {
		if a == b {
			return true, nil
		}
		if b == proto.RootIno {
			return false, nil
		}
		d, err := t.inode(b)
		if err != nil {
			return false, err
		}
		b = d.Parent
	}
	return false, rpc.Errorf(syscall.ELOOP, "directory tree too deep")
}

func (t *tx) rename(r *proto.RenameReq, out *wire.Enc) error {
	t.session = r.Session
	if err := checkName(r.NewName); err != nil {
		return err
	}
	if r.Flags&^(proto.RenameNoReplace|proto.RenameExchange) != 0 ||
		r.Flags == proto.RenameNoReplace|proto.RenameExchange {
		return rpc.Errorf(syscall.EINVAL, "bad rename flags %#x", r.Flags)
	}
	op, err := t.dir(r.OldParent)
	if err != nil {
		return err
	}
	np := op
	if r.NewParent != r.OldParent {
		if np, err = t.dir(r.NewParent); err != nil {
			return err
		}
	}
	srcIno, _, found, err := t.lookup(r.OldParent, r.OldName)
	if err != nil {
		return err
	}
	if !found {
		return rpc.Errorf(syscall.ENOENT, "%q not found", r.OldName)
	}
	src, err := t.inode(srcIno)
	if err != nil {
		return err
	}
	dstIno, _, dstFound, err := t.lookup(r.NewParent, r.NewName)
	if err != nil {
		return err
	}
	if err := crossesProject(src, np); err != nil {
		return err
	}
	if r.Flags&proto.RenameExchange != 0 {
		if !dstFound {
			return rpc.Errorf(syscall.ENOENT, "%q not found", r.NewName)
		}
		return t.exchange(r, op, np, src, dstIno, out)
	}
	if dstFound && r.Flags&proto.RenameNoReplace != 0 {
		return rpc.Errorf(syscall.EEXIST, "%q exists", r.NewName)
	}
	if dstFound && dstIno == srcIno {
		// Both names are links to one inode: POSIX says do nothing.
		(&proto.RenameReply{OldParent: op.Inode, NewParent: np.Inode, Moved: srcIno}).Encode(out)
		return nil
	}
	if src.isDir() && r.NewParent != r.OldParent {
		if inside, err := t.isAncestor(srcIno, r.NewParent); err != nil {
			return err
		} else if inside {
			return rpc.Errorf(syscall.EINVAL, "cannot move a directory into itself")
		}
	}
	var dst *inodeRec
	if dstFound {
		if dst, err = t.inode(dstIno); err != nil {
			return err
		}
		switch {
		case src.isDir() && !dst.isDir():
			return rpc.Errorf(syscall.ENOTDIR, "%q is not a directory", r.NewName)
		case !src.isDir() && dst.isDir():
			return rpc.Errorf(syscall.EISDIR, "%q is a directory", r.NewName)
		case dst.isDir():
			if empty, err := dirEmpty(t.b, dstIno); err != nil {
				return err
			} else if !empty {
				return rpc.Errorf(syscall.ENOTEMPTY, "directory %q is not empty", r.NewName)
			}
		}
	}
	// All checks passed; now write.
	if dst != nil {
		if dst.isDir() {
			np.Nlink--
		}
		t.unlinkInode(dst, r.Open, r.Session)
	}
	t.delDent(r.OldParent, r.OldName)
	t.putDent(r.NewParent, r.NewName, srcIno, src.Mode)
	if src.isDir() && r.NewParent != r.OldParent {
		op.Nlink--
		np.Nlink++
		src.Parent = r.NewParent
	}
	src.Ctime = t.now
	t.putInode(src)
	t.touch(op)
	t.putInode(op)
	if np != op {
		t.touch(np)
		t.putInode(np)
	}
	reply := proto.RenameReply{OldParent: op.Inode, NewParent: np.Inode, Moved: srcIno}
	if dst != nil {
		reply.Replaced = dst.Ino
	}
	reply.Encode(out)
	return nil
}

// exchange swaps two names atomically (RENAME_EXCHANGE).
func (t *tx) exchange(r *proto.RenameReq, op, np, src *inodeRec, dstIno uint64, out *wire.Enc) error {
	dst, err := t.inode(dstIno)
	if err != nil {
		return err
	}
	if err := crossesProject(dst, op); err != nil {
		return err
	}
	if r.NewParent != r.OldParent {
		for _, c := range []struct {
			d      *inodeRec
			target uint64
		}{{src, r.NewParent}, {dst, r.OldParent}} {
			if !c.d.isDir() {
				continue
			}
			if inside, err := t.isAncestor(c.d.Ino, c.target); err != nil {
				return err
			} else if inside {
				return rpc.Errorf(syscall.EINVAL, "cannot move a directory into itself")
			}
		}
	}
	t.putDent(r.OldParent, r.OldName, dst.Ino, dst.Mode)
	t.putDent(r.NewParent, r.NewName, src.Ino, src.Mode)
	if r.NewParent != r.OldParent {
		if src.isDir() {
			src.Parent = r.NewParent
			op.Nlink--
			np.Nlink++
		}
		if dst.isDir() {
			dst.Parent = r.OldParent
			np.Nlink--
			op.Nlink++
		}
	}
	src.Ctime, dst.Ctime = t.now, t.now
	t.putInode(src)
	t.putInode(dst)
	t.touch(op)
	t.putInode(op)
	if np != op {
		t.touch(np)
		t.putInode(np)
	}
	(&proto.RenameReply{OldParent: op.Inode, NewParent: np.Inode, Moved: src.Ino, Replaced: dst.Ino}).Encode(out)
	return nil
}

func (t *tx) setAttr(r *proto.SetAttrReq, out *wire.Enc) error {
	t.session = r.Session
	n, err := t.inode(r.Ino)
	if err != nil {
		return err
	}
	v := r.Valid
	if v&proto.SetSize != 0 {
		if err := t.resize(n, r.Size); err != nil {
			return err
		}
		if v&(proto.SetMtime|proto.SetMtimeNow) == 0 {
			n.Mtime = t.now
		}
	}
	if v&proto.SetMode != 0 {
		n.Mode = n.Mode&sIFMT | r.Mode&permAll
		if err := t.chmodACL(n); err != nil {
			return err
		}
	}
	if v&proto.SetUid != 0 {
		n.Uid = r.Uid
	}
	if v&proto.SetGid != 0 {
		n.Gid = r.Gid
	}
	if v&proto.SetProject != 0 {
		n.Project = r.Project
	}
	if v&(proto.SetUid|proto.SetGid|proto.SetProject) != 0 {
		if err := t.checkNewOwners(n); err != nil {
			return err
		}
	}
	if v&proto.SetAtime != 0 {
		n.Atime = r.Atime
	}
	if v&proto.SetAtimeNow != 0 {
		n.Atime = t.now
	}
	if v&proto.SetMtime != 0 {
		n.Mtime = r.Mtime
	}
	if v&proto.SetMtimeNow != 0 {
		n.Mtime = t.now
	}
	n.Ctime = t.now
	if v&proto.SetCtime != 0 {
		n.Ctime = r.Ctime
	}
	t.putInode(n)
	n.Inode.Encode(out)
	return nil
}

// resize changes a file's size in the metadata. Inline files keep their
// bytes in the inode, so their content is cut or zero-extended here; a file
// on targets only records the size (the client trims the chunks).
func (t *tx) resize(n *inodeRec, size uint64) error {
	switch {
	case n.isDir():
		return rpc.Errorf(syscall.EISDIR, "inode %d is a directory", n.Ino)
	case !n.isReg():
		return rpc.Errorf(syscall.EINVAL, "inode %d is not a regular file", n.Ino)
	}
	if n.Inline {
		if size <= uint64(t.f.inlineLimit) {
			n.InlineData = resizeBytes(n.InlineData, int(size))
		} else if allZero(n.InlineData) {
			// Growing past the limit: nothing but zeros to move, so the
			// file simply becomes a (sparse) file on its chains.
			if len(n.Chains) == 0 {
				if err := t.assignChains(n); err != nil {
					return err
				}
			}
			n.Inline = false
			n.InlineData = nil
			n.Written = 0
		} else {
			return rpc.Errorf(syscall.EFBIG, "inline file %d must be moved to targets before growing past %d bytes", n.Ino, t.f.inlineLimit)
		}
	}
	if !n.Inline && n.Stripe.EC.On() && size < n.Size {
		if err := t.truncateECStripes(n, size); err != nil {
			return err
		}
	}
	n.Size = size
	n.Written = min(n.Written, size)
	return nil
}

var errNoTargets = rpc.Errorf(syscall.ENOSPC, "no storage targets are registered")

func resizeBytes(b []byte, n int) []byte {
	if n <= len(b) {
		return b[:n]
	}
	return append(b, make([]byte, n-len(b))...)
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func (t *tx) writeInline(r *proto.WriteInlineReq, out *wire.Enc) error {
	t.session = r.Session
	n, err := t.inode(r.Ino)
	if err != nil {
		return err
	}
	if !n.isReg() {
		return rpc.Errorf(syscall.EINVAL, "inode %d is not a regular file", r.Ino)
	}
	if !n.Inline {
		return rpc.Errorf(proto.ErrNotInline, "file %d is no longer inline", r.Ino)
	}
	before := n.UsedBytes()
	if r.Truncate {
		if uint64(len(r.Data)) > uint64(t.f.inlineLimit) {
			return rpc.Errorf(syscall.EFBIG, "inline file %d would grow to %d bytes, limit %d", r.Ino, len(r.Data), t.f.inlineLimit)
		}
		n.InlineData = append([]byte(nil), r.Data...)
		n.Size = uint64(len(n.InlineData))
	} else if err := t.applyInline(n, r.Off, r.Data); err != nil {
		return err
	}
	if after := n.UsedBytes(); after > before {
		if err := t.checkBytes(n, after-before); err != nil {
			return err
		}
	}
	t.touch(n)
	t.putInode(n)
	n.Inode.Encode(out)
	return nil
}

// applyInline writes data at off into inline file n, which must still be
// inline (ErrNotInline: it moved to targets) and stay within the inline
// limit.
func (t *tx) applyInline(n *inodeRec, off uint64, data []byte) error {
	if !n.Inline {
		return rpc.Errorf(proto.ErrNotInline, "file %d is no longer inline", n.Ino)
	}
	end := off + uint64(len(data))
	if end > uint64(t.f.inlineLimit) || end < off {
		return rpc.Errorf(syscall.EFBIG, "inline file %d would grow to %d bytes, limit %d", n.Ino, end, t.f.inlineLimit)
	}
	if end > uint64(len(n.InlineData)) {
		n.InlineData = resizeBytes(n.InlineData, int(end))
	}
	copy(n.InlineData[off:], data)
	n.Size = uint64(len(n.InlineData))
	return nil
}

func (t *tx) uninline(r *proto.UninlineReq, out *wire.Enc) error {
	t.session = r.Session
	n, err := t.inode(r.Ino)
	if err != nil {
		return err
	}
	if !n.isReg() {
		return rpc.Errorf(syscall.EINVAL, "inode %d is not a regular file", r.Ino)
	}
	if len(n.Chains) == 0 {
		if err := t.assignChains(n); err != nil {
			return err
		}
	}
	if !r.AssignOnly {
		n.Inline = false
		n.InlineData = nil
		n.Written = n.Size // the client wrote the inline bytes to the chains
		if err := t.applyECUpdates(n, r.EC); err != nil {
			return err
		}
	}
	t.putInode(n)
	n.Inode.Encode(out)
	return nil
}

func (t *tx) commitWrite(r *proto.CommitWriteReq, out *wire.Enc) error {
	t.session = r.Session
	n, err := t.inode(r.Ino)
	if err != nil {
		return err
	}
	if !n.isReg() {
		return rpc.Errorf(syscall.EINVAL, "inode %d is not a regular file", r.Ino)
	}
	if r.WroteTargets && r.WroteEC != n.Stripe.EC {
		return rpc.Errorf(proto.ErrLayoutChanged, "file %d was converted to another layout while this client, cut off from the metadata service past the session timeout, wrote to the old one: its writes since its last commit are lost", r.Ino)
	}
	before := n.UsedBytes()
	for _, w := range r.Inline {
		if err := t.applyInline(n, w.Off, w.Data); err != nil {
			return err
		}
	}
	if after := n.UsedBytes(); len(r.Inline) > 0 && after > before {
		if err := t.checkBytes(n, after-before); err != nil {
			return err
		}
	}
	if len(r.Inline) > 0 {
		t.touch(n)
	}
	if err := t.applyECUpdates(n, r.EC); err != nil {
		return err
	}
	if r.Size > n.Size && !n.Inline {
		n.Size = r.Size
	}
	n.Written = min(n.Written+r.Written, n.Size)
	if r.Mtime > 0 {
		n.Mtime, n.Ctime = r.Mtime, r.Mtime
	}
	t.putInode(n)
	n.Inode.Encode(out)
	return nil
}

func (t *tx) setXattr(r *proto.XattrReq) error {
	t.session = r.Session
	n, err := t.inode(r.Ino)
	if err != nil {
		return err
	}
	if r.Name == "" {
		return rpc.Errorf(syscall.EINVAL, "empty attribute name")
	}
	if isACL(r.Name) {
		if err := t.setACL(n, r.Name, r.Value, r.Flags); err != nil {
			return err
		}
		n.Ctime = t.now
		t.putInode(n)
		return nil
	}
	_, exists, err := get(t.b, xattrKey(r.Ino, r.Name))
	if err != nil {
		return err
	}
	if exists && r.Flags&proto.XattrCreate != 0 {
		return rpc.Errorf(syscall.EEXIST, "attribute %q exists", r.Name)
	}
	if !exists && r.Flags&proto.XattrReplace != 0 {
		return rpc.Errorf(syscall.ENODATA, "attribute %q does not exist", r.Name)
	}
	t.b.Set(xattrKey(r.Ino, r.Name), r.Value, nil)
	n.Ctime = t.now
	t.putInode(n)
	return nil
}

func (t *tx) removeXattr(r *proto.XattrReq) error {
	t.session = r.Session
	n, err := t.inode(r.Ino)
	if err != nil {
		return err
	}
	if _, exists, err := get(t.b, xattrKey(r.Ino, r.Name)); err != nil {
		return err
	} else if !exists && isACL(r.Name) {
		return nil // as ext4: removing an absent ACL succeeds
	} else if !exists {
		return rpc.Errorf(syscall.ENODATA, "attribute %q does not exist", r.Name)
	}
	t.b.Delete(xattrKey(r.Ino, r.Name), nil)
	n.Ctime = t.now
	t.putInode(n)
	return nil
}

func (t *tx) setStripe(r *proto.SetStripeReq) error {
	n, err := t.dir(r.Ino)
	if err != nil {
		return err
	}
	s := r.Stripe
	if s.ChunkSize != 0 && (s.ChunkSize < 64<<10 || s.ChunkSize > proto.MaxData || s.ChunkSize&(s.ChunkSize-1) != 0) {
		return rpc.Errorf(syscall.EINVAL, "chunk size %d must be a power of two from 64 KiB to %d MiB", s.ChunkSize, proto.MaxData>>20)
	}
	if s.Count > proto.MaxChains {
		return rpc.Errorf(syscall.EINVAL, "stripe count %d exceeds %d", s.Count, proto.MaxChains)
	}
	if s.Replicas > 3 {
		return rpc.Errorf(syscall.EINVAL, "replication factor %d exceeds 3", s.Replicas)
	}
	if !s.EC.On() && s.EC != (proto.ECPattern{}) {
		return rpc.Errorf(syscall.EINVAL, "erasure coding %s: no data shard", ecPatternText(s.EC))
	}
	if s.EC.On() {
		if s.Replicas > 0 {
			return rpc.Errorf(syscall.EINVAL, "a pattern is erasure coded (%s) or copied (%d replicas), not both", ecPatternText(s.EC), s.Replicas)
		}
		if err := t.f.checkECPattern(s.EC); err != nil {
			return err
		}
	}
	n.Stripe = effectiveStripe(s, n.Stripe)
	n.Ctime = t.now
	t.putInode(n)
	return nil
}

// release drops an orphan (an inode unlinked while open) once the session
// that held it open closes it. session 0 forces the drop (session expired).
func (t *tx) release(r *proto.InoReq) error {
	t.session = r.Session
	v, ok, err := get(t.b, orphanKey(r.Ino))
	if err != nil || !ok {
		return err
	}
	if r.Session != 0 && decodeU64(v) != r.Session {
		return nil // another session still holds it
	}
	n, err := t.inode(r.Ino)
	if err != nil {
		t.b.Delete(orphanKey(r.Ino), nil)
		return nil
	}
	if n.Nlink > 0 { // linked again (e.g. via linkat of /proc/self/fd)
		t.b.Delete(orphanKey(r.Ino), nil)
		return nil
	}
	t.dropInode(n)
	return nil
}

// initRoot creates the root directory of a new file system.
func (t *tx) initRoot(r *initReq) error {
	if _, ok, err := get(t.b, inoKey(proto.RootIno)); err != nil || ok {
		return err
	}
	root := &inodeRec{Inode: proto.Inode{
		Attr: proto.Attr{Ino: proto.RootIno, Mode: sIFDIR | 0o755, Nlink: 2,
			Atime: t.now, Mtime: t.now, Ctime: t.now},
		Stripe: r.Stripe,
	}, Parent: proto.RootIno}
	t.putInode(root)
	t.b.Set(keyNextIno, u64Bytes(proto.RootIno+1), nil)
	t.b.Set(keyInlineLimit, u64Bytes(uint64(r.InlineLimit)), nil)
	t.b.Set(keyQuotaInit, []byte{1}, nil) // the root, charged above, is all there is
	limit := r.InlineLimit
	t.onCommit(func() { t.f.inlineLimit = limit })
	return nil
}

// gcDone forgets a garbage record once the file's chunks are deleted.
func (t *tx) gcDone(ino uint64) error {
	t.b.Delete(garbageKey(ino), nil)
	return nil
}

// initReq carries the settings a new file system starts with.
type initReq struct {
	Stripe      proto.Stripe
	InlineLimit uint32
}

func (r *initReq) Encode(e *wire.Enc) {
	r.Stripe.Encode(e)
	e.U32(r.InlineLimit)
	r.Stripe.EC.Encode(e)
}
func (r *initReq) Decode(d *wire.Dec) {
	r.Stripe.Decode(d)
	r.InlineLimit = d.U32()
	r.Stripe.EC.DecodeOptional(d)
}
