package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"tandemfs/internal/chunksum"
	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
	"tandemfs/internal/wire"
)

// fakeMeta is a stand-in metadata service: an rpc.Server that answers
// OpRegisterServer (the same UUIDs get the same IDs) and OpHeartbeat
// (refused for servers it does not know), recording what it received.
type fakeMeta struct {
	srv  *rpc.Server
	addr string

	mu      sync.Mutex
	ids     map[string]uint32 // server and target UUIDs → IDs
	known   map[uint32]bool   // registered server IDs
	regs    []proto.RegisterServerReq
	beats   []proto.HeartbeatReq
	nextID  uint32
	refuseN int // refuse this many registrations first
	// replicated, if set, adds chains to the map; it runs with mu held.
	replicated func(m *fakeMeta) []proto.Chain
}

// startFakeMeta starts a fake on addr; with a non-nil state it continues
// from another fake's state (a restart of the metadata service).
func startFakeMeta(t *testing.T, secret rpc.Secret, addr string, state ...*fakeMeta) *fakeMeta {
	t.Helper()
	m := &fakeMeta{ids: map[string]uint32{}, known: map[uint32]bool{}, nextID: 100}
	if len(state) > 0 {
		state[0].mu.Lock()
		for k, v := range state[0].ids {
			m.ids[k] = v
		}
		m.nextID = state[0].nextID
		state[0].mu.Unlock()
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	m.addr = ln.Addr().String()
	m.srv = &rpc.Server{Name: "fake-meta", Secret: secret, Handler: m.handle, Logf: func(string, ...any) {}}
	go m.srv.Serve(ln)
	t.Cleanup(m.srv.Close)
	return m
}

func (m *fakeMeta) id(uuid string) uint32 {
	if id, ok := m.ids[uuid]; ok {
		return id
	}
	m.nextID++
	m.ids[uuid] = m.nextID
	return m.nextID
}

func (m *fakeMeta) handle(op uint16, d *wire.Dec, e *wire.Enc) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch op {
	case proto.OpRegisterServer:
		var r proto.RegisterServerReq
		r.Decode(d)
		if err := d.Finish(); err != nil {
			return rpc.BadRequest(err)
		}
		m.regs = append(m.regs, r)
		if m.refuseN > 0 {
			m.refuseN--
			return rpc.Errorf(syscall.EAGAIN, "not the leader")
		}
		rep := proto.RegisterServerReply{ServerID: m.id(r.UUID)}
		m.known[rep.ServerID] = true
		for _, ti := range r.Targets {
			rep.TargetIDs = append(rep.TargetIDs, m.id(ti.UUID))
		}
		rep.Encode(e)
		return nil
	case proto.OpHeartbeat:
		var r proto.HeartbeatReq
		r.Decode(d)
		if err := d.Finish(); err != nil {
			return rpc.BadRequest(err)
		}
		if !m.known[r.ServerID] {
			return rpc.Errorf(syscall.ENOENT, "unknown server %d", r.ServerID)
		}
		m.beats = append(m.beats, r)
		(&proto.HeartbeatReply{MapVersion: uint64(len(m.regs)), LeaseMs: 2500}).Encode(e)
		return nil
	case proto.OpClusterMap:
		if err := d.Finish(); err != nil {
			return rpc.BadRequest(err)
		}
		// Every ID handed out is a chain of one target: enough for a
		// server that routes by chain.
		cm := proto.ClusterMap{Version: uint64(len(m.regs))}
		for _, id := range m.ids {
			cm.Chains = append(cm.Chains, proto.Chain{ID: id, Version: 1, Targets: []uint32{id}, States: []uint8{0}, SinceMs: []int64{0}})
		}
		if m.replicated != nil {
			cm.Chains = append(cm.Chains, m.replicated(m)...)
		}
		cm.Encode(e)
		return nil
	}
	return rpc.Errorf(syscall.ENOSYS, "op %d", op)
}

func (m *fakeMeta) snapshot() ([]proto.RegisterServerReq, []proto.HeartbeatReq) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]proto.RegisterServerReq(nil), m.regs...), append([]proto.HeartbeatReq(nil), m.beats...)
}

