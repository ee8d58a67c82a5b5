package netlab

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// listenEnv makes the test binary a TCP server instead of running tests:
// the stand-in for a TandemFS server, started in a namespace with Start.
const listenEnv = "NETLAB_TEST_LISTEN"

func TestMain(m *testing.M) {
	if addr := os.Getenv(listenEnv); addr != "" {
		listen(addr)
		return
	}
	os.Exit(m.Run())
}

// listen accepts and drops connections on addr until killed.
func listen(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("listening on", ln.Addr())
	for {
		c, err := ln.Accept()
		if err != nil {
			os.Exit(1)
		}
		c.Close()
	}
}

// The test bed of every test: two servers on both networks, one client on
// the public one. Addresses follow from the order.
var twoServersOneClient = []HostSpec{
	{Name: "srv1", Public: true, Private: true},
	{Name: "srv2", Public: true, Private: true},
	{Name: "cli", Public: true},
}

const port = 7000

// newLab builds a lab for one test and closes it when the test ends,
// checking that nothing of it remains. Each test has its own prefix, so
// tests run in parallel; Cleanup first removes what a crashed earlier run
// of the same test left.
func newLab(t *testing.T, prefix string) *Lab {
	t.Helper()
	Skip(t)
	if err := Cleanup(prefix); err != nil {
		t.Fatal(err)
	}
	lab, err := New(prefix, twoServersOneClient)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lab.Close(); err != nil {
			t.Error(err)
		}
		checkGone(t, prefix)
	})
	return lab
}

// startListener starts the test binary as a server on h and waits until
// it accepts connections.
func startListener(t *testing.T, h *Host) *Proc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), h.Name()+"-listener.log")
	p, err := h.Start("listener", logPath, "env", fmt.Sprintf("%s=:%d", listenEnv, port), exe)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for h.Connect("127.0.0.1", port, 200*time.Millisecond) != nil {
		if time.Now().After(deadline) || p.Exited() {
			log, _ := os.ReadFile(logPath)
			t.Fatalf("listener on %s does not come up; log:\n%s", h.Name(), log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return p
}

func expectReach(t *testing.T, lab *Lab, from, ip string, want bool) {
	t.Helper()
	if got := lab.Reachable(from, ip, port); got != want {
		t.Errorf("Reachable(%s -> %s:%d) = %v, want %v", from, ip, port, got, want)
	}
}

// checkGone fails unless no namespace and no interface carrying prefix
// exists any more.
func checkGone(t *testing.T, prefix string) {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatalf("ip netns list: %v: %s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, prefix+"-") {
			t.Errorf("namespace left behind: %s", line)
		}
	}
	out, err = exec.Command("ip", "-o", "link").CombinedOutput()
	if err != nil {
		t.Fatalf("ip -o link: %v: %s", err, out)
	}
	if strings.Contains(string(out), prefix) {
		t.Errorf("interface with %q left in the host namespace:\n%s", prefix, out)
	}
}

// procState returns the state letter of /proc/PID/stat ("R", "S", "T",
// "Z", ...) or "" if there is no such process.
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// The command name in parentheses may contain spaces; the state
	// follows the last ')'.
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return fields[0]
}

func alive(pid int) bool {
	s := procState(pid)
	return s != "" && s != "Z"
}

