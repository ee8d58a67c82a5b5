package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"log"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
)

// Config configures a storage server.
type Config struct {
	// Listen is the TCP address to serve on, e.g. ":8003".
	Listen string
	// AdvertiseAddr is the address clients are told to use; by default
	// the listen address, or if that names no host, the local address
	// the server reaches the metadata service from.
	AdvertiseAddr string
	// MetaAddrs are the metadata service replicas; any of them may answer.
	MetaAddrs []string
	// PrivateMetaAddrs are the same replicas on the private network, if
	// the servers have one: heartbeats go over both, so that losing one
	// network is not mistaken for a failed server.
	PrivateMetaAddrs []string
	// Rack labels the server's failure domain above itself, for
	// erasure-coded files that spread their shards one per rack.
	Rack   string
	Secret rpc.Secret
	// TargetDirs are the target directories to serve; they must exist.
	TargetDirs []string
	// StateDir holds server.uuid, the server's identity. Default: the
	// first target directory.
	StateDir string
	// HeartbeatInterval is the time between heartbeats (default 500 ms,
	// a tenth of the default failure timeout).
	HeartbeatInterval time.Duration
	// RetryInterval is the time between registration attempts while the
	// metadata service is unreachable (default 3 s).
	RetryInterval time.Duration
	// FS is the file system under the targets (default: the real one); a
	// FaultFS here lets tests fail the server's disks.
	FS FS
	// CacheReports, if set, reports the flash caches under the targets
	// (internal/flashcache, which FS then is), by target directory; the
	// server fills in the target IDs and sends them with its heartbeats.
	CacheReports func() []proto.CacheReport
	// MaxOpenChunks bounds each target's open-chunk cache.
	MaxOpenChunks int
	// ScrubEvery is the time between scrubs (scrub.go): passes that read
	// back and verify every stored block. 0: only when asked for
	// (OpScrubStart, `tandem scrub`).
	ScrubEvery time.Duration
	// ScrubRate bounds a scrub's reads, in bytes a second (0: no bound).
	ScrubRate int64
	// ResyncShare is the share of the bytes read and written on this
	// server that a running resync is guaranteed against clients' I/O
	// (share.go; the command's default is DefaultResyncShare). 0: no
	// pacing, clients and resyncs compete freely.
	ResyncShare float64
	// Logf receives log lines; default the standard logger.
	Logf func(format string, args ...any)
}

// Service is a running storage server.
type Service struct {
	cfg     Config
	uuid    string
	logf    func(format string, args ...any)
	targets []*Target // in the order of cfg.TargetDirs

	byID     atomic.Pointer[map[uint32]*Target]
	serverID atomic.Uint32

	ln       net.Listener
	addr     string // advertised
	srv      *rpc.Server
	metas    []*rpc.Client
	metaNext atomic.Int32 // replica to try first
	private  []*rpc.Client

	cs        chainState
	resyncs   resyncs
	share     *resyncShare // paces client I/O while resyncs copy
	scrubs    scrubs
	scrubNow  chan struct{} // a scrub asked for (OpScrubStart); buffered, 1
	leaseWarn sync.Once
	failed    failedTargets
	lost      lostChains // chains holding lost chunks (lostchunks.go)
	known     knownVersions
	dirty     dirtyTracker
	stop      chan struct{}
	wg        sync.WaitGroup
	regOnce   sync.Once
	reg       chan struct{} // closed at the first successful registration
	closeOnce sync.Once

	large *largeWrites // holds extraProcs while large writes arrive

	// procsMu guards procsHeld, whether this server holds extraProcs,
	// and procsVersion, the map it decided that from (procs.go).
	procsMu      sync.Mutex
	procsHeld    bool
	procsVersion uint64
}

// Start opens the targets, starts serving on cfg.Listen, and registers with
// the metadata service in the background (retrying until it answers), then
// heartbeats. Targets that were registered before are served at once under
// their recorded IDs.
func Start(cfg Config) (*Service, error) {
	s, err := newService(cfg)
	if err != nil {
		return nil, err
	}
	if s.ln, err = rpc.Listen(cfg.Listen); err != nil {
		s.closeTargets()
		return nil, fmt.Errorf("cannot listen on %s: %w", cfg.Listen, err)
	}
	s.addr = advertiseAddr(cfg, s.ln.Addr())
	s.srv = &rpc.Server{Name: "storage", Secret: cfg.Secret, Handler: s.handle, Logf: func(f string, a ...any) { s.logf("storage: "+f, a...) }, Observer: servedMetrics}
	for _, a := range cfg.MetaAddrs {
		s.metas = append(s.metas, metaClient(a, cfg.Secret))
	}
	for _, a := range cfg.PrivateMetaAddrs {
		s.private = append(s.private, metaClient(a, cfg.Secret))
	}
	s.wg.Add(4)
	go s.scrubLoop()
	if len(s.private) > 0 {
		s.wg.Add(1)
		go s.heartbeatPrivate()
	}
	go s.resyncLoop()
	go func() {
		defer s.wg.Done()
		if err := s.srv.Serve(s.ln); err != nil {
			s.logf("storage: serving on %s stopped: %v", s.ln.Addr(), err)
		}
	}()
	go s.run()
	s.logf("storage: server %s serving %d target(s) on %s (advertised as %s)", s.uuid, len(s.targets), s.ln.Addr(), s.addr)
	return s, nil
}