// forget makes the fake lose its state, as a metadata service restored
// from an old snapshot might.
func (m *fakeMeta) forget() {
	m.mu.Lock()
	m.known = map[uint32]bool{}
	m.mu.Unlock()
}

// logLines collects a service's log lines.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logf(format string, args ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

func (l *logLines) has(substr string) bool { return l.count(substr) > 0 }

// count is the number of lines containing substr.
func (l *logLines) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.lines {
		if strings.Contains(s, substr) {
			n++
		}
	}
	return n
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type testServer struct {
	svc    *Service
	cfg    Config
	logs   *logLines
	client *rpc.Client
}

func testConfig(t *testing.T, secret rpc.Secret, metaAddr string, targets int) Config {
	cfg := Config{
		Listen:            "127.0.0.1:0",
		MetaAddrs:         []string{metaAddr},
		Secret:            secret,
		StateDir:          t.TempDir(),
		HeartbeatInterval: 20 * time.Millisecond,
		RetryInterval:     30 * time.Millisecond,
	}
	for range targets {
		cfg.TargetDirs = append(cfg.TargetDirs, t.TempDir())
	}
	return cfg
}

func startServer(t *testing.T, cfg Config) *testServer {
	t.Helper()
	ts := &testServer{cfg: cfg, logs: &logLines{}}
	cfg.Logf = ts.logs.logf
	var err error
	if ts.svc, err = Start(cfg); err != nil {
		t.Fatal(err)
	}
	ts.client = rpc.NewClient(ts.svc.ListenAddr().String(), cfg.Secret)
	t.Cleanup(func() {
		ts.client.Close()
		ts.svc.Close()
		if t.Failed() {
			t.Logf("storage server log:\n%s", ts.logs)
		}
	})
	return ts
}

func waitRegistered(t *testing.T, svc *Service) {
	t.Helper()
	select {
	case <-svc.Registered():
	case <-time.After(10 * time.Second):
		t.Fatal("the storage server did not register")
	}
}

// startRegisteredServer starts a storage server with n targets against a
// fake metadata service, and returns both once the server has registered.
func startRegisteredServer(t *testing.T, n int) (*testServer, *fakeMeta) {
	t.Helper()
	secret, _ := rpc.NewSecret()
	meta := startFakeMeta(t, secret, "127.0.0.1:0")
	ts := startServer(t, testConfig(t, secret, meta.addr, n))
	waitRegistered(t, ts.svc)
	return ts, meta
}

func TestServerRegistersItsTargetsAndHeartbeats(t *testing.T) {
	ts, meta := startRegisteredServer(t, 2)

	regs, _ := meta.snapshot()
	r := regs[0]
	if r.UUID != ts.svc.UUID() || r.Addr != ts.svc.Addr() || r.Addr != ts.svc.ListenAddr().String() {
		t.Fatalf("registered as %q at %q; server is %q at %q", r.UUID, r.Addr, ts.svc.UUID(), ts.svc.Addr())
	}
	if len(r.Targets) != 2 {
		t.Fatalf("registered %d targets, want 2", len(r.Targets))
	}
	for i, tg := range ts.svc.Targets() {
		if r.Targets[i].UUID != tg.UUID() || r.Targets[i].Path != tg.Dir() || r.Targets[i].TotalBytes == 0 {
			t.Fatalf("target %d registered as %+v", i, r.Targets[i])
		}
		if tg.ID() == 0 {
			t.Fatalf("target %s has no ID after registration", tg.Dir())
		}
	}
	waitFor(t, "three heartbeats", func() bool { _, b := meta.snapshot(); return len(b) >= 3 })
	_, beats := meta.snapshot()
	if beats[0].ServerID != ts.svc.ServerID() || len(beats[0].Targets) != 2 || beats[0].Targets[1].FreeBytes == 0 {
		t.Fatalf("heartbeat %+v from server %d", beats[0], ts.svc.ServerID())
	}
}