// startOrphan starts, via Run, a background process that Start does not
// know about, as a daemonizing server would, and returns its PID.
func startOrphan(t *testing.T, h *Host) int {
	t.Helper()
	out, err := h.Run("sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!")
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func TestTopology(t *testing.T) {
	t.Parallel()
	lab := newLab(t, "nltopo")
	srv1, srv2, cli := lab.Host("srv1"), lab.Host("srv2"), lab.Host("cli")

	for _, c := range []struct{ got, want string }{
		{srv1.PublicIP(), "10.77.0.11"}, {srv1.PrivateIP(), "10.78.0.11"},
		{srv2.PublicIP(), "10.77.0.12"}, {srv2.PrivateIP(), "10.78.0.12"},
		{cli.PublicIP(), "10.77.0.13"}, {cli.PrivateIP(), ""},
	} {
		if c.got != c.want {
			t.Errorf("address %q, want %q", c.got, c.want)
		}
	}
	startListener(t, srv1)

	expectReach(t, lab, "cli", srv1.PublicIP(), true)
	expectReach(t, lab, "srv2", srv1.PrivateIP(), true)
	expectReach(t, lab, "srv2", srv1.PublicIP(), true)
	// The client has no leg on the private network and no default route.
	if err := cli.Connect(srv1.PrivateIP(), port, ReachTimeout); !errors.Is(err, ErrUnreachable) {
		t.Errorf("client -> private network: %v, want ErrUnreachable", err)
	}
	// A live host without a listener answers with a refusal.
	if err := cli.Connect(srv2.PublicIP(), port, ReachTimeout); !errors.Is(err, ErrRefused) {
		t.Errorf("client -> srv2 without listener: %v, want ErrRefused", err)
	}
	// The machine's own namespace gets no address of the lab.
	out, err := exec.Command("ip", "-o", "addr").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	if s := string(out); strings.Contains(s, "10.77.0.") || strings.Contains(s, "10.78.0.") {
		t.Errorf("lab address in the host namespace:\n%s", s)
	}
}

func TestLinkDownUp(t *testing.T) {
	t.Parallel()
	lab := newLab(t, "nllink")
	srv1 := lab.Host("srv1")
	startListener(t, srv1)

	if err := srv1.LinkDown(Private); err != nil {
		t.Fatal(err)
	}
	expectReach(t, lab, "srv2", srv1.PrivateIP(), false)
	expectReach(t, lab, "srv2", srv1.PublicIP(), true)
	expectReach(t, lab, "cli", srv1.PublicIP(), true)
	// Like a pulled cable: srv1 sees no carrier, its configuration stays.
	out, err := srv1.Run("ip", "-o", "link", "show", "priv")
	if err != nil || !strings.Contains(string(out), "NO-CARRIER") {
		t.Errorf("srv1's private interface after LinkDown: %v: %s", err, out)
	}

	if err := srv1.LinkUp(Private); err != nil {
		t.Fatal(err)
	}
	expectReach(t, lab, "srv2", srv1.PrivateIP(), true)

	if err := lab.Host("cli").LinkDown(Private); err == nil {
		t.Error("LinkDown of a network the host is not on succeeded")
	}
}

func TestSwitchDownUp(t *testing.T) {
	t.Parallel()
	lab := newLab(t, "nlswitch")
	srv1, srv2 := lab.Host("srv1"), lab.Host("srv2")
	startListener(t, srv1)

	if err := lab.SwitchDown(Public); err != nil {
		t.Fatal(err)
	}
	expectReach(t, lab, "cli", srv1.PublicIP(), false)
	expectReach(t, lab, "srv2", srv1.PublicIP(), false)
	if err := lab.Host("cli").Connect(srv2.PublicIP(), port, ReachTimeout); !errors.Is(err, ErrUnreachable) {
		t.Errorf("client -> srv2 with the public switch down: %v, want ErrUnreachable", err)
	}
	expectReach(t, lab, "srv2", srv1.PrivateIP(), true)
	// A cable replugged while the switch is down does not wait for it.
	if err := srv2.LinkDown(Public); err != nil {
		t.Fatal(err)
	}
	if err := srv2.LinkUp(Public); err != nil {
		t.Fatal(err)
	}

	if err := lab.SwitchUp(Public); err != nil {
		t.Fatal(err)
	}
	expectReach(t, lab, "cli", srv1.PublicIP(), true)
	expectReach(t, lab, "srv2", srv1.PublicIP(), true)
}

func TestKillAll(t *testing.T) {
	t.Parallel()
	lab := newLab(t, "nlkill")
	srv1, srv2 := lab.Host("srv1"), lab.Host("srv2")
	srv2Listener := startListener(t, srv2)
	p := startListener(t, srv1)
	orphan := startOrphan(t, srv1)

	if err := srv1.KillAll(); err != nil {
		t.Fatal(err)
	}
	if !p.Exited() {
		t.Error("listener survived KillAll")
	}
	if alive(orphan) {
		t.Errorf("orphan %d survived KillAll", orphan)
	}
	// The host is alive, its server is not.
	if err := srv2.Connect(srv1.PrivateIP(), port, ReachTimeout); !errors.Is(err, ErrRefused) {
		t.Errorf("srv2 -> crashed srv1: %v, want ErrRefused", err)
	}
	if srv2Listener.Exited() {
		t.Error("KillAll of srv1 killed srv2's process")
	}
	// The server restarts on the same host.
	startListener(t, srv1)
	expectReach(t, lab, "cli", srv1.PublicIP(), true)
}

func TestProcSignals(t *testing.T) {
	t.Parallel()
	lab := newLab(t, "nlsignal")
	srv1 := lab.Host("srv1")
	p := startListener(t, srv1)

	if err := p.Wait(10 * time.Millisecond); !errors.Is(err, ErrTimeout) {
		t.Errorf("Wait on a running process: %v, want ErrTimeout", err)
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, p.PID(), true)
	// A frozen server still completes handshakes in the kernel.
	expectReach(t, lab, "cli", srv1.PublicIP(), true)
	if err := p.Cont(); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, p.PID(), false)

	if err := p.Kill9(); err != nil {
		t.Fatal(err)
	}
	if !p.Exited() {
		t.Error("not Exited after Kill9")
	}
	var exit *exec.ExitError
	if err := p.Wait(0); !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("Wait after Kill9: %v, want killed by SIGKILL", err)
	}
	if err := p.Signal(syscall.SIGTERM); !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("Signal after exit: %v, want os.ErrProcessDone", err)
	}
	if err := p.Kill9(); err != nil {
		t.Errorf("second Kill9: %v", err)
	}
}

