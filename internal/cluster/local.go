// Package cluster starts and stops a whole TandemFS cluster on one machine
// as separate background processes (metadata service, storage servers,
// FUSE client), the way `tandem up` and `tandem down` do, and keeps what it
// started in the data directory so that a later run finds it again.
package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"tandemfs/internal/ec"
	"tandemfs/internal/fuseconn"
	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
	"tandemfs/internal/wire"
)

// Options describe the cluster `tandem up` builds.
type Options struct {
	Dir              string // data directory: everything lives below it
	Mount            string // mount point ("" for no mount)
	Servers          int    // storage servers (default 2)
	MetaReplicas     int    // metadata replicas (default 1; 3 survive one failure)
	TargetsPerServer int    // targets per server (default 2)
	Binary           string // the tandem binary (default: this executable)
	// Settings for a new file system; ignored when Dir already holds one.
	InlineMax   string // e.g. "4096", "" for the default
	NoInline    bool
	ChunkSize   string // e.g. "1M"
	StripeCount int
	// EC, "K+M", erasure codes the files of the root directory (and so
	// of every directory that does not say otherwise); set once the
	// storage servers are up, since it needs K+M of them.
	EC string
	// Racks labels the storage servers rack1..rackN in turn (0: none).
	Racks int
	// ECRebuildAfter is the metadata service's --ec-rebuild-after (0:
	// its default).
	ECRebuildAfter time.Duration
	// SessionTimeout is the metadata service's --session-timeout (0: its
	// default).
	SessionTimeout time.Duration
	// FenceConfig is a fence agents file for the metadata service; "":
	// no fencing.
	FenceConfig string
	// IoUring is the mount's --io-uring (on, off; "": the mount's
	// default, on).
	IoUring string
	// FailureTimeout is how long a silent storage server waits before
	// failover; 0: the default.
	FailureTimeout time.Duration
	// FaultFiles starts every storage server with a fault file (see
	// FaultFile), so that tests can make its disks fail.
	FaultFiles bool
	// ScrubEvery is passed to every storage server's --scrub-every (0:
	// the server's default).
	ScrubEvery time.Duration
	// StorageFlags are added to every storage server's command line.
	StorageFlags []string
	// TargetRoot, if set, holds the storage targets (a disk of their
	// own) instead of DIR/storage: TargetRoot/storageN/targetM, for a new
	// cluster.
	TargetRoot string
	// Cache, if set, gives every target a flash cache (tandem storage
	// --cache) in Cache/storageN/targetM, of CacheSize bytes each (""
	// or "0": nine tenths of Cache's file system shared out among the
	// targets) in CacheMode ("": writethrough).
	Cache, CacheSize, CacheMode string
	// MountFlags are added to the mount's command line.
	MountFlags []string
	// NFS starts an NFS gateway of two heads (nfs.go); NFSExports are
	// its exports (default DefaultNFSExport), for a new gateway.
	NFS        bool
	NFSExports []string
	// DieWithCaller ends every process with the process that started it
	// (Linux's parent-death signal), for tests: a test binary killed by
	// go test's -timeout runs no cleanup, and its cluster would otherwise
	// go on running. `tandem up` leaves it off, so a cluster outlives the
	// shell that started it.
	DieWithCaller bool
	Progress      io.Writer // where to report progress (may be nil)
	Timeout       time.Duration
}

// cacheArgs are the storage flags that give server s's targets their
// flash caches (Options.Cache).
func (o *Options) cacheArgs(s ServerLayout) []string {
	if o.Cache == "" {
		return nil
	}
	var args []string
	for _, t := range s.Targets {
		args = append(args, "--cache", filepath.Join(o.Cache, s.Name, filepath.Base(t)))
	}
	size := o.CacheSize
	if size == "" || size == "0" {
		// Nine tenths of the cache's file system, shared by every
		// target of the cluster (each server would take it all).
		var st syscall.Statfs_t
		if os.MkdirAll(o.Cache, 0o755) == nil && syscall.Statfs(o.Cache, &st) == nil {
			size = fmt.Sprint(st.Blocks * uint64(st.Bsize) / 10 * 9 / uint64(max(o.Servers*o.TargetsPerServer, 1)))
		}
	}
	if size != "" {
		args = append(args, "--cache-size", size)
	}
	if o.CacheMode != "" {
		args = append(args, "--cache-mode", o.CacheMode)
	}
	return args
}

