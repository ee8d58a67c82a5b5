// Package client is the TandemFS client library: it sends namespace
// operations to the metadata service and moves file data directly between
// the application and the storage targets, in parallel over a file's
// stripe. The FUSE adapter (package fuse) is a thin layer over it.
package client

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"tandemfs/internal/diskcache"
	"tandemfs/internal/epoch"
	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
	"tandemfs/internal/wire"
)

// Config says how to reach the cluster.
type Config struct {
	// MetaAddr lists the metadata replicas, comma-separated; calls go to
	// the leader, found by trying them in turn.
	MetaAddr string
	Secret   rpc.Secret
	// GiveUp is how long an operation keeps retrying while a service is
	// unreachable before failing with EIO (default 120 s; negative:
	// forever, like an NFS hard mount).
	GiveUp time.Duration
	// BlockCacheBytes bounds the block cache (blockcache.go): 0 is
	// DefaultBlockCacheBytes, negative turns it off.
	BlockCacheBytes int64
	// DiskCacheDir, if set, keeps file blocks in that directory on the
	// client's local disk across mounts, up to DiskCacheBytes
	// (diskcache.go; tandem mount --cache-dir).
	DiskCacheDir   string
	DiskCacheBytes int64
	// CacheDirectIO lets the block cache answer O_DIRECT reads and keep
	// small O_DIRECT writes. Off (the default), O_DIRECT means what it
	// says: every read and write goes to the storage targets, which is
	// what the papers' IOzone -I measures.
	CacheDirectIO bool
	// CacheWrites keeps what buffered writes write in the block cache,
	// whatever their size, as a server's page cache keeps it: for an NFS
	// gateway, whose clients read back what they (or others) wrote there.
	// A FUSE mount leaves that to the kernel's page cache.
	CacheWrites bool
	// PrefaultBlockCache maps the whole block cache and has the kernel
	// back it with memory at start, in the background, instead of as
	// blocks first come in: an NFS gateway head, standby or newly
	// active, then serves its first gigabyte as fast as the next.
	PrefaultBlockCache bool
	Logf               func(format string, args ...any)
}

// Client is a connection to one TandemFS cluster. It is safe for
// concurrent use.
type Client struct {
	cfg Config
	// unanswered: targets of erasure-coded shards that did not answer
	// lately, read around and written without for a while (ecshard.go).
	unanswered suspects
	// shardReads is how long shard reads take of late, for the delay
	// after which a read is hedged (ecread.go).
	shardReads latencyAverage
	// shardWrites likewise, for the grace a stripe's write gives its
	// last shards (ecwrite.go).
	shardWrites latencyAverage
	metas       []*rpc.Client // one per metadata replica
	leader      atomic.Int32  // index in metas of the replica that answered last
	session     uint64

	quotas quotaGate // what this client knows of the limited quotas (quota.go)

	mapMu   sync.RWMutex
	cmap    *proto.ClusterMap
	chains  map[uint32]proto.Chain
	targets map[uint32]proto.Target
	servers map[uint32]proto.Server

	storageMu sync.Mutex
	storage   map[string]*rpc.Client

	// epochs end storage calls routed by a chain version that is over;
	// slowCalls counts calls waiting over a second, which makes the
	// background loop reload the map often (a server may have hung).
	epochs    epoch.Set
	slowCalls atomic.Int32
	// retryLog keeps an outage that stalls many calls at once from
	// logging one line per call.
	retryLog logLimiter

	filesMu sync.Mutex
	files   map[uint64]*fileState
	// opensGen counts changes of the files open here, as reported to
	// the metadata leader (opens.go).
	opensGen atomic.Uint64
	locks    lockBook // owners that may hold file locks (locks.go)

	ns         nsCache          // inodes and entries learnt, kept current by watchLoop
	leases     *leaseTable      // directories this client knows every name of (leases.go)
	fileLeases *fileLeaseTable  // files this client opens without asking (fileleases.go)
	blocks     *blockCache      // small reads answered from memory (blockcache.go)
	disk       *diskcache.Cache // blocks kept on local disk across mounts (diskcache.go); nil: none
	pages      pageVersions     // when the kernel may keep a file's pages (kernelpages.go)
	metaCalls  atomic.Uint64    // calls to the metadata service, watches aside
	inv        atomic.Pointer[Invalidator]

	stop chan struct{}
	wg   sync.WaitGroup
}

