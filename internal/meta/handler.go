package meta

import (
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
	"tandemfs/internal/wire"
)

// decoder is any request message.
type decoder interface{ Decode(*wire.Dec) }

// mutations maps each state-changing operation to its request type. The
// handler decodes a request once to refuse malformed ones before they reach
// the Raft log; the state machine decodes it again when applying.
var mutations = map[uint16]func() decoder{
	proto.OpCreate:          func() decoder { return &proto.CreateReq{} },
	proto.OpLink:            func() decoder { return &proto.LinkReq{} },
	proto.OpUnlink:          func() decoder { return &proto.UnlinkReq{} },
	proto.OpRename:          func() decoder { return &proto.RenameReq{} },
	proto.OpSetAttr:         func() decoder { return &proto.SetAttrReq{} },
	proto.OpWriteInline:     func() decoder { return &proto.WriteInlineReq{} },
	proto.OpUninline:        func() decoder { return &proto.UninlineReq{} },
	proto.OpCommitWrite:     func() decoder { return &proto.CommitWriteReq{} },
	proto.OpSetXattr:        func() decoder { return &proto.XattrReq{} },
	proto.OpRemoveXattr:     func() decoder { return &proto.XattrReq{} },
	proto.OpSetStripe:       func() decoder { return &proto.SetStripeReq{} },
	proto.OpRelease:         func() decoder { return &proto.InoReq{} },
	proto.OpRegisterServer:  func() decoder { return &proto.RegisterServerReq{} },
	proto.OpResyncDone:      func() decoder { return &proto.ResyncDoneReq{} },
	proto.OpTargetFailed:    func() decoder { return &proto.TargetFailedReq{} },
	proto.OpTargetRecovered: func() decoder { return &proto.TargetRecoveredReq{} },
	proto.OpQuotaSet:        func() decoder { return &proto.QuotaSetReq{} },
	proto.OpECGen:           func() decoder { return &proto.InoReq{} },
}

func (s *Service) handle(op uint16, d *wire.Dec, out *wire.Enc) error {
	if !s.serving.Load() {
		return rpc.Errorf(syscall.EAGAIN, "metadata replica %s is not the leader; leader: %s", s.cfg.ID, s.leaderAddr())
	}
	if mk, ok := mutations[op]; ok {
		payload := d.Rest()
		req := mk()
		req.Decode(d)
		if err := d.Finish(); err != nil {
			return rpc.BadRequest(err)
		}
		var existing map[uint32]bool
		if op == proto.OpRegisterServer {
			existing = s.replicatedChains()
		}
		reply, index, err := s.proposeAt(op, func(e *wire.Enc) { e.B = append(e.B, payload...) })
		if err != nil {
			return err
		}
		if r, ok := req.(*proto.CommitWriteReq); ok && r.Sync {
			if err := s.syncLog(); err != nil {
				return err
			}
		}
		if r, ok := req.(*proto.RegisterServerReq); ok {
			if err := s.afterRegistration(r, reply, existing); err != nil {
				return err
			}
		}
		out.B = append(out.B, reply...)
		if c, ok := entryChangeOf(req, reply); ok {
			out.U8(s.afterEntryChange(c, index))
		}
		return nil
	}
	switch op {
	case proto.OpLookup:
		var r proto.LookupReq
		return read(d, &r, func() error { return s.lookup(&r, out) })
	case proto.OpGetAttr:
		var r proto.InoReq
		return read(d, &r, func() error { return s.getAttr(&r, out) })
	case proto.OpFileLease:
		var r proto.InoReq
		return read(d, &r, func() error { return s.fileLease(&r, out) })
	case proto.OpFileLeaseRelease:
		var r proto.FileLeaseRelease
		return read(d, &r, func() error { s.files.release(r.Session, r.Files); return nil })
	case proto.OpReadDir:
		var r proto.ReadDirReq
		return read(d, &r, func() error { return s.readDir(&r, out) })
	case proto.OpGetXattr:
		var r proto.XattrReq
		return read(d, &r, func() error { return s.getXattr(&r, out) })
	case proto.OpListXattr:
		var r proto.InoReq
		return read(d, &r, func() error { return s.listXattr(&r, out) })
	case proto.OpStatFs:
		return read(d, nil, func() error { return s.statFs(out) })
	case proto.OpECStripes:
		var r proto.ECStripesReq
		return read(d, &r, func() error { return s.ecStripes(&r, out) })
	case proto.OpQuotaList:
		var r proto.QuotaListReq
		return read(d, &r, func() error { return s.quotaList(&r, out) })
	case proto.OpClusterMap:
		return read(d, nil, func() error {
			m, err := s.clusterMap()
			if err == nil {
				m.Encode(out)
			}
			return err
		})
	case proto.OpStatus:
		return read(d, nil, func() error { return s.status(out) })
	case proto.OpHeartbeat:
		var r proto.HeartbeatReq
		return read(d, &r, func() error { return s.heartbeat(&r, out) })
	case proto.OpSync:
		return read(d, nil, s.syncLog)
	case proto.OpWatch:
		var r proto.WatchReq
		return read(d, &r, func() error {
			if s.fsm.events.current(r.Stream) {
				now := time.Now()
				s.acks.ack(r.Session, r.After, now)
				s.files.renew(r.Session, now)
			}
			if r.Opens != nil && r.Session != 0 {
				s.sessions.touch(r.Session) // a live client, as its keepalives say
				s.opens.report(r.Session, r.Opens)
			}
			var reply proto.WatchReply
			s.fsm.events.watch(&r, s.stop, &reply)
			if !s.serving.Load() {
				// Deposed while waiting: this replica's changes
				// may be missing the new leader's.
				return rpc.Errorf(syscall.EAGAIN, "metadata replica %s is no longer the leader", s.cfg.ID)
			}
			reply.Encode(out)
			return nil
		})
	case proto.OpSetLock:
		var r proto.SetLockReq
		return read(d, &r, func() error { return s.setLock(&r, out) })
	case proto.OpGetLock:
		var r proto.GetLockReq
		return read(d, &r, func() error { return s.getLock(&r, out) })
	case proto.OpDirLease:
		var r proto.DirLeaseReq
		return read(d, &r, func() error { return s.dirLease(&r, out) })
	case proto.OpNFSLease:
		var r proto.NFSLeaseReq
		return read(d, &r, func() error { return s.nfsLease(&r, out) })
	case proto.OpECScrub:
		return read(d, nil, func() error { s.askECScrub(); return nil })
	case proto.OpConvertBegin:
		var r proto.ConvertBeginReq
		return read(d, &r, func() error { return s.convertBegin(&r, out) })
	case proto.OpConvertCommit:
		payload := d.Rest()
		var r proto.ConvertCommitReq
		return read(d, &r, func() error { return s.convertCommit(&r, payload, out) })
	case proto.OpOpenWrite:
		var r proto.OpenWriteReq
		return read(d, &r, func() error { return s.openWrite(&r, out) })
	case proto.OpSessionKeepalive:
		var r proto.InoReq
		return read(d, &r, func() error { s.sessions.touch(r.Session); return nil })
	}
	return rpc.Errorf(syscall.ENOSYS, "unknown metadata operation %d", op)
}