// Layout is the cluster's shape, stored as DIR/cluster.json on first start
// so that restarts reuse the same addresses and target directories.
type Layout struct {
	// MetaAddr lists the client addresses of the metadata replicas,
	// comma-separated, as every --meta flag takes them.
	MetaAddr   string         `json:"meta_addr"`
	RaftAddr   string         `json:"raft_addr,omitempty"` // one-replica layouts of older versions
	Metas      []MetaLayout   `json:"metas,omitempty"`
	SecretFile string         `json:"secret_file"`
	Servers    []ServerLayout `json:"servers"`
	Mount      string         `json:"mount,omitempty"`
	NFS        *NFSLayout     `json:"nfs,omitempty"` // an NFS gateway (up --nfs)
}

// MetaLayout is one metadata replica.
type MetaLayout struct {
	ID       string `json:"id"`
	Addr     string `json:"addr"`
	RaftAddr string `json:"raft_addr"`
}

// procName is the name of a replica's process, PID file and log.
func (m MetaLayout) procName(replicas int) string {
	if replicas == 1 {
		return "meta"
	}
	return m.ID
}

// ServerLayout is one storage server.
type ServerLayout struct {
	Name    string   `json:"name"`
	Listen  string   `json:"listen"`
	Targets []string `json:"targets"`
}

// LoadLayout reads DIR/cluster.json.
func LoadLayout(dir string) (*Layout, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cluster.json"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%s holds no TandemFS cluster (no cluster.json); start one with `tandem up --data %s`", dir, dir)
		}
		return nil, err
	}
	var l Layout
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, fmt.Errorf("%s/cluster.json: %w", dir, err)
	}
	if len(l.Metas) == 0 && l.RaftAddr != "" {
		l.Metas = []MetaLayout{{ID: "meta1", Addr: l.MetaAddr, RaftAddr: l.RaftAddr}}
	}
	return &l, nil
}

func (o *Options) progress(format string, args ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, format+"\n", args...)
	}
}

// Up starts every part that is not already running and returns once the
// mount (if any) is usable.
func Up(o Options) (*Layout, error) {
	if o.Servers == 0 {
		o.Servers = 2
	}
	if o.TargetsPerServer == 0 {
		o.TargetsPerServer = 2
	}
	if o.MetaReplicas == 0 {
		o.MetaReplicas = 1
	}
	if o.Servers < 1 || o.TargetsPerServer < 1 {
		return nil, fmt.Errorf("need at least one server and one target per server")
	}
	if o.MetaReplicas != 1 && o.MetaReplicas != 3 && o.MetaReplicas != 5 {
		return nil, fmt.Errorf("metadata replicas must be 1, 3 or 5 (a majority must survive), not %d", o.MetaReplicas)
	}
	if o.Timeout == 0 {
		o.Timeout = 60 * time.Second
	}
	if o.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		o.Binary = exe
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	o.Dir = dir
	if o.Mount != "" {
		// Before anything is written: the layout records the mount
		// point, which down unmounts.
		if _, err := o.checkMountPoint(o.Mount); err != nil {
			return nil, err
		}
	}
	for _, d := range []string{"logs", "run", "meta", "storage"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("data directory: %w", err)
		}
	}
	l, err := o.layout()
	if err != nil {
		return nil, err
	}
	secret, err := rpc.ReadSecretFile(l.SecretFile)
	if err != nil {
		return nil, err
	}
	if err := o.nfsLayout(l); err != nil {
		return nil, err
	}
	if o.FenceConfig, err = o.nfsFenceConfig(l); err != nil {
		return nil, err
	}
	if err := o.startMeta(l, secret); err != nil {
		return nil, err
	}
	if err := o.startStorage(l, secret); err != nil {
		return nil, err
	}
	if err := o.setRootEC(l, secret); err != nil {
		return nil, err
	}
	if o.Mount != "" {
		if err := o.startMount(l); err != nil {
			return nil, err
		}
	}
	if err := o.startNFS(l); err != nil {
		return nil, err
	}
	return l, nil
}