// New connects to the metadata service and loads the cluster map.
func New(cfg Config) (*Client, error) {
	if cfg.GiveUp == 0 {
		cfg.GiveUp = 120 * time.Second
	}
	if cfg.Logf == nil {
		cfg.Logf = log.Printf
	}
	if cfg.BlockCacheBytes == 0 {
		cfg.BlockCacheBytes = DefaultBlockCacheBytes
	}
	var sid [8]byte
	rand.Read(sid[:])
	c := &Client{
		cfg:        cfg,
		session:    binary.LittleEndian.Uint64(sid[:]) | 1,
		storage:    map[string]*rpc.Client{},
		files:      map[uint64]*fileState{},
		leases:     newLeaseTable(),
		fileLeases: newFileLeaseTable(),
		blocks:     newBlockCache(cfg.BlockCacheBytes),
		stop:       make(chan struct{}),
	}
	for _, addr := range strings.Split(cfg.MetaAddr, ",") {
		if addr = strings.TrimSpace(addr); addr != "" {
			m := rpc.NewClient(addr, cfg.Secret)
			m.Observer = metaCallMetrics
			c.metas = append(c.metas, m)
		}
	}
	if len(c.metas) == 0 {
		return nil, fmt.Errorf("no metadata service address given")
	}
	if err := c.refreshMap(); err != nil {
		c.closeMetas()
		return nil, fmt.Errorf("metadata service %s: %w", cfg.MetaAddr, err)
	}
	if cfg.DiskCacheDir != "" {
		disk, err := diskcache.Open(cfg.DiskCacheDir, cfg.DiskCacheBytes)
		if err != nil {
			c.closeMetas()
			return nil, err
		}
		c.disk = disk
	}
	c.keepalive()
	c.wg.Add(2)
	go c.background()
	go c.watchLoop()
	if cfg.PrefaultBlockCache && c.blocks.enabled() {
		go func() {
			start := time.Now()
			if c.blocks.prefault() {
				c.cfg.Logf("client: block cache of %d MiB in memory after %.1f s", cfg.BlockCacheBytes>>20, time.Since(start).Seconds())
			}
		}()
	}
	return c, nil
}

// inBackground runs fn in a goroutine that Close waits for, unless the
// client is closing already (Close may be waiting on c.wg then).
func (c *Client) inBackground(fn func()) {
	select {
	case <-c.stop:
		return
	default:
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		fn()
	}()
}

// Close stops background work and closes connections.
func (c *Client) Close() {
	select {
	case <-c.stop:
		return
	default:
	}
	close(c.stop)
	c.wg.Wait()
	if c.disk != nil {
		if err := c.disk.Close(); err != nil {
			c.cfg.Logf("client: closing the disk cache: %v (the next mount starts it empty)", err)
		}
	}
	c.closeMetas()
	c.storageMu.Lock()
	for _, s := range c.storage {
		s.Close()
	}
	c.storageMu.Unlock()
}

// Session identifies this client to the metadata service (for files it
// keeps open after they were unlinked).
func (c *Client) Session() uint64 { return c.session }

// MetaCalls counts the calls this client made to the metadata service
// (watch requests aside), to see what its caches save.
func (c *Client) MetaCalls() uint64 { return c.metaCalls.Load() }

// Watching reports whether the client follows the metadata leader's
// change stream, so that its namespace cache may answer for long.
func (c *Client) Watching() bool { return c.ns.watching() }

// InlineLimit is the largest file size kept inline in the metadata.
func (c *Client) InlineLimit() uint32 {
	c.mapMu.RLock()
	defer c.mapMu.RUnlock()
	return c.cmap.InlineLimit
}

func (c *Client) background() {
	defer c.wg.Done()
	keep := time.NewTicker(10 * time.Second)
	refresh := time.NewTicker(5 * time.Second)
	watch := time.NewTicker(250 * time.Millisecond)
	defer keep.Stop()
	defer refresh.Stop()
	defer watch.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-keep.C:
			c.keepalive()
		case <-refresh.C:
			c.refreshMap()
		case <-watch.C:
			// Storage calls are stuck: learn of a failover as soon as
			// the metadata leader commits it.
			if c.slowCalls.Load() > 0 {
				c.refreshMap()
			}
		}
	}
}

func (c *Client) closeMetas() {
	for _, m := range c.metas {
		m.Close()
	}
}

// callLeader calls the replica believed to lead; on a transport failure
// or a "not the leader" answer it moves on to the next replica, so a
// retry reaches the new leader after a failover.
func (c *Client) callLeader(op uint16, enc func(*wire.Enc), dec func(*wire.Dec) error) error {
	return c.callLeaderContext(context.Background(), op, enc, dec)
}

func (c *Client) callLeaderContext(ctx context.Context, op uint16, enc func(*wire.Enc), dec func(*wire.Dec) error) error {
	i := int(c.leader.Load()) % len(c.metas)
	if op != proto.OpWatch {
		c.metaCalls.Add(1)
	}
	err := c.metas[i].CallContext(ctx, op, enc, dec)
	if err != nil && retryable(err) && len(c.metas) > 1 {
		c.leader.CompareAndSwap(int32(i), int32((i+1)%len(c.metas)))
	}
	return err
}

func (c *Client) keepalive() {
	r := proto.InoReq{Session: c.session}
	c.callLeader(proto.OpSessionKeepalive, r.Encode, nil)
}

