package hamatrix

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"tandemfs/internal/netlab"
	"tandemfs/internal/rpc"
	"tandemfs/internal/testcluster"
)

// topology is the lab of every scenario: addresses follow from the order
// (srv1 is .11, srv2 .12, third .13, cli .14 on each network it is on).
var topology = []netlab.HostSpec{
	{Name: "srv1", Public: true, Private: true},
	{Name: "srv2", Public: true, Private: true},
	{Name: "third", Public: true, Private: true},
	{Name: "cli", Public: true},
}

// Where the services run and listen.
var (
	metaHosts    = []string{"srv1", "srv2", "third"} // replicas meta1, meta2, meta3
	storageHosts = []string{"srv1", "srv2"}
)

const (
	metaPort    = 7100
	raftPort    = 7101
	storagePort = 8000
	// targetsPerServer gives each server two targets, so the cluster forms
	// two replicated chains, each with one member on each server.
	targetsPerServer = 2
)

// Time limits of the bring-up and of waiting for the cluster's reactions.
const (
	upTimeout     = 30 * time.Second // a fresh cluster serves, or a restarted process is back
	statusTimeout = 2 * time.Second  // one `tandem status` against one replica
)

// clusterOptions are what differs between scenarios' clusters.
type clusterOptions struct {
	fence  bool // the metadata replicas run fence agents (idrac fails, pdu kills)
	faults bool // the storage servers take disk faults from a fault file
	// cache, if set, gives every target a flash cache on tmpfs in this
	// mode (tandem storage --cache, --cache-mode), which the fault file
	// reaches too.
	cache string
}

// cluster is one TandemFS cluster in its own lab. Its processes are
// started by hand, each in its host's namespace, with logs in dir/logs.
type cluster struct {
	t         *testing.T
	lab       *netlab.Lab
	bin       string // the tandem binary
	dir       string // everything of this cluster; kept if the test fails
	secret    string // the cluster secret file
	fence     string // the fence agents file, or ""
	faults    bool   // storage servers run with --fault-file (faultFile)
	caches    string // the root of the targets' flash caches (cacheDir), or ""
	cacheMode string
	mnt       string // the client's mount point

	// Who runs what: the storage servers' hosts, each server's targets,
	// the replicated chains they form (0: as many as the order in which
	// the servers registered made), and flags added to the metadata
	// replicas' and the mount's command lines. newCluster sets those of
	// the storage matrix (storageHosts, targetsPerServer).
	storage   []string
	targets   int
	chains    int
	metaFlags []string
	mountArgs []string

	procs map[string]*netlab.Proc // "meta@srv1", "storage@srv2", "mount@cli"

	mu     sync.Mutex
	leader string // the metadata address that answered status last
}

