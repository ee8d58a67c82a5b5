// Package netlab builds a test bed of several "hosts" on one Linux machine
// from network namespaces, so that high-availability tests can cut cables,
// kill switches and crash servers for real.
//
// Topology, all of it inside namespaces the lab creates (the machine's own
// namespace gets no interface, address or route):
//
//	<prefix>-sw        the switch: two bridges, "pub" and "priv"
//	<prefix>-<host>    one per host: interface "pub" (10.77.0.0/24) and/or
//	                   "priv" (10.78.0.0/24), each a veth whose other end,
//	                   "pub-<host>" or "priv-<host>", is a port of the
//	                   bridge of the same name in the switch
//
// The i-th host (counting from 0 in the slice given to New) has the address
// .11+i on each network it is attached to. There is no default route, so a
// host reaches exactly the networks it has a leg on.
//
// Processes are started with nsenter, which switches only the network
// namespace: they share the file systems, mounts (FUSE included) and PIDs
// of the test, and only their network is separate.
//
// Everything needs root, ip (iproute2), nsenter (util-linux) and bash;
// Skip skips a test that cannot have them. A lab is removed by Close; a
// lab whose test process died is removed by Cleanup with the same prefix.
package netlab

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Net names one of the two networks.
type Net int

const (
	// Public is the network clients use, 10.77.0.0/24.
	Public Net = iota + 1
	// Private is the servers' back-end network, 10.78.0.0/24.
	Private
)

func (n Net) String() string {
	switch n {
	case Public:
		return "public"
	case Private:
		return "private"
	}
	return fmt.Sprintf("Net(%d)", int(n))
}

// dev is the name of the network's bridge in the switch and of the
// host-side interface: short, and obvious in `ip -n NS addr` output.
func (n Net) dev() string {
	if n == Public {
		return "pub"
	}
	return "priv"
}

// subnet is the network's first three octets.
func (n Net) subnet() string {
	if n == Public {
		return "10.77.0"
	}
	return "10.78.0"
}

func (n Net) valid() bool { return n == Public || n == Private }

var nets = []Net{Public, Private}

// HostSpec describes one host of a lab.
type HostSpec struct {
	Name    string // [a-z][a-z0-9]*, at most 10 characters, not "sw"
	Public  bool   // attached to the public network
	Private bool   // attached to the private network
}

func (s HostSpec) on(n Net) bool {
	return n == Public && s.Public || n == Private && s.Private
}

// Timeouts. ReachTimeout is what Reachable waits for an answer; on these
// virtual links a working path answers within milliseconds.
const (
	ReachTimeout = time.Second
	readyTimeout = 5 * time.Second // for ports and paths to come up
	killTimeout  = 5 * time.Second // for killed processes to vanish
)

// Errors of Connect.
var (
	// ErrRefused means the peer answered but nothing listens on the port.
	ErrRefused = errors.New("connection refused")
	// ErrUnreachable means no answer at all: the path is cut.
	ErrUnreachable = errors.New("unreachable")
	// ErrClosed is returned for anything started on a closed lab.
	ErrClosed = errors.New("netlab: lab is closed")
)

var (
	// Neither prefixes nor host names contain '-', so a namespace name
	// "<prefix>-<host>" splits in exactly one way and Cleanup of one
	// prefix never matches another lab's namespaces. Interface names do
	// not contain the prefix (they live inside the lab's namespaces, where
	// no other lab's names can clash), so its length is not tied to the
	// 15-character limit of interface names.
	prefixRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,11}$`)
	// 10 characters leave room for "priv-" in the switch-side name, since
	// interface names have at most 15.
	hostRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,9}$`)
)

// maxHosts keeps the last address (.11+i) below the broadcast address.
const maxHosts = 200

// Lab is a running test bed. Its methods may be called concurrently.
type Lab struct {
	prefix string
	sw     string // the switch namespace
	hosts  []*Host
	byName map[string]*Host

	mu      sync.Mutex
	closed  bool
	created []string // namespaces this lab created, in creation order
	procs   []*Proc  // every process Start started

	closeOnce sync.Once
	closeErr  error
}

