package cluster

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestLoadLayoutExplainsAnEmptyDirectory(t *testing.T) {
	dir := t.TempDir()
	_, err := LoadLayout(dir)
	if err == nil || !strings.Contains(err.Error(), "tandem up --data "+dir) {
		t.Fatalf("got %v, want a hint to run tandem up", err)
	}
}

func TestLayoutIsCreatedOnceAndReused(t *testing.T) {
	o := &Options{Dir: t.TempDir(), Servers: 2, TargetsPerServer: 3, Mount: "mnt"}
	l1, err := o.layout()
	if err != nil {
		t.Fatal(err)
	}
	if len(l1.Servers) != 2 || len(l1.Servers[1].Targets) != 3 || l1.MetaAddr == "" {
		t.Fatalf("layout %+v", l1)
	}
	if fi, err := os.Stat(l1.SecretFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("secret file: %v %v", fi, err)
	}
	o.Servers = 5 // a later up keeps the cluster's shape and addresses
	l2, err := o.layout()
	if err != nil {
		t.Fatal(err)
	}
	if l2.MetaAddr != l1.MetaAddr || len(l2.Servers) != 2 {
		t.Fatalf("second layout %+v differs from the first %+v", l2, l1)
	}
}

func TestRunningKnowsLiveDeadAndReusedPIDs(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "run"), 0o700)
	if running(dir, "x") {
		t.Fatal("no PID file, yet running")
	}
	// A live process whose command line does not name tandem: a reused PID.
	cmd := exec.Command("sleep", "10")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	os.WriteFile(pidFile(dir, "x"), []byte(strings.TrimSpace(itoa(cmd.Process.Pid))), 0o600)
	// Start returns while the child is still inside execve (vfork), when
	// its command line reads empty and running must give it the benefit
	// of the doubt; wait until it has one.
	for i := 0; i < 100; i++ {
		if b, _ := os.ReadFile("/proc/" + itoa(cmd.Process.Pid) + "/cmdline"); len(b) > 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if running(dir, "x") {
		b, _ := os.ReadFile("/proc/" + itoa(cmd.Process.Pid) + "/cmdline")
		t.Fatalf("a PID reused by `sleep` (command line %q) counts as a running tandem process", b)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if running(dir, "x") {
		t.Fatal("a dead process counts as running")
	}
}

func itoa(i int) string {
	s := ""
	for ; i > 0; i /= 10 {
		s = string(rune('0'+i%10)) + s
	}
	return s
}

func TestTailKeepsTheLastLines(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log")
	os.WriteFile(p, []byte("a\nb\nc\nd\n"), 0o600)
	if got := tail(p, 2); got != "c\nd" {
		t.Fatalf("tail = %q", got)
	}
}

func TestServersShareTheCoresUnlessGOMAXPROCSIsSet(t *testing.T) {
	t.Setenv("GOMAXPROCS", "")
	for _, c := range []struct {
		cpus, servers int
		want          string
	}{
		{2, 2, "GOMAXPROCS=1"},
		{16, 2, "GOMAXPROCS=8"},
		{2, 4, "GOMAXPROCS=1"}, // never less than one
		{8, 3, "GOMAXPROCS=2"},
	} {
		env := serviceEnv(c.cpus, c.servers)
		if len(env) != 1 || env[0] != c.want {
			t.Errorf("%d cpus, %d servers: env %q, want %q", c.cpus, c.servers, env, c.want)
		}
	}
	t.Setenv("GOMAXPROCS", "5")
	if env := serviceEnv(2, 2); env != nil {
		t.Errorf("with GOMAXPROCS set by the administrator: env %q, want none added", env)
	}
}

// A one-machine cluster's ports come from below the ephemeral range, so
// that no outgoing connection or port-0 listener (--metrics 127.0.0.1:0)
// can take one before its service binds it; each is free and distinct.
func TestFreePortsAreDistinctAndBelowTheEphemeralRange(t *testing.T) {
	_, ephemeral := reservablePorts()
	ports, err := freePorts(8)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, addr := range ports {
		_, p, _ := net.SplitHostPort(addr)
		port, _ := strconv.Atoi(p)
		if port < 10000 || port >= ephemeral || seen[addr] {
			t.Errorf("port %s: want distinct ports in [10000, %d)", addr, ephemeral)
		}
		seen[addr] = true
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("%s is not free once freePorts returns: %v", addr, err)
			continue
		}
		ln.Close()
	}
}