func (c *Client) refreshMap() error {
	var m proto.ClusterMap
	var err error
	for range c.metas { // one pass over the replicas, no waiting
		err = c.callLeader(proto.OpClusterMap, nil, func(d *wire.Dec) error { m.Decode(d); return nil })
		if err == nil || !retryable(err) {
			break
		}
	}
	if err != nil {
		return err
	}
	chains := make(map[uint32]proto.Chain, len(m.Chains))
	for _, ch := range m.Chains {
		chains[ch.ID] = ch
	}
	targets := make(map[uint32]proto.Target, len(m.Targets))
	for _, t := range m.Targets {
		targets[t.ID] = t
	}
	servers := make(map[uint32]proto.Server, len(m.Servers))
	for _, s := range m.Servers {
		servers[s.ID] = s
	}
	c.mapMu.Lock()
	c.cmap, c.chains, c.targets, c.servers = &m, chains, targets, servers
	c.mapMu.Unlock()
	c.epochs.Update(m.Chains)
	return nil
}

// ClusterMap returns the cluster map as last loaded.
func (c *Client) ClusterMap() proto.ClusterMap {
	c.mapMu.RLock()
	defer c.mapMu.RUnlock()
	return *c.cmap
}

// route finds where chain id's head target lives.
func (c *Client) route(chainID uint32) (proto.Routing, *rpc.Client, error) {
	c.mapMu.RLock()
	ch, ok := c.chains[chainID]
	var addr string
	var head uint32
	if ok {
		head, ok = ch.Head()
		if t, found := c.targets[head]; ok && found {
			addr = c.servers[t.Server].Addr
		}
	}
	c.mapMu.RUnlock()
	if addr == "" {
		return proto.Routing{}, nil, rpc.Errorf(syscall.EIO, "chain %d has no reachable target in the cluster map", chainID)
	}
	return proto.Routing{Target: head, Chain: chainID, Version: ch.Version}, c.storageClient(addr), nil
}

func (c *Client) storageClient(addr string) *rpc.Client {
	c.storageMu.Lock()
	defer c.storageMu.Unlock()
	s, ok := c.storage[addr]
	if !ok {
		s = rpc.NewClient(addr, c.cfg.Secret)
		s.MaxIdle = 64
		s.Observer = storageCallMetrics
		c.storage[addr] = s
	}
	return s
}

// retry runs call until it succeeds, fails with an answer from a server,
// or the service stays unreachable for longer than GiveUp. Servers that
// are restarting or failing over thus cost a delay, not an error.
func (c *Client) retry(what string, call func() error) error {
	deadline := time.Now().Add(c.cfg.GiveUp)
	backoff := 50 * time.Millisecond
	for attempt := 0; ; attempt++ {
		err := call()
		if err == nil || !retryable(err) {
			return err
		}
		if c.cfg.GiveUp > 0 && time.Now().After(deadline) {
			c.cfg.Logf("%s: giving up after %v: %v", what, c.cfg.GiveUp, err)
			return rpc.Errorf(syscall.EIO, "%s: %v", what, err)
		}
		if attempt == 3 && c.retryLog.allow() {
			c.cfg.Logf("%s: %v; retrying", what, err)
		}
		select {
		case <-c.stop:
			return rpc.Errorf(syscall.EIO, "%s: client closed", what)
		case <-time.After(backoff):
		}
		// Retry often: a failover completes in a second or two, and each
		// wasted backoff is a stall every application sees.
		if backoff < 250*time.Millisecond {
			backoff *= 2
		}
	}
}

// retryable errors are transport failures, "not the leader" or "cannot
// serve now" answers (EAGAIN), and "routed by an old chain version"
// (ESTALE: the caller reloads the map).
func retryable(err error) bool {
	if rpc.IsNetError(err) {
		return true
	}
	return errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.ESTALE)
}

// metaCall calls the metadata service, retrying while it is unreachable.
func (c *Client) metaCall(op uint16, enc func(*wire.Enc), dec func(*wire.Dec) error) error {
	return c.retry("metadata service", func() error { return c.callLeader(op, enc, dec) })
}

func decodeInode(n *proto.Inode) func(*wire.Dec) error {
	return func(d *wire.Dec) error { n.Decode(d); return nil }
}

// inodeCall calls op and returns the inode it answers with, remembering
// it in the attribute cache.
func (c *Client) inodeCall(op uint16, enc func(*wire.Enc)) (*proto.Inode, error) {
	var n proto.Inode
	wm := c.ns.watermark()
	if err := c.metaCall(op, enc, decodeInode(&n)); err != nil {
		return nil, err
	}
	c.ns.putInode(&n, wm)
	return &n, nil
}

// logLimiter allows one log line per second.
type logLimiter struct{ last atomic.Int64 }

func (l *logLimiter) allow() bool {
	now := time.Now().UnixNano()
	last := l.last.Load()
	return now-last >= int64(time.Second) && l.last.CompareAndSwap(last, now)
}

// WarmStorage opens conns connections to every storage server in the
// cluster map, in the background, so that the first reads and writes
// after a mount do not each wait for a dial and a handshake.
func (c *Client) WarmStorage(conns int) {
	c.mapMu.RLock()
	addrs := make([]string, 0, len(c.servers))
	for _, s := range c.servers {
		addrs = append(addrs, s.Addr)
	}
	c.mapMu.RUnlock()
	for _, a := range addrs {
		c.storageClient(a).Warm(conns)
	}
}