func TestRestartedServerKeepsItsIdentityAndServesAtOnce(t *testing.T) {
	secret, _ := rpc.NewSecret()
	meta := startFakeMeta(t, secret, "127.0.0.1:0")
	cfg := testConfig(t, secret, meta.addr, 2)
	first := startServer(t, cfg)
	waitRegistered(t, first.svc)
	ids := []uint32{first.svc.Targets()[0].ID(), first.svc.Targets()[1].ID()}
	call(t, first.client, proto.OpChunkWrite, &proto.ChunkWriteReq{Chunk: proto.ChunkRef{Routing: proto.Routing{Target: ids[1], Chain: ids[1]}, Ino: 5}, Data: []byte("kept")})
	first.svc.Close()

	// Restart while the metadata service is down: the targets are served
	// under their recorded IDs before the server can re-register.
	meta.srv.Close()
	second := startServer(t, cfg)
	if got := readChunk(t, second.client, ids[1], 5, 0, 100); string(got) != "kept" {
		t.Fatalf("after restart read %q", got)
	}
	waitFor(t, "a log line about the unreachable metadata service", func() bool { return second.logs.has("unreachable") })

	meta2 := startFakeMeta(t, secret, meta.addr, meta)
	waitRegistered(t, second.svc)
	regs, _ := meta2.snapshot()
	if regs[0].UUID != first.svc.UUID() {
		t.Fatalf("re-registered as %s, first registered as %s", regs[0].UUID, first.svc.UUID())
	}
	for i, tg := range second.svc.Targets() {
		if regs[0].Targets[i].UUID != first.svc.Targets()[i].UUID() || tg.ID() != ids[i] {
			t.Fatalf("target %d: uuid %s id %d after restart", i, regs[0].Targets[i].UUID, tg.ID())
		}
	}
}

func TestServerRegistersAgainWhenTheMetadataServiceForgetsIt(t *testing.T) {
	ts, meta := startRegisteredServer(t, 1)
	meta.forget()
	waitFor(t, "a second registration", func() bool { r, _ := meta.snapshot(); return len(r) >= 2 })
	waitFor(t, "heartbeats after it", func() bool { _, b := meta.snapshot(); return len(b) >= 2 })
	if !ts.logs.has("registering again") {
		t.Fatalf("no log line says why the server registered again")
	}
}

func TestRegistrationTriesEveryMetadataReplica(t *testing.T) {
	secret, _ := rpc.NewSecret()
	follower := startFakeMeta(t, secret, "127.0.0.1:0")
	follower.refuseN = 1 << 30 // "not the leader", forever
	leader := startFakeMeta(t, secret, "127.0.0.1:0")
	cfg := testConfig(t, secret, follower.addr, 1)
	cfg.MetaAddrs = append(cfg.MetaAddrs, leader.addr)
	ts := startServer(t, cfg)
	waitRegistered(t, ts.svc)
	waitFor(t, "heartbeats to the leader", func() bool { _, b := leader.snapshot(); return len(b) >= 2 })
}

func TestWrongSecretIsLoggedAsSuch(t *testing.T) {
	secret, _ := rpc.NewSecret()
	other, _ := rpc.NewSecret()
	meta := startFakeMeta(t, other, "127.0.0.1:0")
	ts := startServer(t, testConfig(t, secret, meta.addr, 1))
	waitFor(t, "a log line about the secret", func() bool { return ts.logs.has("cluster secrets differ") })
}

func TestStartFailsClearly(t *testing.T) {
	secret, _ := rpc.NewSecret()
	cfg := testConfig(t, secret, "127.0.0.1:1", 1)
	cfg.TargetDirs = []string{"/nonexistent/target"}
	if _, err := Start(cfg); err == nil || !strings.Contains(err.Error(), "/nonexistent/target") {
		t.Fatalf("missing target directory: %v", err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg = testConfig(t, secret, "127.0.0.1:1", 1)
	cfg.Listen = ln.Addr().String()
	_, err = Start(cfg)
	if err == nil || !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), cfg.Listen) {
		t.Fatalf("address in use: %v", err)
	}
	// The failed start released the target: it can be opened again.
	tg, err := OpenTarget(cfg.TargetDirs[0], Options{})
	if err != nil {
		t.Fatalf("target still locked after a failed start: %v", err)
	}
	tg.Close()

	cfg = testConfig(t, secret, "127.0.0.1:1", 1)
	cfg.TargetDirs = append(cfg.TargetDirs, cfg.TargetDirs[0]+"/")
	if _, err := Start(cfg); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("same target twice: %v", err)
	}
}

