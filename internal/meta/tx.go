package meta

import (
	"errors"
	"io"
	"syscall"

	"github.com/cockroachdb/pebble/v2"

	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
)

// reader is what both the database (for the read path) and an indexed batch
// (for the state machine, which must see its own writes) offer.
type reader interface {
	Get(key []byte) ([]byte, io.Closer, error)
	NewIter(o *pebble.IterOptions) (*pebble.Iterator, error)
}

// get returns a copy of key's value, or found=false.
func get(r reader, key []byte) (val []byte, found bool, err error) {
	v, c, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	val = append([]byte(nil), v...)
	c.Close()
	return val, true, nil
}

func loadInode(r reader, ino uint64) (*inodeRec, error) {
	v, ok, err := get(r, inoKey(ino))
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, rpc.Errorf(syscall.ENOENT, "inode %d does not exist", ino)
	}
	return unmarshalInode(v)
}

func lookupEntry(r reader, parent uint64, name string) (ino uint64, mode uint32, found bool, err error) {
	v, ok, err := get(r, dentKey(parent, name))
	if err != nil || !ok {
		return 0, 0, false, err
	}
	ino, mode, err = unmarshalDent(v)
	return ino, mode, err == nil, err
}

// loadDir loads inode ino and checks that it is a directory.
func loadDir(r reader, ino uint64) (*inodeRec, error) {
	d, err := loadInode(r, ino)
	if err != nil {
		return nil, err
	}
	if !d.isDir() {
		return nil, rpc.Errorf(syscall.ENOTDIR, "inode %d is not a directory", ino)
	}
	return d, nil
}

// dirEmpty reports whether directory ino has no entries.
func dirEmpty(r reader, ino uint64) (bool, error) {
	lo := dentKey(ino, "")
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(lo)})
	if err != nil {
		return false, err
	}
	defer it.Close()
	return !it.First(), it.Error()
}

// tx is one state machine command being applied: an indexed batch that is
// committed only if the command succeeds, so a failing command changes
// nothing.
type tx struct {
	f     *FSM
	b     *pebble.Batch
	index uint64 // the command's Raft log index: the version of what it writes
	now   int64  // the leader's clock when it proposed the command
	after []func()
	// changes lists the inodes and entries the command wrote, for the
	// clients watching the namespace (see events.go).
	changes []proto.ChangeEvent
	// session is the client session whose request this is, when it says:
	// its changes carry it, so that it can tell them from others'
	// (dirlease.go, filelease.go).
	session uint64
	// files lists the regular files the command changed that existed
	// before it (a new one cannot be leased yet), whose leases the
	// leader ends before it answers (filelease.go).
	files   []uint64
	created uint64 // the inode the command made, if any
	// seen is what each inode the command loaded or wrote is charged
	// to quotas, and qdeltas the changes to the usage sums (quota.go).
	seen    map[uint64]charged
	qdeltas map[proto.QuotaID]qDelta
	quotas  map[proto.QuotaID]*proto.QuotaRecord // loaded this command
}

func (t *tx) inode(ino uint64) (*inodeRec, error) {
	r, err := loadInode(t.b, ino)
	if err == nil {
		t.noteLoaded(r)
	}
	return r, err
}

func (t *tx) dir(ino uint64) (*inodeRec, error) {
	r, err := loadDir(t.b, ino)
	if err == nil {
		t.noteLoaded(r)
	}
	return r, err
}

func (t *tx) lookup(parent uint64, name string) (uint64, uint32, bool, error) {
	return lookupEntry(t.b, parent, name)
}

// putInode stores r as changed by this command.
func (t *tx) putInode(r *inodeRec) {
	r.Version = t.index
	t.b.Set(inoKey(r.Ino), r.marshal(), nil)
	t.changed(r.Ino, 0, "")
	t.fileChanged(r)
	t.recharge(r.Ino, chargeOf(r))
}

// fileChanged notes a change to r for the file leases.
func (t *tx) fileChanged(r *inodeRec) {
	if !r.isReg() || r.Ino == t.created {
		return
	}
	for _, f := range t.files {
		if f == r.Ino {
			return
		}
	}
	t.files = append(t.files, r.Ino)
}

func (t *tx) putDent(parent uint64, name string, ino uint64, mode uint32) {
	t.b.Set(dentKey(parent, name), marshalDent(ino, mode), nil)
	t.changed(0, parent, name)
}

