// Package meta is the TandemFS metadata service: the namespace (inodes,
// directory entries, attributes, inline data of small files, extended
// attributes), file layouts and the cluster map, kept in Pebble and changed
// only through commands committed to a Raft log (hashicorp/raft).
//
// Reads are served from the local store of the Raft leader; changes are
// proposed to Raft and answered once applied (see FSM).
package meta

import (
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/raft"

	"tandemfs/internal/fence"
	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
	"tandemfs/internal/wire"
)

// Config configures one metadata service replica.
type Config struct {
	Dir        string // holds store/ (Pebble) and raft/ (log, snapshots)
	Listen     string // address for clients and storage servers
	RaftListen string // address for Raft peers
	ID         string // replica ID (default "meta1")
	Secret     rpc.Secret
	// Peers are all metadata replicas including this one, for a
	// replicated service (three for one failure); empty: one replica.
	Peers []Peer

	// Settings a new file system is created with (ignored afterwards).
	InlineLimit   uint32       // largest inline file of a new file system; 0: the default, 4096
	NoInline      bool         // a new file system stores every file on targets
	DefaultStripe proto.Stripe // default 1 MiB x 4 chains; replicas 0: 2 copies when the cluster has 2+ servers

	// FailureTimeout is how long a storage server may stay silent on the
	// public network before the leader fails over its chains (default
	// 3 s: a heartbeat may have gone 0.5 s before the failure, and the
	// commit and the clients' retry take a few hundred ms more, so detection
	// and failover together stay within 5 s).
	// Storage servers stop serving replicated chains after half of it
	// without an acknowledged heartbeat.
	FailureTimeout time.Duration
	// Fence, if set, names the fence agents the leader runs against a
	// storage server it has failed over (fence-agents style, primary
	// first).
	Fence *fence.Config
	// ECRebuildAfter is how long a storage server may stay silent before
	// the shards of erasure-coded files on its targets are rebuilt on
	// other targets (default 10 minutes, as Ceph marks an OSD out; a
	// negative value: never).
	ECRebuildAfter time.Duration
	// DeadAfter is how long a storage server may stay silent before its
	// targets are shown offline (default FailureTimeout).
	DeadAfter time.Duration
	// SyncEvery is how often the Raft log is fsynced (default 100 ms);
	// commits survive a crash of the process at once, a power failure
	// after this delay, or at once when a client calls fsync. Negative:
	// fsync every commit.
	SyncEvery time.Duration
	// SessionTimeout is how long a client may stay silent before files it
	// held open after unlinking them are deleted (default 60 s).
	SessionTimeout time.Duration
	// PollNext is how long the service polls its connections for the
	// next request after a reply before it lets its CPU idle (rpc's
	// pollnext.go); 0 sleeps at once.
	PollNext time.Duration

	Logf      func(format string, args ...any)
	LogOutput io.Writer
}

// Peer is one metadata replica: its ID, the address clients use and the
// address of its Raft transport.
type Peer struct {
	ID, Addr, RaftAddr string
}

// Service is a running metadata service replica.
type Service struct {
	cfg  Config
	fsm  *FSM
	node *raftNode
	srv  *rpc.Server
	ln   net.Listener

	// serving is true while this replica leads and has applied every
	// entry committed before it took over; only then are reads current.
	serving     atomic.Bool
	leaderSince atomic.Int64 // unix ns when serving began
	ecRepair    ecRepairer   // background repair of degraded erasure-coded stripes
	ecScrub     ecScrubber   // parity checks of erasure-coded files
	live        *liveness
	flaps       *flapCounter // used by the failure loop only
	fences      *fence.Log
	nfsHeads    *nfsHeads // NFS gateway heads seen (nfslease.go)
	sessions    *sessions
	storage     *storageClients
	leases      *dirLeases   // directory leases (dirlease.go), while leading
	files       *fileLeases  // file leases (filelease.go), while leading
	opens       *openTable   // the files client sessions hold open (opens.go), while leading
	convs       *conversions // conversions between copies and erasure coding in progress (convert.go)
	acks        *leaseAcks   // what their holders took in (leaseacks.go)

	stop chan struct{}
	wg   sync.WaitGroup
}

