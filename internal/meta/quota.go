package meta

import (
	"fmt"
	"slices"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
	"tandemfs/internal/wire"
)

// Quota accounting. Every inode is charged to its owner, its group and
// its project (if any): one inode, and its bytes (proto.Inode.UsedBytes).
// The state machine keeps the sums in quota records, in the same command
// as the change that moved them: each command notes what every inode it
// loads is charged (t.seen), and each write of an inode moves the sums by
// the difference (t.charge), applied once at the end (t.flushQuota). So
// the usage is as durable as the namespace, through kill -9, restarts and
// failovers, and every replica computes the same.
//
// Limits are checked where the metadata service decides: inodes at every
// create, bytes of inline files at their writes. Bytes written to chunks
// reach the storage servers straight from the client, which refuses writes
// to files whose owner, group or project is over its limit by the list
// OpQuotaList gives it (internal/client/quota.go).

// qKey is the key of one quota record: 'q', kind, id.
func qKey(kind proto.QuotaKind, id uint32) []byte {
	return u32Key([]byte{'q', byte(kind)}, id)
}

var (
	keyQuotaInit  = []byte("s/quotainit") // usage has been summed over every inode
	prefixQuota   = []byte("q")
	keyQuotaGrace = []byte("s/quotagrace")
)

// charged is what an inode is charged to quotas.
type charged struct {
	counted           bool
	uid, gid, project uint32
	bytes             uint64
}

func chargeOf(r *inodeRec) charged {
	return charged{counted: true, uid: r.Uid, gid: r.Gid, project: r.Project, bytes: r.UsedBytes()}
}

// qDelta is a change to one quota's usage.
type qDelta struct{ bytes, inodes int64 }

// noteLoaded remembers what r was charged when the command first loaded
// it.
func (t *tx) noteLoaded(r *inodeRec) {
	if t.seen == nil {
		t.seen = map[uint64]charged{}
	}
	if _, ok := t.seen[r.Ino]; !ok {
		t.seen[r.Ino] = chargeOf(r)
	}
}

// recharge moves the usage sums from what inode ino was charged to now.
func (t *tx) recharge(ino uint64, now charged) {
	if t.seen == nil {
		t.seen = map[uint64]charged{}
	}
	before := t.seen[ino] // zero for an inode this command made
	t.seen[ino] = now
	if before == now {
		return
	}
	if t.qdeltas == nil {
		t.qdeltas = map[proto.QuotaID]qDelta{}
	}
	add := func(c charged, sign int64) {
		if !c.counted {
			return
		}
		for _, q := range proto.QuotasOf(c.uid, c.gid, c.project) {
			d := t.qdeltas[q]
			d.bytes += sign * int64(c.bytes)
			d.inodes += sign
			t.qdeltas[q] = d
		}
	}
	add(before, -1)
	add(now, +1)
}

// flushQuota applies the command's changes to the usage sums, and starts
// or ends grace periods as usage crosses soft limits.
func (t *tx) flushQuota() error {
	for q, d := range t.qdeltas {
		if d == (qDelta{}) {
			continue
		}
		r, err := t.quota(q.Kind, q.ID)
		if err != nil {
			return err
		}
		r.Bytes = addClamped(r.Bytes, d.bytes)
		r.Inodes = addClamped(r.Inodes, d.inodes)
		if r.BlockSoft > 0 || r.InodeSoft > 0 {
			grace, err := loadGrace(t.b, q.Kind)
			if err != nil {
				return err
			}
			updateGrace(r, grace, t.now)
		}
		t.putQuota(r)
	}
	t.qdeltas = nil
	return nil
}

func addClamped(v uint64, d int64) uint64 {
	if d < 0 && uint64(-d) > v {
		return 0
	}
	return uint64(int64(v) + d)
}

// updateGrace starts a grace period when usage goes over a soft limit and
// ends it when usage is back under it.
func updateGrace(r *proto.QuotaRecord, g proto.QuotaGrace, now int64) {
	switch {
	case r.BlockSoft == 0 || r.Bytes <= r.BlockSoft:
		r.BlockGraceEnd = 0
	case r.BlockGraceEnd == 0:
		r.BlockGraceEnd = now + g.Block
	}
	switch {
	case r.InodeSoft == 0 || r.Inodes <= r.InodeSoft:
		r.InodeGraceEnd = 0
	case r.InodeGraceEnd == 0:
		r.InodeGraceEnd = now + g.Inode
	}
}

// quota loads one quota record (usage zero and no limits if none yet),
// once per command: a create checks the records it then updates.
func (t *tx) quota(kind proto.QuotaKind, id uint32) (*proto.QuotaRecord, error) {
	if r, ok := t.quotas[proto.QuotaID{Kind: kind, ID: id}]; ok {
		return r, nil
	}
	r, err := loadQuota(t.b, kind, id)
	if err != nil {
		return nil, err
	}
	if t.quotas == nil {
		t.quotas = map[proto.QuotaID]*proto.QuotaRecord{}
	}
	t.quotas[proto.QuotaID{Kind: kind, ID: id}] = r
	return r, nil
}