// New builds a lab: the switch namespace "<prefix>-sw" with both bridges,
// one namespace "<prefix>-<name>" per host, wired and addressed, and
// returns once frames pass between the hosts of each network. It fails if
// one of those namespaces exists already; on any failure it removes what it
// created (and nothing else) before it returns.
func New(prefix string, hosts []HostSpec) (*Lab, error) {
	if err := validate(prefix, hosts); err != nil {
		return nil, err
	}
	l := &Lab{prefix: prefix, sw: prefix + "-sw", byName: map[string]*Host{}}
	for i, spec := range hosts {
		h := &Host{lab: l, name: spec.Name, ns: prefix + "-" + spec.Name, ip: map[Net]string{}}
		for _, n := range nets {
			if spec.on(n) {
				h.ip[n] = fmt.Sprintf("%s.%d", n.subnet(), 11+i)
			}
		}
		l.hosts = append(l.hosts, h)
		l.byName[h.name] = h
	}
	if err := l.build(); err != nil {
		return nil, errors.Join(fmt.Errorf("netlab: building lab %s: %w", prefix, err), l.Close())
	}
	return l, nil
}

func validate(prefix string, hosts []HostSpec) error {
	if !prefixRE.MatchString(prefix) {
		return fmt.Errorf("netlab: prefix %q must match %s", prefix, prefixRE)
	}
	if len(hosts) == 0 || len(hosts) > maxHosts {
		return fmt.Errorf("netlab: need 1 to %d hosts, got %d", maxHosts, len(hosts))
	}
	seen := map[string]bool{}
	for _, h := range hosts {
		switch {
		case !hostRE.MatchString(h.Name) || h.Name == "sw":
			return fmt.Errorf("netlab: host name %q must match %s and not be \"sw\"", h.Name, hostRE)
		case seen[h.Name]:
			return fmt.Errorf("netlab: host name %q used twice", h.Name)
		case !h.Public && !h.Private:
			return fmt.Errorf("netlab: host %q is on no network", h.Name)
		}
		seen[h.Name] = true
	}
	return nil
}

// build creates the namespaces and links. Each namespace is recorded as
// soon as it exists, so Close after a failure removes exactly those.
func (l *Lab) build() error {
	if err := l.addNetns(l.sw); err != nil {
		return err
	}
	for _, n := range nets {
		if err := ip("-n", l.sw, "link", "add", n.dev(), "type", "bridge"); err != nil {
			return err
		}
		if err := ip("-n", l.sw, "link", "set", n.dev(), "up"); err != nil {
			return err
		}
	}
	for _, h := range l.hosts {
		if err := l.addNetns(h.ns); err != nil {
			return err
		}
		for _, n := range nets {
			if h.ip[n] != "" {
				if err := l.attach(h, n); err != nil {
					return err
				}
			}
		}
	}
	return l.waitReady()
}

func (l *Lab) addNetns(ns string) error {
	if err := addNetns(ns); err != nil {
		return err
	}
	l.mu.Lock()
	l.created = append(l.created, ns)
	l.mu.Unlock()
	return nil
}

// attach plugs host h into network n: a veth created directly with one end
// in the switch and one in the host, so no interface ever appears in the
// machine's own namespace, not even for a moment.
func (l *Lab) attach(h *Host, n Net) error {
	port := h.port(n)
	steps := [][]string{
		{"link", "add", port, "netns", l.sw, "type", "veth", "peer", "name", n.dev(), "netns", h.ns},
		{"-n", l.sw, "link", "set", port, "master", n.dev(), "up"},
		{"-n", h.ns, "addr", "add", h.ip[n] + "/24", "dev", n.dev()},
		{"-n", h.ns, "link", "set", n.dev(), "up"},
	}
	for _, args := range steps {
		if err := ip(args...); err != nil {
			return err
		}
	}
	return nil
}

// waitReady waits until every bridge port forwards and then proves it end
// to end: the first host of each network connects to a closed port of
// every other host on it. A refusal is the answer wanted, since it comes
// from the other host's kernel across the bridge.
func (l *Lab) waitReady() error {
	deadline := time.Now().Add(readyTimeout)
	for _, n := range nets {
		if err := waitForwarding(l.sw, n.dev(), "", readyTimeout); err != nil {
			return err
		}
		var on []*Host
		for _, h := range l.hosts {
			if h.ip[n] != "" {
				on = append(on, h)
			}
		}
		for i := 1; i < len(on); i++ {
			if err := waitPath(on[0], on[i].ip[n], deadline); err != nil {
				return err
			}
		}
	}
	return nil
}