// startCluster builds the scenario's lab and starts a cluster in it:
// metadata replicas on srv1, srv2 and third (the leader elected among the
// latter two), storage servers on srv1 and srv2, the mount on cli. It
// returns once the mount answers and every replicated chain serves.
// Everything is torn down when the test ends.
func startCluster(t *testing.T, prefix string, opts clusterOptions) *cluster {
	t.Helper()
	netlab.Skip(t)
	testcluster.RequireFUSE(t)
	c := newCluster(t, prefix, topology)
	c.faults = opts.faults
	if opts.cache != "" {
		dir, err := os.MkdirTemp("/dev/shm", "hamatrix-"+prefix+"-cache-")
		if err != nil {
			t.Fatalf("a directory for the flash caches on tmpfs: %v", err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		c.caches, c.cacheMode = dir, opts.cache
	}
	c.mnt = filepath.Join(c.dir, "mnt")
	cleanup(t, "unmounting", c.unmount)
	if err := os.MkdirAll(c.mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if opts.fence {
		c.writeFenceConfig()
	}
	c.startServers(c.startMount)
	c.waitMounted()
	return c
}

// newCluster builds a lab of hosts in a directory of its own, with a
// cluster secret, and nothing running yet. The lab is closed (every
// process in it killed) and the directory removed (kept if the test
// failed) when the test ends.
func newCluster(t *testing.T, prefix string, hosts []netlab.HostSpec) *cluster {
	t.Helper()
	bin := testcluster.Binary(t)
	dir, err := os.MkdirTemp("", "hamatrix-"+prefix+"-")
	if err != nil {
		t.Fatal(err)
	}
	// Cleanups run last-registered first: unmount (registered by the
	// caller), close the lab (which kills every process in it), then
	// delete or keep the directory.
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("HA_MATRIX_KEEP") != "" {
			t.Logf("cluster data and logs kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	if err := netlab.Cleanup(prefix); err != nil {
		t.Fatal(err)
	}
	lab, err := netlab.New(prefix, hosts)
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, lab: lab, bin: bin, dir: dir, procs: map[string]*netlab.Proc{},
		storage: storageHosts, targets: targetsPerServer, chains: targetsPerServer}
	cleanup(t, "closing the lab", func() {
		if err := lab.Close(); err != nil {
			t.Error(err)
		}
	})
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	c.writeSecret()
	return c
}

// startServers starts the metadata replicas and the storage servers, then
// whatever else runs (beforeWait), and returns once both servers are
// online, every replicated chain serves and every replica is up. meta2 and
// meta3 start first: they are a majority and elect a leader between them,
// so srv1, which every scenario fails, never leads.
func (c *cluster) startServers(beforeWait func()) {
	c.t.Helper()
	c.startMeta("srv2")
	c.startMeta("third")
	c.waitFor("a metadata leader on srv2 or third", upTimeout, func(st *status) bool { return true })
	c.startMeta("srv1")
	for _, h := range c.storage {
		c.startStorage(h)
	}
	if beforeWait != nil {
		beforeWait()
	}
	c.waitFor("every server online and every chain serving", upTimeout, c.whole)
	c.waitReplicas()
}

// whole reports whether every storage server is online and every
// replicated chain formed and serving.
func (c *cluster) whole(st *status) bool {
	return st.onlineServers() == len(c.storage) && (c.chains == 0 || len(st.replicated()) == c.chains) && st.allServing()
}

// cleanup registers fn as a cleanup of t that says so when it is slow.
func cleanup(t *testing.T, what string, fn func()) {
	t.Cleanup(func() {
		t0 := time.Now()
		fn()
		if d := time.Since(t0); d > 3*time.Second {
			t.Logf("cleanup: %s took %v", what, d.Round(100*time.Millisecond))
		}
	})
}

// host returns a host of the lab.
func (c *cluster) host(name string) *netlab.Host { return c.lab.Host(name) }

// metaAddrs are the public addresses of the metadata replicas, for clients.
func (c *cluster) metaAddrs() []string {
	var out []string
	for _, h := range metaHosts {
		out = append(out, fmt.Sprintf("%s:%d", c.host(h).PublicIP(), metaPort))
	}
	return out
}

// writeSecret writes the cluster secret the way `tandem up` does: 32
// random bytes, hex, in a file of mode 0600.
func (c *cluster) writeSecret() {
	c.secret = filepath.Join(c.dir, "secret")
	s, err := rpc.NewSecret()
	if err == nil {
		err = rpc.WriteSecretFile(c.secret, s)
	}
	if err != nil {
		c.t.Fatal(err)
	}
}

// writeFenceConfig gives every storage server two fence agents, as the
// NSS-HA pair has: an "idrac" that always fails (its cable is pulled) and
// a "pdu" that powers the server off by killing every process in its
// network namespace.
func (c *cluster) writeFenceConfig() {
	scripts := filepath.Join(repoRoot(c.t), "scripts", "fence")
	servers := map[string]any{}
	for _, h := range c.storage {
		// Keyed by the host part of the server's address; its PDU outlet
		// is its namespace.
		servers[c.host(h).PublicIP()] = []any{
			map[string]any{"name": "idrac", "command": filepath.Join(scripts, "fence_tandem_fail")},
			map[string]any{"name": "pdu", "command": filepath.Join(scripts, "fence_tandem_kill"),
				"options": map[string]string{"netns": c.host(h).Netns()}},
		}
	}
	cfg := map[string]any{"timeout": "10s", "servers": servers}
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		c.t.Fatal(err)
	}
	c.fence = filepath.Join(c.dir, "fence.json")
	if err := os.WriteFile(c.fence, data, 0o600); err != nil {
		c.t.Fatal(err)
	}
}

// repoRoot is the directory holding go.mod, above the test's directory.
func repoRoot(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			t.Fatalf("no go.mod above %s", dir)
		}
	}
}