func loadQuota(r reader, kind proto.QuotaKind, id uint32) (*proto.QuotaRecord, error) {
	q := &proto.QuotaRecord{Kind: kind, ID: id}
	v, ok, err := get(r, qKey(kind, id))
	if err != nil || !ok {
		return q, err
	}
	d := wire.NewDec(v)
	q.Decode(d)
	if err := d.Finish(); err != nil {
		return nil, fmt.Errorf("quota record of %s %d: %w", kind, id, err)
	}
	return q, nil
}

// putQuota stores r, or deletes it when it says nothing.
func (t *tx) putQuota(r *proto.QuotaRecord) {
	if r.Bytes == 0 && r.Inodes == 0 && r.QuotaLimits == (proto.QuotaLimits{}) {
		t.b.Delete(qKey(r.Kind, r.ID), nil)
		return
	}
	e := wire.NewEnc(nil)
	r.Encode(e)
	t.b.Set(qKey(r.Kind, r.ID), e.B, nil)
}

func graceKey(kind proto.QuotaKind) []byte {
	return append(append([]byte(nil), keyQuotaGrace...), byte(kind))
}

// loadGrace returns the grace periods of a kind.
func loadGrace(r reader, kind proto.QuotaKind) (proto.QuotaGrace, error) {
	g := proto.QuotaGrace{Block: proto.DefaultQuotaGrace, Inode: proto.DefaultQuotaGrace}
	v, ok, err := get(r, graceKey(kind))
	if err != nil || !ok {
		return g, err
	}
	d := wire.NewDec(v)
	g.Block, g.Inode = d.I64(), d.I64()
	return g, d.Finish()
}

// checkInodes refuses a create that would take the new inode's owner,
// group or project over an inode limit (EDQUOT).
func (t *tx) checkInodes(n *inodeRec) error {
	r, err := t.refusing(chargedIDs(n), func(r *proto.QuotaRecord) bool { return r.RefusesInodes(1, t.now) })
	if err != nil || r == nil {
		return err
	}
	return rpc.Errorf(syscall.EDQUOT, "%s %d is at its limit of files (%d used, soft %d, hard %d)",
		r.Kind, r.ID, r.Inodes, r.InodeSoft, r.InodeHard)
}

// checkBytes refuses a change that grows the bytes charged for n by grow
// beyond a block limit (EDQUOT): writes of inline files, which the
// metadata service itself stores.
func (t *tx) checkBytes(n *inodeRec, grow uint64) error {
	r, err := t.refusing(chargedIDs(n), func(r *proto.QuotaRecord) bool { return r.RefusesBytes(grow, t.now) })
	if err != nil || r == nil {
		return err
	}
	return rpc.Errorf(syscall.EDQUOT, "%s %d is at its limit of bytes (%d used, soft %d, hard %d)",
		r.Kind, r.ID, r.Bytes, r.BlockSoft, r.BlockHard)
}

// checkNewOwners refuses (EDQUOT) a chown, chgrp or change of project
// that would take a quota n is now charged to, and was not before, over
// a limit with n's file and bytes, as XFS does.
func (t *tx) checkNewOwners(n *inodeRec) error {
	before := t.seen[n.Ino]
	was := proto.QuotasOf(before.uid, before.gid, before.project)
	var added []proto.QuotaID
	for _, q := range chargedIDs(n) {
		if !before.counted || !slices.Contains(was, q) {
			added = append(added, q)
		}
	}
	r, err := t.refusing(added, func(r *proto.QuotaRecord) bool {
		return r.RefusesInodes(1, t.now) || r.RefusesBytes(n.UsedBytes(), t.now)
	})
	if err != nil || r == nil {
		return err
	}
	return rpc.Errorf(syscall.EDQUOT, "%s %d has no room for inode %d (%d bytes)", r.Kind, r.ID, n.Ino, n.UsedBytes())
}

// refusing returns the first of quotas ids whose record refuses, or nil.
func (t *tx) refusing(ids []proto.QuotaID, refuses func(*proto.QuotaRecord) bool) (*proto.QuotaRecord, error) {
	for _, q := range ids {
		r, err := t.quota(q.Kind, q.ID)
		if err != nil {
			return nil, err
		}
		if refuses(r) {
			return r, nil
		}
	}
	return nil, nil
}

// chargedIDs are the quotas n is charged to.
func chargedIDs(n *inodeRec) []proto.QuotaID { return proto.QuotasOf(n.Uid, n.Gid, n.Project) }