// layout loads cluster.json or creates it (with the secret and free ports).
func (o *Options) layout() (*Layout, error) {
	if l, err := LoadLayout(o.Dir); err == nil {
		if o.Mount != "" {
			mnt, err := filepath.Abs(o.Mount)
			if err != nil {
				return nil, err
			}
			l.Mount = mnt
		}
		return l, saveLayout(o.Dir, l)
	}
	secretFile := filepath.Join(o.Dir, "secret")
	if _, err := os.Stat(secretFile); errors.Is(err, os.ErrNotExist) {
		s, err := rpc.NewSecret()
		if err != nil {
			return nil, err
		}
		if err := rpc.WriteSecretFile(secretFile, s); err != nil {
			return nil, err
		}
	}
	ports, err := freePorts(2*max(o.MetaReplicas, 1) + o.Servers)
	if err != nil {
		return nil, err
	}
	l := &Layout{SecretFile: secretFile}
	var addrs []string
	for i := 0; i < max(o.MetaReplicas, 1); i++ {
		m := MetaLayout{ID: fmt.Sprintf("meta%d", i+1), Addr: ports[2*i], RaftAddr: ports[2*i+1]}
		l.Metas = append(l.Metas, m)
		addrs = append(addrs, m.Addr)
	}
	l.MetaAddr = strings.Join(addrs, ",")
	for i := 0; i < o.Servers; i++ {
		s := ServerLayout{Name: fmt.Sprintf("storage%d", i+1), Listen: ports[2*len(l.Metas)+i]}
		for j := 0; j < o.TargetsPerServer; j++ {
			root := filepath.Join(o.Dir, "storage")
			if o.TargetRoot != "" {
				root = o.TargetRoot
			}
			s.Targets = append(s.Targets, filepath.Join(root, s.Name, fmt.Sprintf("target%d", j+1)))
		}
		l.Servers = append(l.Servers, s)
	}
	if o.Mount != "" {
		if l.Mount, err = filepath.Abs(o.Mount); err != nil {
			return nil, err
		}
	}
	return l, saveLayout(o.Dir, l)
}

func saveLayout(dir string, l *Layout) error {
	b, _ := json.MarshalIndent(l, "", "  ")
	tmp := filepath.Join(dir, "cluster.json.tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, "cluster.json"))
}

// freePorts reserves n loopback ports by binding and releasing them. They
// are drawn from below the kernel's ephemeral port range: outgoing
// connections and listeners on port 0 (--metrics or --pprof 127.0.0.1:0)
// take their ports from that range, and one of them could take a port
// between this check and the service binding it (seen: a storage server
// refused with "address already in use" while the cluster's first
// processes started, each serving its metrics on port 0). Ports of the
// ephemeral range are the fallback only if the range below is too small.
func freePorts(n int) ([]string, error) {
	var out []string
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	take := func(addr string) error {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().String())
		return nil
	}
	lo, hi := reservablePorts()
	for tries := 0; len(out) < n && hi-lo >= 1000 && tries < 100*n; tries++ {
		take(fmt.Sprintf("127.0.0.1:%d", lo+rand.IntN(hi-lo))) // a port in use: try another
	}
	for len(out) < n {
		if err := take("127.0.0.1:0"); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// reservablePorts is the range [lo, hi) freePorts draws from: from 10000
// up to the start of the kernel's ephemeral range
// (net.ipv4.ip_local_port_range, 32768 by default).
func reservablePorts() (lo, hi int) {
	hi = 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				hi = v
			}
		}
	}
	return 10000, hi
}

