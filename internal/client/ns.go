package client

import (
	"context"
	"errors"
	"syscall"
	"time"

	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
	"tandemfs/internal/wire"
)

// The namespace operations below are thin, typed wrappers over metadata
// service calls. Errors carry POSIX errnos (rpc.ErrnoOf).

// Lookup finds name in directory parent, in the namespace cache if this
// client knows the name (see nscache.go).
func (c *Client) Lookup(parent uint64, name string) (*proto.Inode, error) {
	if len(name) > proto.MaxName {
		return nil, syscall.ENAMETOOLONG
	}
	if ino, ok := c.ns.getDent(parent, name); ok {
		if n, ok := c.ns.getInode(ino); ok {
			return &n, nil
		}
	}
	if c.leases.absent(parent, name, time.Now()) && c.ns.watching() {
		return nil, syscall.ENOENT
	}
	wm := c.ns.watermark()
	r := proto.LookupReq{Parent: parent, Name: name}
	var n proto.Inode
	if err := c.metaCall(proto.OpLookup, r.Encode, decodeInode(&n)); err != nil {
		if errnoOf(err) == syscall.ENOENT {
			c.ns.dropDent(parent, name)
			c.missed(parent)
		}
		return nil, err
	}
	c.ns.putInode(&n, wm)
	c.ns.putDent(parent, name, n.Ino, wm, wm)
	return &n, nil
}

// Parent returns the directory that holds directory dir (dir itself for
// the root), always from the metadata service: a rename moves it, and no
// cache here follows ".." entries.
func (c *Client) Parent(dir uint64) (*proto.Inode, error) {
	r := proto.LookupReq{Parent: dir, Name: ".."}
	var n proto.Inode
	if err := c.metaCall(proto.OpLookup, r.Encode, decodeInode(&n)); err != nil {
		return nil, err
	}
	c.overlay(&n)
	return &n, nil
}

// GetAttr returns inode ino, with this client's unflushed writes applied,
// from the namespace cache when it holds the inode (see nscache.go).
func (c *Client) GetAttr(ino uint64) (*proto.Inode, error) {
	if n, ok := c.ns.getInode(ino); ok {
		c.overlay(&n)
		return &n, nil
	}
	return c.FreshAttr(ino)
}

// FreshAttr is GetAttr asking the metadata service, bypassing the cache.
func (c *Client) FreshAttr(ino uint64) (*proto.Inode, error) {
	r := proto.InoReq{Ino: ino}
	n, err := c.inodeCall(proto.OpGetAttr, r.Encode)
	if err != nil {
		return nil, err
	}
	c.overlay(n)
	return n, nil
}

// entryCall runs create or link of parent/name and caches the inode, its
// directory and the new entry (current as of the change: the directory's
// new version).
func (c *Client) entryCall(op uint16, parent uint64, name string, enc func(*wire.Enc)) (*proto.Inode, error) {
	var r proto.EntryReply
	var flags uint8
	wm := c.ns.watermark()
	sent := time.Now()
	if err := c.metaCall(op, enc, func(d *wire.Dec) error { r.Decode(d); flags = leaseFlags(d); return nil }); err != nil {
		c.leases.drop(parent)
		return nil, err
	}
	c.ns.putInode(&r.Inode, wm)
	c.ns.putInode(&r.Parent, wm)
	c.ns.putDent(parent, name, r.Inode.Ino, r.Parent.Version, wm)
	c.leases.own(parent, ownChange{r.Parent.Version, name, true}, flags&proto.LeaseExtended != 0, sent)
	if flags&proto.LeaseNewDir != 0 {
		c.leases.newDir(r.Inode.Ino, r.Inode.Version, sent)
	}
	if flags&proto.LeaseNewFile != 0 {
		c.fileLeases.install(r.Inode.Ino, r.Inode.Version, r.Inode.Version, sent)
		c.giveBackFileLeases()
	}
	return &r.Inode, nil
}

// leaseFlags reads the proto.Lease* flags that end replies to changes of
// directory entries.
func leaseFlags(d *wire.Dec) uint8 {
	if len(d.Rest()) == 0 {
		return 0
	}
	return d.U8()
}

// Create makes a new file, directory, symlink or special file.
func (c *Client) Create(r *proto.CreateReq) (*proto.Inode, error) {
	if len(r.Name) > proto.MaxName {
		return nil, syscall.ENAMETOOLONG
	}
	if len(r.Target) > proto.MaxSymlink {
		return nil, syscall.ENAMETOOLONG
	}
	r.Session = c.session
	return c.entryCall(proto.OpCreate, r.Parent, r.Name, r.Encode)
}

