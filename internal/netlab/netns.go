package netlab

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// netnsDir is where `ip netns add` bind-mounts named namespaces.
const netnsDir = "/run/netns"

func nsPath(ns string) string { return filepath.Join(netnsDir, ns) }

// ip runs the ip command and puts its output into the error, because
// "exit status 2" alone says nothing about which step of a setup failed.
func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// procAttr is the process setup for everything started in a namespace.
// Setpgid keeps a Ctrl-C at the terminal away from the lab's processes, so
// they die by Close (or Pdeathsig) and not halfway through a test's
// cleanup. Pdeathsig kills them if the test process dies without calling
// Close (go test's timeout, a crash); it is best effort, because the kernel
// ties it to the thread that forked, not to the process.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// nsCommand returns a command that runs argv in the network namespace ns
// and nowhere else. nsenter --net switches only the network namespace and
// then execs argv in the same process, so the command's PID is argv's PID
// and a FUSE mount it makes is visible to the whole machine. (`ip netns
// exec` would also unshare the mount namespace and hide such a mount.)
func nsCommand(ctx context.Context, ns string, argv ...string) *exec.Cmd {
	args := append([]string{"--net=" + nsPath(ns), "--"}, argv...)
	cmd := exec.CommandContext(ctx, "nsenter", args...)
	cmd.SysProcAttr = procAttr()
	return cmd
}

// netnsExists reports whether the named namespace exists.
func netnsExists(ns string) bool {
	_, err := os.Stat(nsPath(ns))
	return err == nil
}

// addNetns creates a namespace with its loopback up. It refuses to reuse
// an existing one: that belongs to someone else or to a crashed run, and
// Cleanup is the explicit way to remove the latter.
func addNetns(ns string) error {
	if netnsExists(ns) {
		return fmt.Errorf("network namespace %s already exists (left by a crashed run? netlab.Cleanup removes it)", ns)
	}
	if err := ip("netns", "add", ns); err != nil {
		return err
	}
	return ip("-n", ns, "link", "set", "lo", "up")
}

// removeNetns kills every process in ns and deletes it. Deleting the
// namespace destroys the veth ends and bridges inside it, and a veth's
// peer goes with it, so nothing is left in other namespaces. The
// processes must go first: a namespace lives on, with its interfaces,
// while any process is still in it.
func removeNetns(ns string) error {
	if !netnsExists(ns) {
		return nil
	}
	killErr := killNetns(ns, killTimeout)
	if err := ip("netns", "del", ns); err != nil && netnsExists(ns) {
		return errors.Join(killErr, err)
	}
	return killErr
}

// netnsPIDs lists the processes whose network namespace is ns, the way
// `ip netns pids` does: same device and inode as the bind mount. The
// calling process is never listed, so no cleanup can kill the test itself.
func netnsPIDs(ns string) ([]int, error) {
	want, err := os.Stat(nsPath(ns))
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		// Processes that exit meanwhile (and zombies, which have no
		// namespaces left) fail Stat and are skipped.
		if fi, err := os.Stat(fmt.Sprintf("/proc/%d/ns/net", pid)); err == nil && os.SameFile(fi, want) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// killNetns sends SIGKILL to every process in ns until none is left. It
// lists again after each round because a process may fork between the
// listing and the kill; the PID is checked against the namespace right
// before the kill to keep the window for a reused PID small.
func killNetns(ns string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		pids, err := netnsPIDs(ns)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v in %s survive SIGKILL (stuck in the kernel?)", pids, ns)
		}
		for _, pid := range pids {
			if inNetns(pid, ns) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func inNetns(pid int, ns string) bool {
	want, err1 := os.Stat(nsPath(ns))
	fi, err2 := os.Stat(fmt.Sprintf("/proc/%d/ns/net", pid))
	return err1 == nil && err2 == nil && os.SameFile(fi, want)
}

// ipLink is the part of `ip -j -d link show` that tells whether a bridge
// or bridge port passes frames.
type ipLink struct {
	Name     string   `json:"ifname"`
	Flags    []string `json:"flags"`
	LinkInfo struct {
		SlaveData struct {
			State string `json:"state"` // of a bridge port
		} `json:"info_slave_data"`
	} `json:"linkinfo"`
}

func (l ipLink) up() bool { return slices.Contains(l.Flags, "UP") }

// ipLinks returns the links `ip link show sel...` selects in namespace ns.
func ipLinks(ns string, sel ...string) ([]ipLink, error) {
	args := append([]string{"-n", ns, "-j", "-d", "link", "show"}, sel...)
	var stderr bytes.Buffer
	cmd := exec.Command("ip", args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	var links []ipLink
	if err := json.Unmarshal(out, &links); err != nil {
		return nil, fmt.Errorf("parsing the output of ip %s: %v", strings.Join(args, " "), err)
	}
	return links, nil
}

// waitForwarding waits until the ports of bridge br in namespace ns (only
// the one named port, unless that is "") forward frames. Ports that are
// down, or whose bridge is, are cut on purpose (LinkDown, SwitchDown) and
// not waited for, so LinkUp during a SwitchDown returns at once. Without
// STP a port forwards as soon as it and its bridge are up, so this
// normally returns at once anyway; it is what makes New, LinkUp and
// SwitchUp return only when frames pass, without a guessed sleep.
func waitForwarding(ns, br, port string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		bridge, err := ipLinks(ns, "dev", br)
		if err != nil {
			return err
		}
		if len(bridge) != 1 || !bridge[0].up() {
			return nil
		}
		ports, err := ipLinks(ns, "master", br)
		if err != nil {
			return err
		}
		var blocked []string
		for _, p := range ports {
			if (port == "" || p.Name == port) && p.up() && p.LinkInfo.SlaveData.State != "forwarding" {
				blocked = append(blocked, p.Name+" ("+p.LinkInfo.SlaveData.State+")")
			}
		}
		if len(blocked) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("ports of bridge %s in %s not forwarding after %v: %s", br, ns, timeout, strings.Join(blocked, ", "))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// connect opens a TCP connection from inside ns with bash's /dev/tcp and
// closes it again. The test process cannot simply dial from its own
// threads: that needs setns(2), which package syscall does not offer on
// every architecture, and a thread left in the wrong namespace would be
// a nasty bug. The error distinguishes an answer (ErrRefused: the host is
// there, the port is closed) from silence (ErrUnreachable).
func connect(ns, ip string, port int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// $0 and $1 carry the address so no caller string is parsed as code.
	cmd := nsCommand(ctx, ns, "bash", "-c", `exec 3<>"/dev/tcp/$0/$1"`, ip, strconv.Itoa(port))
	// The messages below are parsed, so they must not be translated.
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	msg := stderr.String()
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("%w: no answer from %s:%d within %v", ErrUnreachable, ip, port, timeout)
	case strings.Contains(msg, "Connection refused"):
		return fmt.Errorf("%w: %s:%d", ErrRefused, ip, port)
	case strings.Contains(msg, "No route to host"), strings.Contains(msg, "Network is unreachable"):
		return fmt.Errorf("%w: %s:%d: %s", ErrUnreachable, ip, port, firstLine(msg))
	default:
		return fmt.Errorf("connecting to %s:%d from %s: %v: %s", ip, port, ns, err, firstLine(msg))
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}