func (o *Options) startMeta(l *Layout, secret rpc.Secret) error {
	for _, m := range l.Metas {
		dir := filepath.Join(o.Dir, "meta")
		if len(l.Metas) > 1 {
			dir = filepath.Join(o.Dir, "meta", m.ID)
		}
		args := []string{"meta", "--data", dir, "--id", m.ID, "--listen", m.Addr,
			"--raft-listen", m.RaftAddr, "--secret-file", l.SecretFile}
		if len(l.Metas) > 1 {
			for _, p := range l.Metas {
				args = append(args, "--peer", p.ID+"="+p.Addr+","+p.RaftAddr)
			}
		}
		if o.InlineMax != "" {
			args = append(args, "--inline-max", o.InlineMax)
		}
		if o.NoInline {
			args = append(args, "--no-inline")
		}
		if o.ChunkSize != "" {
			args = append(args, "--chunk-size", o.ChunkSize)
		}
		if o.StripeCount > 0 {
			args = append(args, "--stripe-count", strconv.Itoa(o.StripeCount))
		}
		if o.FenceConfig != "" {
			args = append(args, "--fence-config", o.FenceConfig)
		}
		if o.FailureTimeout > 0 {
			args = append(args, "--failure-timeout", o.FailureTimeout.String())
		}
		if o.ECRebuildAfter != 0 {
			args = append(args, "--ec-rebuild-after", o.ECRebuildAfter.String())
		}
		if o.SessionTimeout != 0 {
			args = append(args, "--session-timeout", o.SessionTimeout.String())
		}
		started, err := o.start(m.procName(len(l.Metas)), args, serviceEnv(runtime.NumCPU(), len(l.Servers)))
		if err != nil {
			return err
		}
		if started {
			o.progress("started metadata replica %s on %s", m.ID, m.Addr)
		}
	}
	return o.waitFor(l.Metas[0].procName(len(l.Metas)), "the metadata service to answer", func() error {
		_, err := fetchMap(l.MetaAddr, secret)
		return err
	})
}

func (o *Options) startStorage(l *Layout, secret rpc.Secret) error {
	want := 0
	env := serviceEnv(runtime.NumCPU(), len(l.Servers))
	for i, s := range l.Servers {
		args := []string{"storage", "--listen", s.Listen, "--meta", l.MetaAddr, "--secret-file", l.SecretFile,
			"--state", filepath.Join(o.Dir, "storage", s.Name)}
		for _, t := range s.Targets {
			if err := os.MkdirAll(t, 0o700); err != nil {
				return err
			}
			args = append(args, "--target", t)
		}
		if o.FaultFiles {
			args = append(args, "--fault-file", FaultFile(o.Dir, s.Name))
		}
		args = append(args, o.cacheArgs(s)...)
		if o.ScrubEvery > 0 {
			args = append(args, "--scrub-every", o.ScrubEvery.String())
		}
		if o.Racks > 0 {
			args = append(args, "--rack", fmt.Sprintf("rack%d", i%o.Racks+1))
		}
		args = append(args, o.StorageFlags...)
		started, err := o.start(s.Name, args, env)
		if err != nil {
			return err
		}
		if started {
			o.progress("started %s on %s with %d targets", s.Name, s.Listen, len(s.Targets))
		}
		want += len(s.Targets)
	}
	return o.waitFor("storage1", fmt.Sprintf("%d storage targets to come online", want), func() error {
		m, err := fetchMap(l.MetaAddr, secret)
		if err != nil {
			return err
		}
		online := 0
		for _, t := range m.Targets {
			if t.State == proto.TargetOnline {
				online++
			}
		}
		if online < want {
			return fmt.Errorf("%d of %d targets online", online, want)
		}
		return nil
	})
}

func (o *Options) startMount(l *Layout) error {
	if err := os.MkdirAll(l.Mount, 0o755); err != nil && !isStaleMount(l.Mount) {
		return fmt.Errorf("mount point: %w", err)
	}
	if mine, err := o.checkMountPoint(l.Mount); err != nil || mine {
		return err
	}
	if isStaleMount(l.Mount) {
		o.progress("cleaning up a stale mount at %s", l.Mount)
		syscall.Unmount(l.Mount, syscall.MNT_DETACH)
	}
	args := []string{"mount", "--meta", l.MetaAddr, "--secret-file", l.SecretFile}
	if o.IoUring != "" {
		args = append(args, "--io-uring", o.IoUring)
	}
	args = append(args, o.MountFlags...)
	args = append(args, l.Mount)
	if _, err := o.start("mount", args, nil); err != nil {
		return err
	}
	if err := o.waitFor("mount", "the mount at "+l.Mount, func() error {
		if !isTandemMount(l.Mount) {
			return errors.New("not mounted yet")
		}
		return nil
	}); err != nil {
		return err
	}
	o.progress("mounted at %s", l.Mount)
	return nil
}