// start starts one service on a host and remembers it as role@host. A
// restart appends to the same log.
func (c *cluster) start(role, host string, args ...string) *netlab.Proc {
	c.t.Helper()
	name := role + "@" + host
	p, err := c.host(host).Start(name, c.logPath(role, host), append([]string{c.bin}, args...)...)
	if err != nil {
		c.t.Fatal(err)
	}
	c.procs[name] = p
	return p
}

func (c *cluster) logPath(role, host string) string {
	return filepath.Join(c.dir, "logs", host+"-"+role+".log")
}

// proc returns the running process of role@host.
func (c *cluster) proc(role, host string) *netlab.Proc {
	p := c.procs[role+"@"+host]
	if p == nil {
		c.t.Fatalf("no %s on %s was started", role, host)
	}
	return p
}

// startMeta starts the metadata replica of a host (meta1 on srv1, ...),
// listening on all its addresses, with Raft on the public network.
func (c *cluster) startMeta(host string) {
	c.t.Helper()
	args := []string{"meta", "--data", filepath.Join(c.dir, host, "meta"), "--id", metaID(host),
		"--listen", fmt.Sprintf("0.0.0.0:%d", metaPort),
		"--raft-listen", fmt.Sprintf("%s:%d", c.host(host).PublicIP(), raftPort),
		"--secret-file", c.secret, "--failure-timeout", "4s"}
	args = append(args, c.metaFlags...)
	for _, h := range metaHosts {
		ip := c.host(h).PublicIP()
		args = append(args, "--peer", fmt.Sprintf("%s=%s:%d,%s:%d", metaID(h), ip, metaPort, ip, raftPort))
	}
	if c.fence != "" {
		args = append(args, "--fence-config", c.fence)
	}
	if err := os.MkdirAll(filepath.Join(c.dir, host, "meta"), 0o755); err != nil {
		c.t.Fatal(err)
	}
	c.start("meta", host, args...)
}

func metaID(host string) string {
	for i, h := range metaHosts {
		if h == host {
			return fmt.Sprintf("meta%d", i+1)
		}
	}
	panic("no metadata replica on " + host)
}

// startStorage starts the storage server of a host with its targets
// (created on first start, reused on a restart), heartbeating over both
// networks.
func (c *cluster) startStorage(host string) {
	c.t.Helper()
	var pub, priv []string
	for _, h := range metaHosts {
		pub = append(pub, fmt.Sprintf("%s:%d", c.host(h).PublicIP(), metaPort))
		priv = append(priv, fmt.Sprintf("%s:%d", c.host(h).PrivateIP(), metaPort))
	}
	args := []string{"storage", "--listen", fmt.Sprintf("%s:%d", c.host(host).PublicIP(), storagePort),
		"--meta", strings.Join(pub, ","), "--meta-private", strings.Join(priv, ","), "--secret-file", c.secret}
	for i := 1; i <= c.targets; i++ {
		dir := c.targetDir(host, i)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			c.t.Fatal(err)
		}
		args = append(args, "--target", dir)
	}
	if c.caches != "" {
		for i := 1; i <= c.targets; i++ {
			args = append(args, "--cache", c.cacheDir(host, i))
		}
		args = append(args, "--cache-size", "512M", "--cache-mode", c.cacheMode)
	}
	if c.faults {
		args = append(args, "--fault-file", c.faultFile(host))
	}
	args = append(args, strings.Fields(os.Getenv("HA_MATRIX_STORAGE_FLAGS"))...)
	c.start("storage", host, args...)
}