// syncLog makes every change so far durable on this replica's disk.
func (s *Service) syncLog() error {
	if err := s.node.store.syncNow(); err != nil {
		return rpc.Errorf(syscall.EIO, "syncing the metadata log: %v", err)
	}
	return nil
}

// read decodes a request (msg may be nil for requests without a body),
// refusing trailing bytes, and then serves it.
func read(d *wire.Dec, msg decoder, serve func() error) error {
	if msg != nil {
		msg.Decode(d)
	}
	if err := d.Finish(); err != nil {
		return rpc.BadRequest(err)
	}
	return serve()
}

func (s *Service) lookup(r *proto.LookupReq, out *wire.Enc) error {
	db := s.fsm.db
	dir, err := loadDir(db, r.Parent)
	if err != nil {
		return err
	}
	if r.Name == ".." { // an NFS gateway asks, for a handle's way up
		return s.parentOf(dir, out)
	}
	ino, _, found, err := lookupEntry(db, r.Parent, r.Name)
	if err != nil {
		return err
	}
	if !found {
		return rpc.Errorf(syscall.ENOENT, "%q not found", r.Name)
	}
	n, err := loadInode(db, ino)
	if err != nil {
		return err
	}
	n.Inode.Encode(out)
	return nil
}

// parentOf answers a lookup of ".." in dir: its parent, itself for the
// root.
func (s *Service) parentOf(dir *inodeRec, out *wire.Enc) error {
	ino := dir.Parent
	if dir.Ino == proto.RootIno || ino == 0 {
		ino = dir.Ino
	}
	n, err := loadInode(s.fsm.db, ino)
	if err != nil {
		return err
	}
	n.Inode.Encode(out)
	return nil
}

func (s *Service) getAttr(r *proto.InoReq, out *wire.Enc) error {
	n, err := loadInode(s.fsm.db, r.Ino)
	if err != nil {
		return err
	}
	n.Inode.Encode(out)
	return nil
}

// readDir lists a page of a directory. Pages are bounded, so listing a
// directory of any size needs bounded memory on both ends.
func (s *Service) readDir(r *proto.ReadDirReq, out *wire.Enc) error {
	db := s.fsm.db
	if _, err := loadDir(db, r.Ino); err != nil {
		return err
	}
	limit := int(r.Limit)
	if limit <= 0 || limit > 4096 {
		limit = 4096
	}
	prefix := dentKey(r.Ino, "")
	lo := prefix
	if r.After != "" {
		lo = append(dentKey(r.Ino, r.After), 0)
	}
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return err
	}
	defer it.Close()
	var reply proto.ReadDirReply
	ok := it.First()
	for ; ok && len(reply.Entries) < limit; ok = it.Next() {
		ino, mode, err := unmarshalDent(it.Value())
		if err != nil {
			return err
		}
		name := string(it.Key()[len(prefix):])
		reply.Entries = append(reply.Entries, proto.DirEntry{Name: name, Ino: ino, Mode: mode})
		if r.Plus {
			n, err := loadInode(db, ino)
			if err != nil {
				return err
			}
			reply.Inodes = append(reply.Inodes, n.Inode)
		}
	}
	reply.More = ok
	if err := it.Error(); err != nil {
		return err
	}
	reply.Encode(out)
	return nil
}

