// Package testcluster starts real TandemFS clusters for tests: the tandem
// binary is built once per test process, and every cluster runs as
// separate processes (metadata service, storage servers, FUSE client) on
// loopback TCP, exactly as `tandem up` starts them. Tests therefore
// exercise real sockets, real disks and a real kernel mount, and killing a
// process is a real failure.
package testcluster

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"tandemfs/internal/cluster"
	"tandemfs/internal/testenv"
)

var (
	buildOnce sync.Once
	binPath   string
	binDir    string // the temporary directory Binary built into
	buildErr  error
)

// RemoveBinary deletes the binary Binary built, if it built one; call it
// from TestMain after the tests ran.
func RemoveBinary() {
	if binDir != "" {
		os.RemoveAll(binDir)
	}
}

// Binary builds cmd/tandem (once per test process) and returns its path;
// $TANDEM_BIN names a prebuilt binary instead.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		if p := os.Getenv("TANDEM_BIN"); p != "" {
			binPath = p
			return
		}
		dir, err := os.MkdirTemp("", "tandem-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binDir = dir
		binPath = filepath.Join(dir, "tandem")
		cmd := exec.Command("go", "build", "-o", binPath, "tandemfs/cmd/tandem")
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = err
			binPath = string(out)
		}
	})
	if buildErr != nil {
		t.Fatalf("building tandem: %v\n%s", buildErr, binPath)
	}
	return binPath
}

// RequireFUSE ends the test unless this process can mount FUSE file
// systems (root and /dev/fuse): a skip, or under CI a failure (testenv).
func RequireFUSE(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "needs root to mount FUSE")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		testenv.Unavailable(t, "needs /dev/fuse")
	}
}

// Cluster is a running one-machine cluster.
type Cluster struct {
	t      testing.TB
	Opts   cluster.Options
	Layout *cluster.Layout
}

// Option changes the cluster's options before it starts.
type Option func(*cluster.Options)

// WithServers sets the number of storage servers and targets per server.
func WithServers(servers, targets int) Option {
	return func(o *cluster.Options) { o.Servers, o.TargetsPerServer = servers, targets }
}

// WithMetaReplicas sets the number of metadata replicas (1 or 3).
func WithMetaReplicas(n int) Option { return func(o *cluster.Options) { o.MetaReplicas = n } }

// WithFenceConfig gives the metadata service a fence agents file.
func WithFenceConfig(path string) Option { return func(o *cluster.Options) { o.FenceConfig = path } }

// WithFaultFiles starts the storage servers with fault files (see
// Cluster.FaultFile).
func WithFaultFiles() Option { return func(o *cluster.Options) { o.FaultFiles = true } }

// WithScrubEvery has the storage servers scrub every d.
func WithScrubEvery(d time.Duration) Option { return func(o *cluster.Options) { o.ScrubEvery = d } }

// WithMountFlags adds flags to the mount's command line.
func WithMountFlags(flags ...string) Option {
	return func(o *cluster.Options) { o.MountFlags = append(o.MountFlags, flags...) }
}

// WithStorageFlags adds flags to every storage server's command line.
func WithStorageFlags(flags ...string) Option {
	return func(o *cluster.Options) { o.StorageFlags = append(o.StorageFlags, flags...) }
}

// WithECRebuildAfter retires a storage server for erasure coding after d
// of silence (the metadata service's --ec-rebuild-after).
func WithECRebuildAfter(d time.Duration) Option {
	return func(o *cluster.Options) { o.ECRebuildAfter = d }
}

// WithSessionTimeout sets the metadata service's --session-timeout (and
// so how long a new leader waits before it judges which files clients
// hold open).
func WithSessionTimeout(d time.Duration) Option {
	return func(o *cluster.Options) { o.SessionTimeout = d }
}

// WithCache gives every storage target a flash cache of size bytes in
// mode under dir, which must be on another file system than the
// cluster's (e.g. /dev/shm).
func WithCache(dir, size, mode string) Option {
	return func(o *cluster.Options) { o.Cache, o.CacheSize, o.CacheMode = dir, size, mode }
}

// WithRacks labels the storage servers rack1..rackN in turn.
func WithRacks(n int) Option { return func(o *cluster.Options) { o.Racks = n } }

// WithNFS starts the cluster's NFS gateway too: two heads holding one
// service address (cluster.NFSLayout).
func WithNFS() Option { return func(o *cluster.Options) { o.NFS = true } }

