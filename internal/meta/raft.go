package meta

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"tandemfs/internal/rpc"
)

// raftStreamLayer carries Raft traffic over connections authenticated with
// the cluster secret, like every other TandemFS connection.
type raftStreamLayer struct {
	*rpc.AuthListener
	secret rpc.Secret
}

func (s *raftStreamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return rpc.DialAuth(string(addr), s.secret, timeout)
}

// raftNode bundles a Raft instance with the stores it owns.
type raftNode struct {
	raft      *raft.Raft
	transport *raft.NetworkTransport
	store     *logStore
}

// RaftConfig says where this metadata replica keeps its log and how it
// reaches its peers.
type RaftConfig struct {
	Dir       string // log, stable store and snapshots
	ID        string // this replica's ID
	Listen    string // Raft address to listen on
	Advertise string // Raft address peers use (default Listen)
	Bootstrap bool   // form a new cluster if no state exists
	// Voters is the initial configuration (ID → Raft address) when
	// bootstrapping; empty means this node alone.
	Voters    map[string]string
	Secret    rpc.Secret
	Logf      func(string, ...any)
	LogOutput io.Writer
	Heartbeat time.Duration // default 500 ms
	Elections time.Duration // default 1 s
	SnapEvery uint64        // log entries between snapshots (default 65536)
	// SyncEvery is how often the log is fsynced; commits reach the
	// operating system at once (see lazySyncFS). <= 0: fsync every commit.
	SyncEvery time.Duration
}

func startRaft(cfg RaftConfig, fsm *FSM) (*raftNode, error) {
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, err
	}
	if cfg.Advertise == "" {
		cfg.Advertise = cfg.Listen
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("raft listen %s: %w", cfg.Listen, err)
	}
	adv, err := net.ResolveTCPAddr("tcp", cfg.Advertise)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("raft advertise address %q: %w", cfg.Advertise, err)
	}
	stream := &raftStreamLayer{AuthListener: &rpc.AuthListener{Listener: &advertisedListener{ln, adv}, Secret: cfg.Secret, Logf: cfg.Logf}, secret: cfg.Secret}
	out := cfg.LogOutput
	if out == nil {
		out = os.Stderr
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Warn, Output: out})
	transport := raft.NewNetworkTransportWithLogger(stream, 8, 10*time.Second, logger)

	logf := cfg.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	store, err := openLogStore(filepath.Join(cfg.Dir, "log"), cfg.SyncEvery, logf)
	if err != nil {
		transport.Close()
		return nil, err
	}
	fsm.SetLogSync(store.syncNow)
	logs, err := raft.NewLogCache(4096, store)
	if err != nil {
		return nil, err
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.Dir, 2, logger)
	if err != nil {
		return nil, fmt.Errorf("opening raft snapshots: %w", err)
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.Logger = logger
	rc.HeartbeatTimeout = orDuration(cfg.Heartbeat, 500*time.Millisecond)
	rc.ElectionTimeout = orDuration(cfg.Elections, time.Second)
	rc.LeaderLeaseTimeout = rc.HeartbeatTimeout / 2
	rc.CommitTimeout = 5 * time.Millisecond
	// MaxAppendEntries stays at the library's 64: raft allocates a batch
	// of that many pointers for every commit it applies, and at 512 that
	// was 4 KiB of garbage per create, 40 % of the leader's allocations
	// (docs/benchmarks.md, 2026-11-27 10:20).
	rc.SnapshotThreshold = 65536
	if cfg.SnapEvery > 0 {
		rc.SnapshotThreshold = cfg.SnapEvery
	}
	rc.TrailingLogs = 10240
	// Pebble keeps the applied state across restarts (see FSM), so a
	// restart replays only the log tail instead of reloading a snapshot.
	rc.NoSnapshotRestoreOnStart = true

	if cfg.Bootstrap {
		has, err := raft.HasExistingState(logs, store, snaps)
		if err != nil {
			return nil, err
		}
		if !has {
			conf := raft.Configuration{Servers: []raft.Server{{
				ID: rc.LocalID, Address: raft.ServerAddress(cfg.Advertise), Suffrage: raft.Voter,
			}}}
			if len(cfg.Voters) > 0 {
				// Every replica bootstraps with the same voters; Raft
				// then elects one of them.
				conf.Servers = nil
				for id, addr := range cfg.Voters {
					conf.Servers = append(conf.Servers, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(addr), Suffrage: raft.Voter})
				}
			}
			if err := raft.BootstrapCluster(rc, logs, store, snaps, transport, conf); err != nil {
				return nil, fmt.Errorf("bootstrapping raft: %w", err)
			}
		}
	}
	r, err := raft.NewRaft(rc, fsm, logs, store, snaps, transport)
	if err != nil {
		store.Close()
		transport.Close()
		return nil, fmt.Errorf("starting raft: %w", err)
	}
	return &raftNode{raft: r, transport: transport, store: store}, nil
}

func (n *raftNode) close() {
	n.raft.Shutdown().Error()
	n.transport.Close()
	n.store.Close()
}

func orDuration(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// advertisedListener reports the advertised address as its own, which is
// what the Raft transport tells peers.
type advertisedListener struct {
	net.Listener
	adv net.Addr
}

func (l *advertisedListener) Addr() net.Addr { return l.adv }