// waitPath waits until from gets any answer from ip.
func waitPath(from *Host, ip string, deadline time.Time) error {
	const closedPort = 9 // discard; nothing listens in a new namespace
	for {
		err := connect(from.ns, ip, closedPort, 200*time.Millisecond)
		if err == nil || errors.Is(err, ErrRefused) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s cannot reach %s: %w", from.name, ip, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Prefix returns the prefix of the lab's namespace names.
func (l *Lab) Prefix() string { return l.prefix }

// SwitchNetns returns the name of the switch namespace, for `ip -n`.
func (l *Lab) SwitchNetns() string { return l.sw }

// Hosts returns the hosts in the order given to New.
func (l *Lab) Hosts() []*Host { return append([]*Host(nil), l.hosts...) }

// Host returns the named host. It panics for a name that is not in the
// lab: that is a mistake in the test, like a bad regexp in MustCompile.
func (l *Lab) Host(name string) *Host {
	h, ok := l.byName[name]
	if !ok {
		panic(fmt.Sprintf("netlab: lab %s has no host %q", l.prefix, name))
	}
	return h
}

// SwitchDown sets network n's bridge down: every port stops forwarding at
// once, while the hosts keep their carrier, as with a switch that hangs or
// loses its configuration (the hosts notice only by timeouts).
func (l *Lab) SwitchDown(n Net) error {
	if !n.valid() {
		return fmt.Errorf("netlab: invalid network %v", n)
	}
	return ip("-n", l.sw, "link", "set", n.dev(), "down")
}

// SwitchUp sets network n's bridge up again and returns when its ports
// forward (ports cut with LinkDown stay cut).
func (l *Lab) SwitchUp(n Net) error {
	if !n.valid() {
		return fmt.Errorf("netlab: invalid network %v", n)
	}
	if err := ip("-n", l.sw, "link", "set", n.dev(), "up"); err != nil {
		return err
	}
	return waitForwarding(l.sw, n.dev(), "", readyTimeout)
}

// Reachable reports whether the host named from can open a TCP connection
// to ip:port within ReachTimeout.
func (l *Lab) Reachable(from, ip string, port int) bool {
	return l.Host(from).Connect(ip, port, ReachTimeout) == nil
}

// Close kills every process the lab started and every other process in its
// namespaces, by PID, and deletes the namespaces, which removes the
// bridges and veths with them. It is safe to call more than once
// (later calls return the first call's result), on a lab whose namespaces
// Cleanup already removed, and on a nil *Lab.
func (l *Lab) Close() error {
	if l == nil {
		return nil
	}
	l.closeOnce.Do(func() { l.closeErr = l.close() })
	return l.closeErr
}

func (l *Lab) close() error {
	l.mu.Lock()
	l.closed = true // from here on Start refuses, so the lists are final
	procs, created := l.procs, l.created
	l.mu.Unlock()

	var errs []error
	for _, p := range procs {
		p.kill()
	}
	// Hosts first, the switch last: the reverse of creation.
	for i := len(created) - 1; i >= 0; i-- {
		if err := removeNetns(created[i]); err != nil {
			errs = append(errs, err)
		}
	}
	for _, p := range procs {
		if err := p.Wait(killTimeout); errors.Is(err, ErrTimeout) {
			errs = append(errs, fmt.Errorf("%s (pid %d) survives SIGKILL", p.name, p.PID()))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("netlab: closing lab %s: %w", l.prefix, err)
	}
	return nil
}

// Cleanup removes what a lab with this prefix left behind when its test
// process died before Close: it kills the processes in the namespaces
// "<prefix>-sw" and "<prefix>-<host>" and deletes them. Only use it for a
// prefix no running lab uses; a test with a fixed prefix calls it before
// New.
func Cleanup(prefix string) error {
	if !prefixRE.MatchString(prefix) {
		return fmt.Errorf("netlab: prefix %q must match %s", prefix, prefixRE)
	}
	entries, err := os.ReadDir(netnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		host, ok := strings.CutPrefix(e.Name(), prefix+"-")
		if ok && hostRE.MatchString(host) {
			if err := removeNetns(e.Name()); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