func (t *tx) delDent(parent uint64, name string) {
	t.b.Delete(dentKey(parent, name), nil)
	t.changed(0, parent, name)
}

// changed records an inode (parent 0) or a directory entry this command
// changes, once.
func (t *tx) changed(ino, parent uint64, name string) {
	for _, c := range t.changes {
		if c.Ino == ino && c.Parent == parent && c.Name == name {
			return
		}
	}
	t.changes = append(t.changes, proto.ChangeEvent{Index: t.index, Ino: ino, Parent: parent, Name: name, Session: t.session})
}

func (t *tx) touch(r *inodeRec) { r.Mtime, r.Ctime = t.now, t.now }

// dropInode deletes an inode whose last link is gone: its record, its
// extended attributes, and, for a file with data on targets, a garbage
// record so the chunks get deleted in the background.
func (t *tx) dropInode(r *inodeRec) {
	t.b.Delete(inoKey(r.Ino), nil)
	t.recharge(r.Ino, charged{})
	t.changed(r.Ino, 0, "")
	t.fileChanged(r)
	// Point deletes, not a range tombstone: most inodes have no xattrs,
	// and piles of range tombstones slow every later read.
	lo := xattrKey(r.Ino, "")
	if it, err := t.b.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(lo)}); err == nil {
		for ok := it.First(); ok; ok = it.Next() {
			t.b.Delete(append([]byte(nil), it.Key()...), nil)
		}
		it.Close()
	}
	t.b.Delete(orphanKey(r.Ino), nil)
	if r.isReg() && r.Stripe.EC.On() {
		if err := t.dropECStripes(r.Ino); err != nil {
			t.f.logf("forgetting the stripes of removed file %d: %v", r.Ino, err)
		}
	}
	if r.isReg() && !r.Inline && len(r.Chains) > 0 {
		t.b.Set(garbageKey(r.Ino), encodeChains(r.Chains), nil)
	}
}

// unlinkInode takes one link away from r. When none is left the inode is
// dropped, unless a client has it open, in which case it becomes an orphan
// owned by that client's session until released.
func (t *tx) unlinkInode(r *inodeRec, open bool, session uint64) (removed bool) {
	if r.isDir() {
		r.Nlink = 0
	} else if r.Nlink > 0 {
		r.Nlink--
	}
	r.Ctime = t.now
	if r.Nlink > 0 {
		t.putInode(r)
		return false
	}
	if open && session != 0 {
		t.putInode(r)
		t.b.Set(orphanKey(r.Ino), u64Bytes(session), nil)
		return false
	}
	t.dropInode(r)
	return true
}

func u64Bytes(v uint64) []byte { return u64Key(0, v)[1:] }

func encodeChains(c []uint32) []byte {
	b := make([]byte, 0, 4*len(c))
	for _, x := range c {
		b = append(b, byte(x), byte(x>>8), byte(x>>16), byte(x>>24))
	}
	return b
}

func decodeChains(b []byte) []uint32 {
	c := make([]uint32, len(b)/4)
	for i := range c {
		c[i] = uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24
	}
	return c
}

// allocIno returns a fresh inode number. Numbers are never reused, so a
// stale handle can never reach a different file.
func (t *tx) allocIno() (uint64, error) {
	v, ok, err := get(t.b, keyNextIno)
	if err != nil {
		return 0, err
	}
	ino := uint64(proto.RootIno + 1)
	if ok {
		ino = decodeU64(v)
	}
	t.b.Set(keyNextIno, u64Bytes(ino+1), nil)
	return ino, nil
}

func decodeU64(b []byte) uint64 {
	if len(b) != 8 {
		return 0
	}
	return uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
		uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7])
}

// onCommit registers fn to run after the command's batch is committed, for
// in-memory caches that must not see a failed command's changes.
func (t *tx) onCommit(fn func()) { t.after = append(t.after, fn) }

// effectiveStripe fills unset fields of s from def.
func effectiveStripe(s, def proto.Stripe) proto.Stripe {
	if s.ChunkSize == 0 {
		s.ChunkSize = def.ChunkSize
	}
	if s.Count == 0 {
		s.Count = def.Count
	}
	switch {
	case s.EC.On():
		s.Replicas = 0 // the file is coded, not copied
	case s.Replicas != 0:
		// Copies asked for: new files are no longer coded.
	default:
		s.Replicas, s.EC = def.Replicas, def.EC
	}
	return s
}