// WithoutMount starts no FUSE client.
func WithoutMount() Option { return func(o *cluster.Options) { o.Mount = "" } }

// WithInlineMax sets the inline file limit of the new file system.
func WithInlineMax(limit string) Option { return func(o *cluster.Options) { o.InlineMax = limit } }

// Start starts a cluster in a fresh temporary directory and stops it when
// the test ends.
func Start(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	RequireFUSE(t)
	dir, err := os.MkdirTemp("", "tandem-test-")
	if err != nil {
		t.Fatal(err)
	}
	// Other users must reach the mount point (permission tests run as
	// nobody); the data directory below stays private.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c := &Cluster{t: t, Opts: cluster.Options{
		Dir: filepath.Join(dir, "data"), Mount: filepath.Join(dir, "mnt"),
		Servers: 2, TargetsPerServer: 2, Binary: Binary(t),
		// A test that hits go test's -timeout dies without its
		// cleanups; its cluster must not outlive it.
		DieWithCaller: true,
	}}
	// Cleanups run last-registered first: stop the cluster, then undo
	// what options set up (e.g. a tmpfs under a target), then delete.
	t.Cleanup(func() {
		if !t.Failed() {
			os.RemoveAll(dir)
		} else {
			t.Logf("cluster data and logs kept in %s", dir)
		}
	})
	for _, o := range opts {
		o(&c.Opts)
	}
	t.Cleanup(c.Down)
	c.Up()
	return c
}

// Mount is the cluster's mount point.
func (c *Cluster) Mount() string { return c.Layout.Mount }

// Dir is the cluster's data directory.
func (c *Cluster) Dir() string { return c.Opts.Dir }

// Up starts whatever is not running (again).
func (c *Cluster) Up() {
	c.t.Helper()
	l, err := cluster.Up(c.Opts)
	if err != nil {
		c.t.Fatalf("tandem up: %v", err)
	}
	c.Layout = l
}

// Down unmounts and stops every process.
func (c *Cluster) Down() {
	c.t.Helper()
	if err := cluster.Down(c.Opts.Dir, true, nil); err != nil {
		c.t.Errorf("tandem down: %v", err)
	}
}

// KillProcess kills one part of the cluster with SIGKILL ("meta2",
// "storage1", "mount").
func (c *Cluster) KillProcess(name string) {
	c.t.Helper()
	if err := cluster.KillProcess(c.Opts.Dir, name); err != nil {
		c.t.Fatal(err)
	}
}

// Signal sends sig to one part of the cluster (SIGSTOP makes it hang,
// SIGCONT wakes it up).
func (c *Cluster) Signal(name string, sig syscall.Signal) {
	c.t.Helper()
	if err := cluster.SignalProcess(c.Opts.Dir, name, sig); err != nil {
		c.t.Fatal(err)
	}
	if sig == syscall.SIGSTOP {
		c.waitStopped(name)
	}
}

// waitStopped waits until every thread of process name is stopped: a
// signal reaches a thread running on another CPU only when it next enters
// the kernel, and a test that goes on before may still be answered.
func (c *Cluster) waitStopped(name string) {
	c.t.Helper()
	pid := cluster.Pid(c.Opts.Dir, name)
	deadline := time.Now().Add(5 * time.Second)
	for !allThreadsStopped(pid) {
		if time.Now().After(deadline) {
			c.t.Fatalf("%s (pid %d) did not stop within 5 s of SIGSTOP", name, pid)
		}
		time.Sleep(time.Millisecond)
	}
}

// allThreadsStopped reports whether every thread of pid is in state T.
func allThreadsStopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return false
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			continue // ended
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) || (b[i+2] != 'T' && b[i+2] != 't') {
			return false
		}
	}
	return true
}

// FaultFile is the fault file of storage server name (WithFaultFiles):
// JSON rules written there make its disks fail.
func (c *Cluster) FaultFile(name string) string { return cluster.FaultFile(c.Opts.Dir, name) }

// PidFile is the file holding the PID of one part of the cluster.
func (c *Cluster) PidFile(name string) string { return cluster.PidFile(c.Opts.Dir, name) }

// Kill9 kills every process of the cluster with SIGKILL at once.
func (c *Cluster) Kill9() {
	c.t.Helper()
	if err := cluster.Kill(c.Opts.Dir); err != nil {
		c.t.Fatalf("kill: %v", err)
	}
}