// Link adds a hard link.
func (c *Client) Link(ino, newParent uint64, newName string) (*proto.Inode, error) {
	if len(newName) > proto.MaxName {
		return nil, syscall.ENAMETOOLONG
	}
	r := proto.LinkReq{Ino: ino, NewParent: newParent, NewName: newName, Session: c.session}
	return c.entryCall(proto.OpLink, newParent, newName, r.Encode)
}

// Unlink removes a name (dir: like rmdir). If this client has the inode
// open, the metadata service keeps it until the last close.
func (c *Client) Unlink(parent uint64, name string, dir bool) error {
	if len(name) > proto.MaxName {
		return syscall.ENAMETOOLONG
	}
	// Whether this client holds the file open matters only if it holds
	// any file open; skip the extra lookup otherwise.
	var open bool
	if !dir && c.anyOpen() {
		if n, err := c.Lookup(parent, name); err == nil {
			open = c.isOpen(n.Ino)
		}
	}
	r := proto.UnlinkReq{Parent: parent, Name: name, Dir: dir, Open: open, Session: c.session}
	var reply proto.UnlinkReply
	var flags uint8
	wm := c.ns.watermark()
	sent := time.Now()
	err := c.metaCall(proto.OpUnlink, r.Encode, func(d *wire.Dec) error { reply.Decode(d); flags = leaseFlags(d); return nil })
	if err != nil {
		c.ns.dropDent(parent, name)
		c.leases.drop(parent)
	} else {
		c.ns.removed(parent, name, reply.Ino, reply.Parent.Version)
		c.ns.putInode(&reply.Parent, wm)
		c.leases.own(parent, ownChange{reply.Parent.Version, name, false}, flags&proto.LeaseExtended != 0, sent)
	}
	if err == nil && open && !reply.Removed {
		c.markOrphan(reply.Ino)
	}
	if err == nil && reply.Removed {
		c.blocks.forget(reply.Ino)
	}
	return err
}

// Rename moves a name, atomically replacing any existing target.
func (c *Client) Rename(oldParent uint64, oldName string, newParent uint64, newName string, flags uint32) error {
	if len(oldName) > proto.MaxName || len(newName) > proto.MaxName {
		return syscall.ENAMETOOLONG
	}
	var replacedOpen uint64
	if flags&proto.RenameExchange == 0 && c.anyOpen() {
		if n, err := c.Lookup(newParent, newName); err == nil && c.isOpen(n.Ino) {
			replacedOpen = n.Ino
		}
	}
	r := proto.RenameReq{OldParent: oldParent, OldName: oldName, NewParent: newParent, NewName: newName,
		Flags: flags, Open: replacedOpen != 0, Session: c.session}
	var reply proto.RenameReply
	var lease uint8
	wm := c.ns.watermark()
	sent := time.Now()
	err := c.metaCall(proto.OpRename, r.Encode, func(d *wire.Dec) error { reply.Decode(d); lease = leaseFlags(d); return nil })
	if err != nil {
		c.ns.dropDent(oldParent, oldName)
		c.ns.dropDent(newParent, newName)
		c.leases.drop(oldParent)
		c.leases.drop(newParent)
	} else {
		if flags&proto.RenameExchange == 0 {
			extended := lease&proto.LeaseExtended != 0
			c.leases.own(oldParent, ownChange{reply.OldParent.Version, oldName, false}, extended, sent)
			c.leases.own(newParent, ownChange{reply.NewParent.Version, newName, true}, extended, sent)
		}
		// The moved inode's ctime moves; a replaced one loses a link.
		c.ns.removed(oldParent, oldName, reply.Moved, reply.NewParent.Version)
		c.ns.removed(newParent, newName, reply.Replaced, reply.NewParent.Version)
		c.ns.putInode(&reply.OldParent, wm)
		c.ns.putInode(&reply.NewParent, wm)
	}
	if err == nil && replacedOpen != 0 {
		c.markOrphan(replacedOpen)
	}
	return err
}

// ReadDir lists up to limit entries of directory ino after name after.
func (c *Client) ReadDir(ino uint64, after string, limit int, plus bool) (*proto.ReadDirReply, error) {
	var reply proto.ReadDirReply
	r := proto.ReadDirReq{Ino: ino, After: after, Limit: uint32(limit), Plus: plus}
	wm := c.ns.watermark()
	err := c.metaCall(proto.OpReadDir, r.Encode, func(d *wire.Dec) error { reply.Decode(d); return nil })
	for i := range reply.Inodes {
		n := &reply.Inodes[i]
		c.ns.putInode(n, wm)
		if i < len(reply.Entries) && reply.Entries[i].Ino == n.Ino {
			c.ns.putDent(ino, reply.Entries[i].Name, n.Ino, wm, wm)
		}
		c.overlay(n)
	}
	return &reply, err
}