// CheckMountPoint says, before anything starts, whether Up would refuse
// o.Mount because something else is mounted there.
func CheckMountPoint(o Options) error {
	if o.Mount == "" {
		return nil
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return err
	}
	o.Dir = dir
	_, err = o.checkMountPoint(o.Mount)
	return err
}

// checkMountPoint refuses a mount point something else is mounted on (a
// second cluster, or another file system): mounting on top would hide
// it. mine says this cluster's own mount is already there.
func (o *Options) checkMountPoint(mnt string) (mine bool, err error) {
	m, mounted := fuseconn.MountedAt(mountPointPath(mnt))
	if !mounted || isStaleMount(mnt) {
		return false, nil
	}
	if m.FSType == "fuse.tandem" && running(o.Dir, "mount") {
		return true, nil
	}
	return false, fmt.Errorf("%s is already mounted (%s, from %s), by another cluster or another file system: unmount it or choose another --mount", mnt, m.FSType, m.Source)
}

// start launches `tandem ARGS` in the background, with env added to this
// process's environment, unless a process of that name is already running;
// it reports whether it started one.
func (o *Options) start(name string, args []string, env []string) (bool, error) {
	if running(o.Dir, name) {
		return false, nil
	}
	logPath := filepath.Join(o.Dir, "logs", name+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return false, err
	}
	defer logf.Close()
	cmd := exec.Command(o.Binary, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if o.DieWithCaller {
		cmd.SysProcAttr.Pdeathsig = deathSignal(name)
	}
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	if err := cmd.Start(); err != nil {
		return false, fmt.Errorf("starting %s: %w", name, err)
	}
	pid := cmd.Process.Pid
	if err := os.WriteFile(pidFile(o.Dir, name), []byte(strconv.Itoa(pid)+"\n"), 0o600); err != nil {
		return false, err
	}
	go func() {
		// Reap it if it exits while we still run, and say how it ended
		// (a signal leaves nothing in the log otherwise).
		err := cmd.Wait()
		if f, ferr := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND, 0o600); ferr == nil {
			fmt.Fprintf(f, "tandem up: %s (pid %d) exited: %v\n", name, pid, orSuccess(err))
			f.Close()
		}
	}()
	return true, nil
}

// deathSignal is the signal process name gets when its caller dies
// (Options.DieWithCaller): the mount is asked to end, so that it unmounts
// itself instead of leaving a dead mount point; servers are killed, which
// also ends one a test has stopped with SIGSTOP.
func deathSignal(name string) syscall.Signal {
	if name == "mount" {
		return syscall.SIGTERM
	}
	return syscall.SIGKILL
}

// serviceEnv gives each of a one-machine cluster's storage servers, and
// its metadata service, a storage server's share of the machine's cores as
// GOMAXPROCS, unless the administrator set GOMAXPROCS (the FUSE client
// keeps them all). A server mostly waits in system calls, and with more
// Ps than it has cores of its own the Go scheduler spins and wakes idle
// threads for every request: on a 2-core VM with two servers, one P each
// cut a random 4 KiB write's CPU enough to raise one fio job from
// 2,466-2,977 to 3,003-3,357 IOPS (docs/benchmarks.md), and one P for the
// metadata service cut its CPU per create from 100-102 to 61-69 µs, and
// raised serial creates from 4,604-5,061 to 5,415-6,760/s and removes by
// two processes from 7,038-8,058 to 9,117-13,106/s (2026-11-27, four
// alternated pairs).
func serviceEnv(cpus, servers int) []string {
	if os.Getenv("GOMAXPROCS") != "" {
		return nil
	}
	return []string{"GOMAXPROCS=" + strconv.Itoa(max(1, cpus/max(1, servers)))}
}

func orSuccess(err error) any {
	if err == nil {
		return "exit status 0"
	}
	return err
}