// setQuota changes a quota's limits and, if given, its kind's grace
// periods.
func (t *tx) setQuota(r *proto.QuotaSetReq) error {
	if r.Grace.Block < 0 || r.Grace.Inode < 0 {
		return rpc.Errorf(syscall.EINVAL, "a grace period cannot be negative")
	}
	grace, err := loadGrace(t.b, r.Kind)
	if err != nil {
		return err
	}
	if r.Grace != (proto.QuotaGrace{}) {
		if r.Grace.Block > 0 {
			grace.Block = r.Grace.Block
		}
		if r.Grace.Inode > 0 {
			grace.Inode = r.Grace.Inode
		}
		e := wire.NewEnc(nil)
		e.I64(grace.Block)
		e.I64(grace.Inode)
		t.b.Set(graceKey(r.Kind), e.B, nil)
	}
	if r.Set == 0 {
		return nil
	}
	if r.ID == 0 {
		return rpc.Errorf(syscall.EINVAL, "%s 0 cannot be limited (root's quotas only count)", r.Kind)
	}
	q, err := t.quota(r.Kind, r.ID)
	if err != nil {
		return err
	}
	set := func(bit uint8, dst *uint64, v uint64) {
		if r.Set&bit != 0 {
			*dst = v
		}
	}
	set(proto.QuotaSetBlockSoft, &q.BlockSoft, r.BlockSoft)
	set(proto.QuotaSetBlockHard, &q.BlockHard, r.BlockHard)
	set(proto.QuotaSetInodeSoft, &q.InodeSoft, r.InodeSoft)
	set(proto.QuotaSetInodeHard, &q.InodeHard, r.InodeHard)
	if (q.BlockHard > 0 && q.BlockSoft > q.BlockHard) || (q.InodeHard > 0 && q.InodeSoft > q.InodeHard) {
		return rpc.Errorf(syscall.EINVAL, "a soft limit above its hard limit (blocks %d/%d, inodes %d/%d)",
			q.BlockSoft, q.BlockHard, q.InodeSoft, q.InodeHard)
	}
	// A new soft limit already exceeded starts its grace period now.
	q.BlockGraceEnd, q.InodeGraceEnd = 0, 0
	updateGrace(q, grace, t.now)
	t.putQuota(q)
	return nil
}

// initQuota sums the usage of every inode, once, for a file system made
// before quotas were kept (as quotacheck does); new file systems start
// with it done.
func (t *tx) initQuota() error {
	if _, ok, err := get(t.b, keyQuotaInit); err != nil || ok {
		return err
	}
	lo := []byte{pInode}
	it, err := t.b.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(lo)})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		r, err := unmarshalInode(it.Value())
		if err != nil {
			it.Close()
			return err
		}
		if _, done := t.seen[r.Ino]; !done {
			t.recharge(r.Ino, chargeOf(r)) // from nothing
		}
	}
	if err := it.Close(); err != nil {
		return err
	}
	t.b.Set(keyQuotaInit, []byte{1}, nil)
	return nil
}

// quotaPage is the most records one OpQuotaList reply carries.
var quotaPage = proto.QuotaPage

// quotaList answers OpQuotaList from the leader's store.
func (s *Service) quotaList(r *proto.QuotaListReq, out *wire.Enc) error {
	var reply proto.QuotaListReply
	reply.Now = time.Now().UnixNano()
	for _, k := range proto.QuotaKinds {
		g, err := loadGrace(s.fsm.db, k)
		if err != nil {
			return err
		}
		reply.Grace[k] = g
	}
	if !r.All {
		q, err := loadQuota(s.fsm.db, r.Kind, r.ID)
		if err != nil {
			return err
		}
		reply.Records = []proto.QuotaRecord{*q}
		reply.Encode(out)
		return nil
	}
	lo := prefixQuota
	if !r.AnyKind {
		lo = []byte{'q', byte(r.Kind)}
	}
	hi := prefixEnd(lo)
	if len(r.After) > 0 {
		// Past the key of the last record listed: qKey's layout.
		if after := append([]byte{'q'}, r.After...); string(after) >= string(lo) {
			lo = append(after, 0)
		}
	}
	it, err := s.fsm.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		if len(reply.Records) == quotaPage {
			reply.More = true
			break
		}
		var q proto.QuotaRecord
		d := wire.NewDec(it.Value())
		q.Decode(d)
		if d.Finish() != nil {
			continue
		}
		if r.Limited && q.QuotaLimits == (proto.QuotaLimits{}) {
			continue
		}
		reply.Records = append(reply.Records, q)
	}
	if err := it.Close(); err != nil {
		return err
	}
	reply.Encode(out)
	return nil
}

// crossesProject refuses (EXDEV) a link or rename of n into directory dir
// of another project, as XFS does with project inheritance: the tools
// then copy and remove, which charges the new project.
func crossesProject(n, dir *inodeRec) error {
	if dir.Project != 0 && n.Project != dir.Project {
		return rpc.Errorf(syscall.EXDEV, "inode %d (project %d) cannot move into a directory of project %d", n.Ino, n.Project, dir.Project)
	}
	return nil
}