// Start opens the store, starts Raft, waits until this replica leads and
// has applied the whole log, creates the root directory of a new file
// system, and then starts serving.
func Start(cfg Config) (*Service, error) {
	if cfg.ID == "" {
		cfg.ID = "meta1"
	}
	if cfg.Logf == nil {
		cfg.Logf = log.Printf
	}
	if cfg.InlineLimit == 0 {
		cfg.InlineLimit = 4096
	}
	if cfg.NoInline {
		cfg.InlineLimit = 0
	}
	if cfg.InlineLimit > proto.MaxInline {
		return nil, fmt.Errorf("inline limit %d exceeds %d", cfg.InlineLimit, proto.MaxInline)
	}
	cfg.DefaultStripe = effectiveStripe(cfg.DefaultStripe, proto.Stripe{ChunkSize: 1 << 20, Count: 4})
	cfg.FailureTimeout = orDuration(cfg.FailureTimeout, 3*time.Second)
	cfg.DeadAfter = orDuration(cfg.DeadAfter, cfg.FailureTimeout)
	cfg.ECRebuildAfter = orDuration(cfg.ECRebuildAfter, 10*time.Minute)
	if cfg.SyncEvery == 0 {
		cfg.SyncEvery = 100 * time.Millisecond
	}
	cfg.SessionTimeout = orDuration(cfg.SessionTimeout, 60*time.Second)
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("metadata directory: %w", err)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("metadata service listen %s: %w", cfg.Listen, err)
	}
	fsm, err := OpenFSM(filepath.Join(cfg.Dir, "store"), cfg.Logf)
	if err != nil {
		ln.Close()
		return nil, err
	}
	voters := map[string]string{}
	for _, p := range cfg.Peers {
		voters[p.ID] = p.RaftAddr
	}
	if len(cfg.Peers) > 0 {
		if _, ok := voters[cfg.ID]; !ok {
			ln.Close()
			fsm.Close()
			return nil, fmt.Errorf("replica %q is not among the peers %v", cfg.ID, cfg.Peers)
		}
	}
	node, err := startRaft(RaftConfig{
		Dir: filepath.Join(cfg.Dir, "raft"), ID: cfg.ID, Listen: cfg.RaftListen,
		Bootstrap: true, Voters: voters, Secret: cfg.Secret, Logf: cfg.Logf, LogOutput: cfg.LogOutput,
		SyncEvery: cfg.SyncEvery,
	}, fsm)
	if err != nil {
		ln.Close()
		fsm.Close()
		return nil, err
	}
	s := &Service{
		cfg: cfg, fsm: fsm, node: node, ln: ln,
		live: newLiveness(), sessions: newSessions(), leases: newDirLeases(),
		files: newFileLeases(), acks: newLeaseAcks(), opens: newOpenTable(), convs: newConversions(),
		fences:   fence.NewLog(fence.DefaultKeep),
		nfsHeads: newNFSHeads(),
		flaps:    &flapCounter{fails: map[uint32][]time.Time{}, logged: map[uint32]bool{}, logf: cfg.Logf},
		storage:  &storageClients{secret: cfg.Secret, clients: map[string]*rpc.Client{}},
		stop:     make(chan struct{}),
	}
	if err := s.waitReady(); err != nil {
		s.Close()
		return nil, err
	}
	s.srv = &rpc.Server{Name: "meta", Secret: cfg.Secret, Handler: s.handle, Logf: cfg.Logf, Observer: servedMetrics,
		PollNext: cfg.PollNext}
	s.wg.Add(7)
	go func() { defer s.wg.Done(); s.leadershipLoop() }()
	go func() { defer s.wg.Done(); s.failureLoop() }()
	go func() { defer s.wg.Done(); s.srv.Serve(ln) }()
	go func() { defer s.wg.Done(); s.gcLoop() }()
	go func() { defer s.wg.Done(); s.orphanLoop() }()
	go func() { defer s.wg.Done(); s.lockLoop() }()
	go func() { defer s.wg.Done(); s.ecRepairLoop() }()
	return s, nil
}

// waitReady waits until some replica leads. A replica that leads makes
// itself ready (takeOver) before serving; a follower serves only
// redirections to the leader.
func (s *Service) waitReady() error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		if addr, _ := s.node.raft.LeaderWithID(); addr != "" {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("no metadata replica became Raft leader within 60 s (are a majority of the peers running?)")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s.node.raft.State() == raft.Leader {
		return s.takeOver()
	}
	return nil
}