// cacheDir is the flash cache of a host's i-th target (from 1).
func (c *cluster) cacheDir(host string, i int) string {
	return filepath.Join(c.caches, host, fmt.Sprintf("target%d", i))
}

// targetDir is the directory of a host's i-th target (from 1).
func (c *cluster) targetDir(host string, i int) string {
	return filepath.Join(c.dir, host, fmt.Sprintf("target%d", i))
}

// faultFile is where a host's storage server reads its disk faults: JSON
// rules (internal/storage/faultfile.go), reloaded when the file changes.
func (c *cluster) faultFile(host string) string {
	return filepath.Join(c.dir, host+"-faults.json")
}

// faultRule makes the disk calls ops (a comma list: open, read, write,
// sync, truncate, ...) on paths containing path fail with errno.
type faultRule struct {
	Path  string `json:"path"`
	Ops   string `json:"ops"`
	Errno string `json:"errno,omitempty"`
	Delay string `json:"delay,omitempty"` // a slow disk: each matching call waits this long
	Times int    `json:"times,omitempty"` // 0: every matching call
}

// setFaults replaces the disk faults of a host's storage server.
func (c *cluster) setFaults(host string, rules []faultRule) error {
	data, err := json.Marshal(append([]faultRule{}, rules...))
	if err != nil {
		return err
	}
	// Written aside and renamed, so the server never reads half a file.
	tmp := c.faultFile(host) + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, c.faultFile(host))
}

// stopStorage stops a host's storage server the way an administrator
// does (SIGTERM), and kills it if it does not exit within 10 s.
func (c *cluster) stopStorage(host string) error {
	p := c.proc("storage", host)
	p.Signal(syscall.SIGTERM)
	if err := p.Wait(10 * time.Second); errors.Is(err, netlab.ErrTimeout) {
		c.t.Logf("the storage server on %s ignores SIGTERM; killing it", host)
		return p.Kill9()
	}
	return nil
}

// restartServer starts again whatever of a server's processes is not
// running (after a crash or a fence), with the same directories.
func (c *cluster) restartServer(host string) {
	c.t.Helper()
	if p := c.procs["meta@"+host]; p == nil || p.Exited() {
		c.startMeta(host)
	}
	if p := c.procs["storage@"+host]; p == nil || p.Exited() {
		c.startStorage(host)
	}
}

// startMount mounts the file system on cli.
func (c *cluster) startMount() {
	c.t.Helper()
	args := append([]string{"mount", "--meta", strings.Join(c.metaAddrs(), ","), "--secret-file", c.secret}, c.mountArgs...)
	c.start("mount", "cli", append(args, c.mnt)...)
}