func (s *Service) getXattr(r *proto.XattrReq, out *wire.Enc) error {
	if _, err := loadInode(s.fsm.db, r.Ino); err != nil {
		return err
	}
	v, ok, err := get(s.fsm.db, xattrKey(r.Ino, r.Name))
	if err != nil {
		return err
	}
	if !ok {
		return rpc.Errorf(syscall.ENODATA, "attribute %q does not exist", r.Name)
	}
	out.Bytes(v)
	return nil
}

func (s *Service) listXattr(r *proto.InoReq, out *wire.Enc) error {
	if _, err := loadInode(s.fsm.db, r.Ino); err != nil {
		return err
	}
	prefix := xattrKey(r.Ino, "")
	var names []string
	it, err := s.fsm.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		names = append(names, string(it.Key()[len(prefix):]))
	}
	if err := it.Close(); err != nil {
		return err
	}
	out.U32(uint32(len(names)))
	for _, n := range names {
		out.String(n)
	}
	return nil
}

func (s *Service) clusterMap() (*proto.ClusterMap, error) {
	db := s.fsm.db
	m := &proto.ClusterMap{InlineLimit: s.fsm.inlineLimit}
	v, _, err := get(db, keyMapVersion)
	if err != nil {
		return nil, err
	}
	m.Version = decodeU64(v)
	if m.Servers, err = loadServers(db); err != nil {
		return nil, err
	}
	if m.Targets, err = loadTargets(db); err != nil {
		return nil, err
	}
	if m.Chains, err = loadChains(db); err != nil {
		return nil, err
	}
	s.live.annotate(m.Targets, s.cfg.DeadAfter)
	failed, err := failedTargets(db)
	if err != nil {
		return nil, err
	}
	for i := range m.Targets {
		if failed[m.Targets[i].ID] != "" {
			m.Targets[i].State = proto.TargetFailed
		}
	}
	return m, nil
}

// heartbeat records a storage server's heartbeat and answers with the map
// version and the server's lease.
func (s *Service) heartbeat(r *proto.HeartbeatReq, out *wire.Enc) error {
	s.live.heartbeat(r)
	v, _, err := get(s.fsm.db, keyMapVersion)
	if err != nil {
		return err
	}
	rep := proto.HeartbeatReply{MapVersion: decodeU64(v), LeaseMs: uint32(s.cfg.FailureTimeout / 2 / time.Millisecond)}
	rep.Encode(out)
	return nil
}

func (s *Service) statFs(out *wire.Enc) error {
	m, err := s.clusterMap()
	if err != nil {
		return err
	}
	var r proto.StatFsReply
	r.TotalBytes, r.FreeBytes = proto.Capacity(m.Targets)
	v, _, err := get(s.fsm.db, keyNextIno)
	if err != nil {
		return err
	}
	r.Inodes = decodeU64(v)
	r.Encode(out)
	return nil
}

func (s *Service) status(out *wire.Enc) error {
	m, err := s.clusterMap()
	if err != nil {
		return err
	}
	v, _, err := get(s.fsm.db, keyNextIno)
	if err != nil {
		return err
	}
	r := proto.StatusReply{
		Map:           *m,
		MetaAddr:      s.Addr(),
		RaftState:     s.node.raft.State().String(),
		RaftIndex:     s.node.raft.AppliedIndex(),
		Inodes:        decodeU64(v),
		InlineLimit:   s.fsm.inlineLimit,
		Sessions:      uint32(s.sessions.count(2 * time.Minute)),
		Resyncs:       s.live.activeResyncs(3 * s.cfg.FailureTimeout),
		Scrubs:        s.live.scrubReports(),
		Caches:        s.live.cacheReports(),
		PrivateSeenMs: s.live.privateSeen(),
	}
	r.Locks, r.LockedFiles = countLocks(s.fsm.db)
	leases, dirs := s.leases.count(time.Now())
	r.DirLeases, r.LeasedDirs = uint32(leases), uint32(dirs)
	leases, files := s.files.counts(time.Now())
	r.FileLeases, r.LeasedFiles = uint32(leases), uint32(files)
	if r.NFS, err = s.nfsStatus(); err != nil {
		return err
	}
	r.ECRepair = s.ecRepairStatus()
	r.ECScrub = s.ecScrubStatus()
	for _, o := range s.fences.Latest() {
		r.Fencing = append(r.Fencing, proto.FenceEvent{ServerID: o.Server.ID, AtMs: o.Started.UnixMilli(), Fenced: o.Fenced, Summary: o.String()})
	}
	r.Encode(out)
	return nil
}