// takeOver readies a new leader: it waits until every entry committed
// before its election is applied, and creates the root directory of a new
// file system.
func (s *Service) takeOver() error {
	if err := s.node.raft.Barrier(time.Minute).Error(); err != nil {
		return fmt.Errorf("catching up with the raft log: %w", err)
	}
	if _, ok, err := get(s.fsm.db, inoKey(proto.RootIno)); err != nil {
		return err
	} else if !ok {
		init := initReq{Stripe: s.cfg.DefaultStripe, InlineLimit: s.cfg.InlineLimit}
		if _, err := s.propose(opInitRoot, init.Encode); err != nil {
			return fmt.Errorf("creating the root directory: %w", err)
		}
	} else if _, ok, err := get(s.fsm.db, keyQuotaInit); err != nil {
		return err
	} else if !ok {
		// A file system made before quotas were kept: sum its usage.
		if _, err := s.propose(opQuotaInit, func(*wire.Enc) {}); err != nil {
			return fmt.Errorf("summing quota usage: %w", err)
		}
	}
	if _, ok, _ := get(s.fsm.db, inoKey(proto.RootIno)); ok && s.fsm.inlineLimit != s.cfg.InlineLimit {
		s.cfg.Logf("meta: this file system keeps files up to %d bytes inline, as it was created; the inline limit of %d given now applies to new file systems only",
			s.fsm.inlineLimit, s.cfg.InlineLimit)
	}
	now := time.Now()
	s.leases.reset(now)
	s.files.reset(now)
	s.opens.reset()
	s.acks.reset()
	s.leaderSince.Store(time.Now().UnixNano())
	s.serving.Store(true)
	return nil
}

// leadershipLoop follows Raft's leadership: a replica that wins an
// election takes over, one that loses it stops serving at once.
func (s *Service) leadershipLoop() {
	s.every(20*time.Millisecond, func() {
		leader := s.node.raft.State() == raft.Leader
		switch {
		case leader && !s.serving.Load():
			if err := s.takeOver(); err != nil {
				s.logf("taking over as leader: %v", err)
			} else {
				s.logf("replica %s leads the metadata service", s.cfg.ID)
			}
		case !leader && s.serving.Load():
			s.serving.Store(false)
			s.logf("replica %s no longer leads", s.cfg.ID)
		}
	})
}

// Leading reports whether this replica leads and serves.
func (s *Service) Leading() bool { return s.serving.Load() }

// leaderAddr is the client address of the current leader, if known.
func (s *Service) leaderAddr() string {
	_, id := s.node.raft.LeaderWithID()
	for _, p := range s.cfg.Peers {
		if p.ID == string(id) {
			return p.Addr
		}
	}
	return ""
}

// Addr is the address the service listens on.
func (s *Service) Addr() string { return s.ln.Addr().String() }

// Close stops serving and closes the stores.
func (s *Service) Close() {
	select {
	case <-s.stop:
		return
	default:
	}
	close(s.stop)
	if s.srv != nil {
		s.srv.Close()
	} else {
		s.ln.Close()
	}
	s.wg.Wait()
	s.storage.close()
	s.node.close()
	s.fsm.Close()
}

// propose commits a command through Raft and returns the reply it produced.
func (s *Service) propose(op uint16, payload func(*wire.Enc)) ([]byte, error) {
	reply, _, err := s.proposeAt(op, payload)
	return reply, err
}

// proposeAt is propose that also returns the command's log index.
func (s *Service) proposeAt(op uint16, payload func(*wire.Enc)) ([]byte, uint64, error) {
	cmd := encodeCommand(op, time.Now().UnixNano(), payload)
	f := s.node.raft.Apply(cmd, 30*time.Second)
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return nil, 0, rpc.Errorf(syscall.EAGAIN, "metadata replica %s is not the leader: %v", s.cfg.ID, err)
		}
		return nil, 0, rpc.Errorf(syscall.EIO, "raft: %v", err)
	}
	res, _ := f.Response().(*result)
	if res == nil {
		return nil, 0, rpc.Errorf(syscall.EIO, "raft returned no result")
	}
	if len(res.files) > 0 {
		s.afterFileChange(res.files, res.session, f.Index())
	}
	return res.reply, f.Index(), res.err
}

func (s *Service) logf(format string, args ...any) { s.cfg.Logf(format, args...) }