// GetXattr returns an extended attribute's value.
func (c *Client) GetXattr(ino uint64, name string) ([]byte, error) {
	st := c.lookupState(ino)
	if name == capabilityXattr && st != nil && st.capabilityAbsent() {
		return nil, syscall.ENODATA
	}
	var epoch uint64
	if st != nil {
		epoch = st.capabilityEpoch()
	}
	var v []byte
	r := proto.XattrReq{Ino: ino, Name: name}
	err := c.metaCall(proto.OpGetXattr, r.Encode, func(d *wire.Dec) error {
		v = append([]byte{}, d.Bytes(proto.MaxXattrVal)...)
		return nil
	})
	if name == capabilityXattr && st != nil && errors.Is(err, syscall.ENODATA) {
		st.learnCapabilityAbsent(epoch)
	}
	return v, err
}

// SetXattr sets an extended attribute (flags: proto.XattrCreate/Replace).
func (c *Client) SetXattr(ino uint64, name string, value []byte, flags uint32) error {
	if len(name) > proto.MaxXattrName {
		return syscall.ERANGE
	}
	if len(value) > proto.MaxXattrVal {
		return syscall.E2BIG
	}
	c.forgetCapability(ino)
	defer c.ns.dropInode(ino) // ctime moves
	r := proto.XattrReq{Ino: ino, Name: name, Value: value, Flags: flags, Session: c.session}
	return c.metaCall(proto.OpSetXattr, r.Encode, nil)
}

// ListXattr returns the names of an inode's extended attributes.
func (c *Client) ListXattr(ino uint64) ([]string, error) {
	var names []string
	r := proto.InoReq{Ino: ino}
	err := c.metaCall(proto.OpListXattr, r.Encode, func(d *wire.Dec) error {
		n := d.Count(proto.MaxList, 4)
		for i := 0; i < n; i++ {
			names = append(names, d.String(proto.MaxXattrName))
		}
		return nil
	})
	return names, err
}

// RemoveXattr removes an extended attribute.
func (c *Client) RemoveXattr(ino uint64, name string) error {
	c.forgetCapability(ino)
	defer c.ns.dropInode(ino)
	r := proto.XattrReq{Ino: ino, Name: name, Session: c.session}
	return c.metaCall(proto.OpRemoveXattr, r.Encode, nil)
}

// SetStripe sets the striping pattern new files in directory ino get.
func (c *Client) SetStripe(ino uint64, s proto.Stripe) error {
	defer c.ns.dropInode(ino)
	r := proto.SetStripeReq{Ino: ino, Stripe: s}
	return c.metaCall(proto.OpSetStripe, r.Encode, nil)
}

// StatFs returns the capacity of the file system.
func (c *Client) StatFs() (*proto.StatFsReply, error) {
	var r proto.StatFsReply
	return &r, c.metaCall(proto.OpStatFs, nil, func(d *wire.Dec) error { r.Decode(d); return nil })
}

// Status returns the cluster's state for `tandem status`.
func (c *Client) Status() (*proto.StatusReply, error) {
	var r proto.StatusReply
	return &r, c.metaCall(proto.OpStatus, nil, func(d *wire.Dec) error { r.Decode(d); return nil })
}

// SetAttr changes attributes. A size change is applied to the file's data
// first (see Truncate), then recorded in the metadata.
func (c *Client) SetAttr(r *proto.SetAttrReq) (*proto.Inode, error) {
	r.Session = c.session
	if r.Valid&(proto.SetMtime|proto.SetMtimeNow) != 0 {
		// Buffered writes first: their commit at close would
		// otherwise set mtime back to when they were made (cp -p
		// sets times on the open copy before closing it).
		if err := c.flushWrites(r.Ino); err != nil {
			return nil, err
		}
	}
	if r.Valid&proto.SetSize != 0 {
		err := c.truncateData(r.Ino, r.Size)
		// After the chunks are cut: a read that crossed the cut must
		// not leave the bytes it cut here.
		c.blocks.dropFile(r.Ino)
		c.dropDisk(r.Ino)
		if err != nil {
			return nil, err
		}
	}
	n, err := c.inodeCall(proto.OpSetAttr, r.Encode)
	if err != nil {
		return nil, err
	}
	if r.Valid&proto.SetSize != 0 {
		c.sizeChanged(n.Ino, r.Size, n)
	}
	c.overlay(n)
	return n, nil
}

func errnoOf(err error) syscall.Errno { return rpc.ErrnoOf(err) }

// NFSLease asks the metadata leader for, renews or gives back an NFS
// gateway head's lease on a service address (meta/nfslease.go). ctx
// bounds the call: a head must learn in time that it cannot renew.
func (c *Client) NFSLease(ctx context.Context, r *proto.NFSLeaseReq) (*proto.NFSLeaseReply, error) {
	var reply proto.NFSLeaseReply
	err := c.callLeaderContext(ctx, proto.OpNFSLease, r.Encode, func(d *wire.Dec) error { reply.Decode(d); return nil })
	return &reply, err
}