// call sends one request and fails the test on an error reply.
func call(t *testing.T, c *rpc.Client, op uint16, req interface{ Encode(*wire.Enc) }) {
	t.Helper()
	if err := c.Call(op, req.Encode, nil); err != nil {
		t.Fatalf("op %d: %v", op, err)
	}
}

func readChunkErr(c *rpc.Client, target uint32, ino, idx uint64, off, n uint32) ([]byte, error) {
	req := proto.ChunkReadReq{Chunk: proto.ChunkRef{Routing: proto.Routing{Target: target, Chain: target}, Ino: ino, Index: idx}, Off: off, Len: n}
	var got []byte
	err := c.Call(proto.OpChunkRead, req.Encode, func(d *wire.Dec) error {
		got = append([]byte(nil), d.Bytes(proto.MaxData)...)
		return d.Err()
	})
	return got, err
}

func readChunk(t *testing.T, c *rpc.Client, target uint32, ino uint64, off, n uint32) []byte {
	t.Helper()
	got, err := readChunkErr(c, target, ino, 0, off, n)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return got
}

func TestChunkOperationsOverTCP(t *testing.T) {
	ts, _ := startRegisteredServer(t, 2)
	tid := ts.svc.Targets()[1].ID()
	c := ts.client
	ref := func(idx uint64) proto.ChunkRef {
		return proto.ChunkRef{Routing: proto.Routing{Target: tid, Chain: tid}, Ino: 77, Index: idx}
	}

	big := pattern(9, proto.MaxData)
	call(t, c, proto.OpChunkWrite, &proto.ChunkWriteReq{Chunk: ref(0), Off: 0, Data: big, Sync: true})
	call(t, c, proto.OpChunkWrite, &proto.ChunkWriteReq{Chunk: ref(0), Off: 10, Data: []byte("hello")})
	var want model
	want.write(0, big)
	want.write(10, []byte("hello"))
	got := readChunk(t, c, tid, 77, 0, proto.MaxData)
	assertSame(t, "4 MiB read over rpc", got, want)
	if got := readChunk(t, c, tid, 77, proto.MaxData-3, 100); len(got) != 3 {
		t.Fatalf("read across the chunk's end returned %d bytes, want 3", len(got))
	}

	call(t, c, proto.OpChunkTruncate, &proto.ChunkTruncateReq{Chunk: ref(0), Size: 12})
	if got := readChunk(t, c, tid, 77, 0, 100); string(got) != string(want[:12]) {
		t.Fatalf("after truncate: %q", got)
	}
	call(t, c, proto.OpChunkWrite, &proto.ChunkWriteReq{Chunk: ref(3), Data: []byte("three")})
	call(t, c, proto.OpChunkSync, &proto.ChunkSyncReq{Routing: proto.Routing{Target: tid, Chain: tid}, Ino: 77})
	call(t, c, proto.OpChunkSync, &proto.ChunkSyncReq{Routing: proto.Routing{Target: tid, Chain: tid}, Ino: 77, Indexes: []uint64{0, 3, 9}})
	call(t, c, proto.OpChunkDelete, &proto.ChunkDeleteReq{Routing: proto.Routing{Target: tid, Chain: tid}, Ino: 77, From: 1})
	if got, err := readChunkErr(c, tid, 77, 3, 0, 100); err != nil || len(got) != 0 {
		t.Fatalf("deleted chunk read %q, %v", got, err)
	}
	if got := readChunk(t, c, tid, 77, 0, 100); len(got) != 12 {
		t.Fatalf("chunk below the deleted range read %d bytes", len(got))
	}

	// Errors arrive as errnos.
	_, err := readChunkErr(c, 9999, 1, 0, 0, 10)
	if !errors.Is(err, syscall.ENODEV) || !strings.Contains(err.Error(), "9999") {
		t.Fatalf("unknown target: %v", err)
	}
	_, err = readChunkErr(c, tid, 1, 0, 0, proto.MaxData+1)
	if !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("oversized read: %v", err)
	}
	err = c.Call(proto.OpChunkDelete, func(e *wire.Enc) {
		(&proto.ChunkDeleteReq{Routing: proto.Routing{Target: tid, Chain: tid}}).Encode(e)
		e.U8(0)
	}, nil)
	if !errors.Is(err, syscall.EBADMSG) {
		t.Fatalf("trailing bytes: %v", err)
	}
	err = c.Call(proto.OpChunkWrite, func(e *wire.Enc) { e.U32(tid) }, nil)
	if !errors.Is(err, syscall.EBADMSG) {
		t.Fatalf("truncated request: %v", err)
	}
	err = c.Call(999, nil, nil)
	if !errors.Is(err, syscall.ENOSYS) {
		t.Fatalf("unknown op: %v", err)
	}

	// Corruption reaches the client as EIO.
	flipBit(t, ts.svc.Targets()[1].dataPath(77, 0), 3)
	if _, err := readChunkErr(c, tid, 77, 0, 0, 10); !errors.Is(err, syscall.EIO) {
		t.Fatalf("corrupt block: %v", err)
	}
}