// waitMounted waits until the mount answers: the mount point is another
// file system and a file can be created and removed on it.
func (c *cluster) waitMounted() {
	c.t.Helper()
	deadline := time.Now().Add(upTimeout)
	probe := filepath.Join(c.mnt, ".mounted")
	for {
		if c.mounted() {
			err := os.WriteFile(probe, []byte("ok"), 0o644)
			if err == nil {
				err = os.Remove(probe)
			}
			if err == nil {
				return
			}
			c.t.Logf("mount not ready yet: %v", err)
		}
		if p := c.proc("mount", "cli"); p.Exited() || time.Now().After(deadline) {
			c.t.Fatalf("the mount on cli does not answer (exited: %v); log:\n%s", p.Exited(), c.log("mount", "cli"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// mounted reports whether the mount point is a mount (another device
// than its parent).
func (c *cluster) mounted() bool {
	var a, b syscall.Stat_t
	if syscall.Stat(c.mnt, &a) != nil || syscall.Stat(c.dir, &b) != nil {
		return false
	}
	return a.Dev != b.Dev
}

// unmount detaches the mount lazily, so that nothing blocked in it can
// hold up the cleanup; closing the lab then kills the FUSE server, which
// fails whatever still waits on it.
func (c *cluster) unmount() {
	if !c.mounted() {
		return
	}
	out, err := exec.Command("fusermount3", "-u", "-z", c.mnt).CombinedOutput()
	if err != nil {
		if out2, err2 := exec.Command("umount", "-l", c.mnt).CombinedOutput(); err2 != nil {
			c.t.Errorf("unmounting %s: %v: %s; %v: %s", c.mnt, err, out, err2, out2)
		}
	}
}

// dumpGoroutines makes the storage servers that run write their
// goroutines into their logs and exit (SIGQUIT), to show where a stuck
// server waits.
func (c *cluster) dumpGoroutines() {
	for _, h := range c.storage {
		if p := c.procs["storage@"+h]; p != nil && !p.Exited() {
			p.Signal(syscall.SIGQUIT)
			p.Wait(5 * time.Second)
			c.t.Logf("goroutines of the storage server on %s dumped into %s", h, c.logPath("storage", h))
		}
	}
}

// waitLog waits until a service's log says what.
func (c *cluster) waitLog(role, host, what string, timeout time.Duration) {
	c.t.Helper()
	for deadline := time.Now().Add(timeout); ; time.Sleep(100 * time.Millisecond) {
		if data, _ := os.ReadFile(c.logPath(role, host)); bytes.Contains(data, []byte(what)) {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s on %s did not log %q within %v; its log:\n%s", role, host, what, timeout, c.log(role, host))
		}
	}
}

// log returns the end of a service's log, for failure messages.
func (c *cluster) log(role, host string) string {
	data, _ := os.ReadFile(c.logPath(role, host))
	if len(data) > 4000 {
		data = append([]byte("[...]"), data[len(data)-4000:]...)
	}
	return string(data)
}

// status asks the metadata leader for `tandem status --json`, from cli.
// Each replica is asked on its own with a timeout, the last leader first,
// so that a hung or unreachable replica (status asks every replica it is
// given in turn) delays nothing.
func (c *cluster) status(ctx context.Context) (*status, error) {
	c.mu.Lock()
	last := c.leader
	c.mu.Unlock()
	if last != "" {
		if st, err := c.statusFrom(ctx, last); err == nil {
			return st, nil
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type answer struct {
		addr string
		st   *status
		err  error
	}
	addrs := c.metaAddrs()
	answers := make(chan answer, len(addrs))
	for _, a := range addrs {
		go func() {
			st, err := c.statusFrom(ctx, a)
			answers <- answer{a, st, err}
		}()
	}
	var errs []error
	for range addrs {
		a := <-answers
		if a.err == nil {
			c.mu.Lock()
			c.leader = a.addr
			c.mu.Unlock()
			return a.st, nil
		}
		errs = append(errs, a.err)
	}
	return nil, errors.Join(errs...)
}

// waitReplicas waits until every metadata replica is up, as leader or
// follower, and the leader is not on srv1: a leader found there (it took
// over from another) is crashed and restarted, so that another leads.
func (c *cluster) waitReplicas() {
	c.t.Helper()
	deadline := time.Now().Add(upTimeout)
	for {
		st, err := c.statusFrom(context.Background(), strings.Join(c.metaAddrs(), ","))
		if err == nil && st.replicasUp() == len(metaHosts) {
			if c.hostOfAddr(st.leader) != "srv1" {
				return
			}
			c.t.Logf("the metadata leader is on srv1, which the scenarios fail: restarting it")
			if err := c.proc("meta", "srv1").Kill9(); err != nil {
				c.t.Fatal(err)
			}
			c.waitFor("a metadata leader on srv2 or third", upTimeout, func(st *status) bool { return true })
			c.startMeta("srv1")
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("metadata replicas not all up within %v: %v %v", upTimeout, st, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitAllReplicas checks that every metadata replica leads or follows
// again, a restarted or reconnected one included.
func (c *cluster) waitAllReplicas() {
	c.t.Helper()
	deadline := time.Now().Add(upTimeout)
	for {
		st, err := c.statusFrom(context.Background(), strings.Join(c.metaAddrs(), ","))
		if err == nil && st.replicasUp() == len(metaHosts) {
			return
		}
		if time.Now().After(deadline) {
			c.t.Errorf("metadata replicas not all back within %v: %v %v", upTimeout, st, err)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// The lines a chain head logs when a resync is done or stops early.
var (
	resyncDoneRE    = regexp.MustCompile(`resync of target \d+ in chain \d+ done in (\S+): \d+ chunks examined, (\d+) copied \((\d+) bytes\)(?:; (\S+) of it making the copies durable)?(?:, (\S+) waiting for bucket listings)?`)
	resyncStoppedRE = regexp.MustCompile(`resync of target \d+ in chain \d+ stopped: `)
)

// resyncTotals sums up the resyncs of a scenario from the heads' logs.
type resyncTotals struct {
	chunks, bytes int64         // copied by the finished resyncs
	longest       time.Duration // the longest one on its head (they run in parallel)
	durable       time.Duration // of it, waiting for the member to make copies durable
	listWait      time.Duration // of it, waiting for bucket listings
	stopped       int           // resyncs that stopped before the end (and started again)
}

// resyncsDone reads the resync totals from the storage servers' logs.
func (c *cluster) resyncsDone() resyncTotals {
	var t resyncTotals
	for _, h := range c.storage {
		data, _ := os.ReadFile(c.logPath("storage", h))
		for _, m := range resyncDoneRE.FindAllSubmatch(data, -1) {
			d, _ := time.ParseDuration(string(m[1]))
			n, _ := strconv.ParseInt(string(m[2]), 10, 64)
			b, _ := strconv.ParseInt(string(m[3]), 10, 64)
			t.chunks, t.bytes = t.chunks+n, t.bytes+b
			if d >= t.longest {
				t.longest = d
				t.durable, _ = time.ParseDuration(string(m[4]))
				t.listWait, _ = time.ParseDuration(string(m[5]))
			}
		}
		t.stopped += len(resyncStoppedRE.FindAllIndex(data, -1))
	}
	return t
}

// statusFrom runs `tandem status --json` against the replicas in addrs
// (comma-separated); the leader among them answers.
func (c *cluster) statusFrom(ctx context.Context, addr string) (*status, error) {
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	out, err := c.host("cli").RunContext(ctx, c.bin, "status", "--json", "--meta", addr, "--secret-file", c.secret)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
	}
	// Output is stdout and stderr together; the JSON is all of stdout.
	i := strings.IndexByte(string(out), '{')
	if i < 0 {
		return nil, fmt.Errorf("status from %s: no JSON in %q", addr, out)
	}
	st, err := c.parseStatus(out[i:])
	if err != nil {
		return nil, fmt.Errorf("status from %s: %v: %s", addr, err, out)
	}
	return st, nil
}

// parseStatus reads the JSON of `tandem status --json`, or a line of
// `tandem status --json --watch` (whose time it takes as the answer's).
func (c *cluster) parseStatus(data []byte) (*status, error) {
	st := &status{}
	if err := json.Unmarshal(data, st); err != nil {
		return nil, err
	}
	st.at = time.Now()
	if !st.Time.IsZero() {
		st.at = st.Time
	}
	st.hostOf = c.hostOfAddr
	for _, r := range st.Meta.Replicas {
		if r.State == "leader" {
			st.leader = r.Addr
		}
	}
	return st, nil
}

// hostOfAddr names the lab host with the IP of addr (host:port).
func (c *cluster) hostOfAddr(addr string) string {
	ip, _, _ := strings.Cut(addr, ":")
	for _, h := range c.lab.Hosts() {
		if h.PublicIP() == ip || h.PrivateIP() == ip {
			return h.Name()
		}
	}
	return addr
}

// waitFor polls the status until cond holds and returns that status; it
// fails the test after timeout.
func (c *cluster) waitFor(what string, timeout time.Duration, cond func(*status) bool) *status {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	var last *status
	var lastErr error
	for {
		st, err := c.status(context.Background())
		if err == nil && cond(st) {
			return st
		}
		if err == nil {
			last = st
		}
		lastErr = err
		if time.Now().After(deadline) {
			c.t.Fatalf("no %s within %v; last status: %s; last error: %v", what, timeout, last, lastErr)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