// newService checks cfg and opens the targets and the server identity,
// without touching the network.
func newService(cfg Config) (*Service, error) {
	switch {
	case cfg.Listen == "":
		return nil, errors.New("storage: no listen address")
	case len(cfg.MetaAddrs) == 0:
		return nil, errors.New("storage: no metadata service address")
	case len(cfg.Secret) == 0:
		return nil, errors.New("storage: no cluster secret")
	case len(cfg.TargetDirs) == 0:
		return nil, errors.New("storage: no target directory")
	case cfg.ResyncShare < 0 || cfg.ResyncShare >= 1:
		return nil, fmt.Errorf("storage: resync share %g: must be at least 0 and below 1", cfg.ResyncShare)
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = 500 * time.Millisecond
	}
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = 3 * time.Second
	}
	if cfg.FS == nil {
		cfg.FS = OSFS{}
	}
	s := &Service{cfg: cfg, logf: cfg.Logf, stop: make(chan struct{}), reg: make(chan struct{}), scrubNow: make(chan struct{}, 1)}
	s.cs.stores = map[uint32]*storeSlot{}
	s.cs.peers = map[string]*rpc.Client{}
	s.cs.inflight = newChangesInFlight()
	s.resyncs.running = map[[2]uint32]*resyncJob{}
	s.resyncs.done = map[[2]uint32]uint32{}
	s.share = newResyncShare(cfg.ResyncShare)
	s.large = newLargeWrites(largeWriteLinger)
	s.dirty.init(time.Now)
	if s.logf == nil {
		s.logf = log.Printf
	}
	seen := map[string]bool{}
	for _, dir := range cfg.TargetDirs {
		abs, err := filepath.Abs(dir)
		if err != nil {
			s.closeTargets()
			return nil, fmt.Errorf("storage: target %s: %w", dir, err)
		}
		if seen[abs] {
			s.closeTargets()
			return nil, fmt.Errorf("storage: target %s given twice", dir)
		}
		seen[abs] = true
		tg, err := OpenTarget(abs, Options{FS: cfg.FS, MaxOpenChunks: cfg.MaxOpenChunks, Logf: s.logf})
		if err != nil {
			s.closeTargets()
			return nil, fmt.Errorf("storage: %w", err)
		}
		s.targets = append(s.targets, tg)
	}
	state := cfg.StateDir
	if state == "" {
		state = s.targets[0].Dir()
	}
	var err error
	if s.uuid, err = loadServerUUID(cfg.FS, state); err != nil {
		s.closeTargets()
		return nil, fmt.Errorf("storage: server identity in %s: %w", state, err)
	}
	s.indexTargets()
	if err := s.loadLost(); err != nil {
		s.closeTargets()
		return nil, err
	}
	return s, nil
}

// loadServerUUID reads dir/server.uuid, creating it on first start, so a
// restarted server registers under the same identity.
func loadServerUUID(fsys FS, dir string) (string, error) {
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "server.uuid")
	b, err := ReadFile(fsys, path)
	if err == nil {
		id := strings.TrimSpace(string(b))
		if id == "" || len(id) > 64 {
			return "", fmt.Errorf("%s: not a server UUID", path)
		}
		return id, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	id := newUUID()
	return id, WriteFileAtomic(fsys, path, []byte(id+"\n"))
}

// indexTargets rebuilds the routing table from the targets' IDs.
func (s *Service) indexTargets() {
	m := make(map[uint32]*Target, len(s.targets))
	for _, tg := range s.targets {
		if id := tg.ID(); id != 0 {
			m[id] = tg
		}
	}
	s.byID.Store(&m)
}

// target returns the target with the given ID.
func (s *Service) target(id uint32) (*Target, error) {
	if tg := (*s.byID.Load())[id]; tg != nil {
		return tg, nil
	}
	return nil, rpc.Errorf(errNoTarget, "storage server %s (%s) has no target %d", s.addr, s.uuid, id)
}

// advertiseAddr picks the address to register under.
func advertiseAddr(cfg Config, ln net.Addr) string {
	if cfg.AdvertiseAddr != "" {
		return cfg.AdvertiseAddr
	}
	host, port, _ := net.SplitHostPort(ln.String())
	if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
		return ln.String()
	}
	// Listening on every interface: use the one the metadata service is
	// reached through, which the clients most likely share.
	if c, err := net.Dial("udp", cfg.MetaAddrs[0]); err == nil {
		ip := c.LocalAddr().(*net.UDPAddr).IP
		c.Close()
		return net.JoinHostPort(ip.String(), port)
	}
	if h, err := os.Hostname(); err == nil {
		return net.JoinHostPort(h, port)
	}
	return ln.String()
}

// Addr is the address the server is registered under.
func (s *Service) Addr() string { return s.addr }

// ListenAddr is the address the server listens on.
func (s *Service) ListenAddr() net.Addr { return s.ln.Addr() }

// UUID is the server's permanent identity.
func (s *Service) UUID() string { return s.uuid }

// ServerID is the ID the metadata service assigned, 0 before registration.
func (s *Service) ServerID() uint32 { return s.serverID.Load() }

// Targets are the server's targets, in the order of Config.TargetDirs.
func (s *Service) Targets() []*Target { return s.targets }

// Registered is closed once the server has registered with the metadata
// service.
func (s *Service) Registered() <-chan struct{} { return s.reg }

// Close stops serving, heartbeating and registering, and closes the targets.
func (s *Service) Close() error {
	s.closeOnce.Do(func() {
		close(s.stop)
		if s.srv != nil {
			s.srv.Close()
		}
		s.wg.Wait()
		s.releaseProcs()
		s.large.close()
		for _, c := range append(s.metas, s.private...) {
			c.Close()
		}
		s.closePeers()
		s.closeChainStores()
		s.closeTargets()
	})
	return nil
}

func (s *Service) closeTargets() {
	for _, tg := range s.targets {
		tg.Close()
	}
}