func TestDiskFullReachesTheClientAsENOSPC(t *testing.T) {
	secret, _ := rpc.NewSecret()
	meta := startFakeMeta(t, secret, "127.0.0.1:0")
	cfg := testConfig(t, secret, meta.addr, 1)
	ffs := NewFaultFS(nil)
	cfg.FS = ffs
	ts := startServer(t, cfg)
	waitRegistered(t, ts.svc)
	tid := ts.svc.Targets()[0].ID()
	ffs.Inject(Fault{Ops: OpWrite, Match: isData, Err: syscall.ENOSPC})
	err := ts.client.Call(proto.OpChunkWrite, (&proto.ChunkWriteReq{Chunk: proto.ChunkRef{Routing: proto.Routing{Target: tid, Chain: tid}, Ino: 1}, Data: []byte("x")}).Encode, nil)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write on a full disk: %v", err)
	}
}

// readSentChunk reads with OpChunkReadSent: the checksum entries and the
// bytes the server sent from the chunk's file.
func readSentChunk(c *rpc.Client, target uint32, ino, idx uint64, off, n uint32) (sums, data []byte, err error) {
	req := proto.ChunkReadReq{Chunk: proto.ChunkRef{Routing: proto.Routing{Target: target, Chain: target}, Ino: ino, Index: idx}, Off: off, Len: n}
	sums, data = make([]byte, proto.MaxSums), make([]byte, n)
	nh, nd, err := c.CallReadTail(context.Background(), proto.OpChunkReadSent, req.Encode, sums, data)
	return sums[:nh], data[:nd], err
}

// OpChunkReadSent sends the bytes unread, with the checksum entries that
// vouch for them: the reader's check passes on good data, fails on a
// damaged block (which the server, not reading it, does not notice), and
// the read stops at the chunk's end like OpChunkRead.
func TestSentReadsCarryTheChecksumsThatVouchForTheBytes(t *testing.T) {
	ts, _ := startRegisteredServer(t, 1)
	tid := ts.svc.Targets()[0].ID()
	c := ts.client
	ref := proto.ChunkRef{Routing: proto.Routing{Target: tid, Chain: tid}, Ino: 78}
	data := pattern(5, 1<<20+1000)
	call(t, c, proto.OpChunkWrite, &proto.ChunkWriteReq{Chunk: ref, Data: data})

	sums, got, err := readSentChunk(c, tid, 78, 0, 64<<10, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if want := data[64<<10:]; !bytes.Equal(got, want) {
		t.Fatalf("got %d bytes, want the %d from 64 KiB to the chunk's end", len(got), len(want))
	}
	if bad := chunksum.Check(sums, got); bad != -1 {
		t.Fatalf("block %d of good data does not match the entries sent with it", bad)
	}
	if _, got, err := readSentChunk(c, tid, 78, 5, 0, 64<<10); err != nil || len(got) != 0 {
		t.Fatalf("a missing chunk: %d bytes, %v", len(got), err)
	}
	if _, _, err := readSentChunk(c, tid, 78, 0, 100, 64<<10); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("a read not at a block boundary: %v, want EINVAL", err)
	}

	flipBit(t, ts.svc.Targets()[0].dataPath(78, 0), 70_000)
	sums, got, err = readSentChunk(c, tid, 78, 0, 64<<10, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	if bad := chunksum.Check(sums, got); bad != (70_000-64<<10)/chunksum.BlockSize {
		t.Fatalf("the damaged block: Check says %d", bad)
	}
}