// waitFor polls check until it succeeds, the process dies, or time runs out.
func (o *Options) waitFor(name, what string, check func() error) error {
	deadline := time.Now().Add(o.Timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = check(); err == nil {
			return nil
		}
		if !running(o.Dir, name) {
			return fmt.Errorf("%s exited while waiting for %s; its log %s ends with:\n%s",
				name, what, logPath(o.Dir, name), tail(logPath(o.Dir, name), 15))
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("timed out after %v waiting for %s (%v); see %s", o.Timeout, what, err, logPath(o.Dir, name))
}

func logPath(dir, name string) string { return filepath.Join(dir, "logs", name+".log") }

// FaultFile is the fault file of storage server name when the cluster
// was started with FaultFiles: rules written there make its disks fail
// (see storage.WatchFaultFile).
func FaultFile(dir, name string) string { return filepath.Join(dir, "run", name+".faults.json") }

func pidFile(dir, name string) string { return filepath.Join(dir, "run", name+".pid") }

// readPid returns the recorded PID of name, or 0.
func readPid(dir, name string) int {
	b, err := os.ReadFile(pidFile(dir, name))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// exited reports whether a /proc state letter is that of a process that
// has exited: a zombie (Z), or one being reaped (X, x), whose command line
// already reads empty. Missing X made `tandem up` right after a kill take
// the process being reaped for a live one and not restart it.
func exited(state byte) bool { return state == 'Z' || state == 'X' || state == 'x' }

// threadsLeft reports whether process pid, whose main thread has exited,
// still has other threads: one stuck in the kernel keeps the process, and
// whatever it holds (a mount's connection), alive.
func threadsLeft(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if n, ok := strings.CutPrefix(line, "Threads:"); ok {
			t, err := strconv.Atoi(strings.TrimSpace(n))
			return err == nil && t > 1
		}
	}
	return false
}

// running reports whether the recorded process of name is alive and still
// a tandem process (PIDs get reused): its command line must name
// "tandem", so a binary installed under another name is taken for a
// stranger.
func running(dir, name string) bool {
	pid := readPid(dir, name)
	if pid <= 0 || syscall.Kill(pid, 0) == syscall.ESRCH {
		return false
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err == nil {
		if i := strings.LastIndexByte(string(st), ')'); i > 0 && len(st) > i+2 && exited(st[i+2]) && !threadsLeft(pid) {
			return false
		}
	}
	// A reused PID belongs to another program. (The command line of a
	// process that is just starting can read as empty; that is not proof
	// of anything.)
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err == nil && len(b) > 0 && !strings.Contains(string(b), "tandem") {
		return false
	}
	return true
}

func tail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log)"
	}
	ls := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}

const fuseSuperMagic = 0x65735546

func isTandemMount(dir string) bool {
	var st syscall.Statfs_t
	return syscall.Statfs(dir, &st) == nil && st.Type == fuseSuperMagic
}

func isStaleMount(dir string) bool {
	var st syscall.Stat_t
	err := syscall.Stat(dir, &st)
	return errors.Is(err, syscall.ENOTCONN)
}

// fetchMap asks the metadata replicas in addrs (comma-separated) for the
// cluster map; the leader answers.
func fetchMap(addrs string, secret rpc.Secret) (*proto.ClusterMap, error) {
	var errs []error
	for _, addr := range strings.Split(addrs, ",") {
		c := rpc.NewClient(addr, secret)
		c.CallTimeout = 5 * time.Second
		var m proto.ClusterMap
		err := c.Call(proto.OpClusterMap, nil, func(d *wire.Dec) error { m.Decode(d); return nil })
		c.Close()
		if err == nil {
			return &m, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// setRootEC gives the root directory the erasure coding o.EC names.
func (o *Options) setRootEC(l *Layout, secret rpc.Secret) error {
	if o.EC == "" {
		return nil
	}
	scheme, err := ec.Parse(o.EC)
	if err != nil {
		return fmt.Errorf("--ec: %w", err)
	}
	r := proto.SetStripeReq{Ino: proto.RootIno, Stripe: proto.Stripe{EC: proto.ECPattern{Data: uint8(scheme.Data), Parity: uint8(scheme.Parity)}}}
	var errs []error
	for _, addr := range strings.Split(l.MetaAddr, ",") {
		c := rpc.NewClient(addr, secret)
		c.CallTimeout = 5 * time.Second
		err := c.Call(proto.OpSetStripe, r.Encode, nil)
		c.Close()
		if err == nil {
			o.progress("new files are erasure coded %s", scheme)
			return nil
		}
		errs = append(errs, err)
	}
	return fmt.Errorf("--ec %s: %w", scheme, errors.Join(errs...))
}