// waitStopped waits until the process is stopped (state "T") or running
// again; a signal takes effect asynchronously.
func waitStopped(t *testing.T, pid int, stopped bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for (procState(pid) == "T") != stopped {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d in state %q, want stopped=%v", pid, procState(pid), stopped)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestCloseRemovesEverything(t *testing.T) {
	t.Parallel()
	Skip(t)
	const prefix = "nlclose"
	if err := Cleanup(prefix); err != nil {
		t.Fatal(err)
	}
	lab, err := New(prefix, twoServersOneClient)
	if err != nil {
		t.Fatal(err)
	}
	p := startListener(t, lab.Host("srv1"))
	frozen := startListener(t, lab.Host("srv2"))
	if err := frozen.Stop(); err != nil {
		t.Fatal(err)
	}
	orphan := startOrphan(t, lab.Host("cli"))

	if err := lab.Close(); err != nil {
		t.Fatal(err)
	}
	checkGone(t, prefix)
	if !p.Exited() || !frozen.Exited() {
		t.Error("a started process survived Close")
	}
	if alive(orphan) {
		t.Errorf("orphan %d survived Close", orphan)
	}
	if err := lab.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := lab.Host("srv1").Start("late", "", "true"); !errors.Is(err, ErrClosed) {
		t.Errorf("Start after Close: %v, want ErrClosed", err)
	}
	if _, err := lab.Host("srv1").Run("true"); !errors.Is(err, ErrClosed) {
		t.Errorf("Run after Close: %v, want ErrClosed", err)
	}
	var nilLab *Lab
	if err := nilLab.Close(); err != nil {
		t.Errorf("Close of a nil lab: %v", err)
	}
}

// A test process that dies leaves its lab behind; Cleanup removes it, and a
// Close that comes after all still succeeds.
func TestCleanupAfterCrash(t *testing.T) {
	t.Parallel()
	Skip(t)
	const prefix = "nlcrash"
	if err := Cleanup(prefix); err != nil {
		t.Fatal(err)
	}
	lab, err := New(prefix, twoServersOneClient)
	if err != nil {
		t.Fatal(err)
	}
	orphan := startOrphan(t, lab.Host("srv2"))

	if err := Cleanup(prefix); err != nil {
		t.Fatal(err)
	}
	checkGone(t, prefix)
	if alive(orphan) {
		t.Errorf("orphan %d survived Cleanup", orphan)
	}
	if err := lab.Close(); err != nil {
		t.Errorf("Close after Cleanup: %v", err)
	}
}

// New fails on a namespace that exists already, removes what it created
// itself, and leaves the foreign namespace alone.
func TestNewFailureRemovesOnlyItsOwn(t *testing.T) {
	t.Parallel()
	Skip(t)
	const prefix = "nlfail"
	if err := Cleanup(prefix); err != nil {
		t.Fatal(err)
	}
	foreign := prefix + "-srv2"
	if err := ip("netns", "add", foreign); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := ip("netns", "del", foreign); err != nil {
			t.Error(err)
		}
		checkGone(t, prefix)
	}()

	lab, err := New(prefix, twoServersOneClient)
	if err == nil {
		lab.Close()
		t.Fatal("New succeeded although a namespace existed")
	}
	for _, ns := range []string{prefix + "-sw", prefix + "-srv1", prefix + "-cli"} {
		if netnsExists(ns) {
			t.Errorf("failed New left %s behind", ns)
		}
	}
	if !netnsExists(foreign) {
		t.Errorf("failed New removed %s, which it did not create", foreign)
	}
}

func TestValidation(t *testing.T) {
	t.Parallel()
	ok := []HostSpec{{Name: "a", Public: true}}
	for _, c := range []struct {
		prefix string
		hosts  []HostSpec
	}{
		{"", ok},
		{"has-dash", ok},
		{"Upper", ok},
		{"waytoolongprefix", ok},
		{"nlval", nil},
		{"nlval", []HostSpec{{Name: "sw", Public: true}}},
		{"nlval", []HostSpec{{Name: "a-b", Public: true}}},
		{"nlval", []HostSpec{{Name: "elevenchars", Public: true}}},
		{"nlval", []HostSpec{{Name: "a", Public: true}, {Name: "a", Private: true}}},
		{"nlval", []HostSpec{{Name: "nonet"}}},
	} {
		if lab, err := New(c.prefix, c.hosts); err == nil {
			lab.Close()
			t.Errorf("New(%q, %v) succeeded", c.prefix, c.hosts)
		}
	}
	if err := Cleanup("bad-prefix"); err == nil {
		t.Error("Cleanup with an invalid prefix succeeded")
	}
}
