package netlab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Host is one namespace of a lab: a machine with a leg on one or both
// networks.
type Host struct {
	lab  *Lab
	name string
	ns   string
	ip   map[Net]string // only the networks the host is on; fixed after New
}

// Name returns the host's name as given in its HostSpec.
func (h *Host) Name() string { return h.name }

// Netns returns the name of the host's namespace, for `ip -n` or nsenter.
func (h *Host) Netns() string { return h.ns }

// PublicIP returns the host's public address, or "" if it has none.
func (h *Host) PublicIP() string { return h.ip[Public] }

// PrivateIP returns the host's private address, or "" if it has none.
func (h *Host) PrivateIP() string { return h.ip[Private] }

// IP returns the host's address on n, or "" if it is not on n.
func (h *Host) IP(n Net) string { return h.ip[n] }

// port is the name of the host's port on network n's bridge.
func (h *Host) port(n Net) string { return n.dev() + "-" + h.name }

// Start starts argv in the host's network namespace with stdout and stderr
// appended to logPath ("" discards them; appending keeps the log of an
// earlier run when a test restarts a server with the same log). name only
// labels the process in errors. The process is killed by Close at the
// latest.
func (h *Host) Start(name, logPath string, argv ...string) (*Proc, error) {
	if len(argv) == 0 {
		return nil, errors.New("netlab: Start needs a command")
	}
	// nsenter would report a missing program only as exit status 127 in
	// the log; look it up here to fail in the test instead.
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return nil, fmt.Errorf("netlab: starting %s on %s: %w", name, h.name, err)
	}
	if logPath == "" {
		logPath = os.DevNull
	}
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("netlab: starting %s on %s: %w", name, h.name, err)
	}
	// The child has its own descriptor after Start; ours is not needed.
	defer logf.Close()

	cmd := nsCommand(context.Background(), h.ns, append([]string{path}, argv[1:]...)...)
	cmd.Stdout, cmd.Stderr = logf, logf

	// Holding the lock across Start means Close either sees this process
	// in its list or this Start sees the lab closed: none slips through.
	l := h.lab
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, ErrClosed
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("netlab: starting %s on %s: %w", name, h.name, err)
	}
	p := newProc(name, h, cmd)
	l.procs = append(l.procs, p)
	return p, nil
}

// Run runs argv to completion in the host's network namespace and returns
// its combined stdout and stderr.
func (h *Host) Run(argv ...string) ([]byte, error) {
	return h.RunContext(context.Background(), argv...)
}

// runWaitDelay is how long Run waits, after argv exited, for its output
// pipe to close. A background child that inherited the pipe would
// otherwise block Run until the child exits; with the delay Run returns
// exec.ErrWaitDelay instead. Daemons started by Run should redirect their
// output.
const runWaitDelay = 2 * time.Second

// RunContext is Run with a context that kills argv when it is done.
func (h *Host) RunContext(ctx context.Context, argv ...string) ([]byte, error) {
	if len(argv) == 0 {
		return nil, errors.New("netlab: Run needs a command")
	}
	if h.lab.isClosed() {
		return nil, ErrClosed
	}
	cmd := nsCommand(ctx, h.ns, argv...)
	cmd.WaitDelay = runWaitDelay
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("netlab: %s on %s: %w", strings.Join(argv, " "), h.name, err)
	}
	return out, nil
}

func (l *Lab) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// Connect opens a TCP connection from the host to ip:port and closes it
// again. It returns nil if the connection was established, an error
// wrapping ErrRefused if the peer answered but nothing listens (a crashed
// server on a live host), and one wrapping ErrUnreachable if no answer came
// within timeout or there is no route (a cut network).
func (h *Host) Connect(ip string, port int, timeout time.Duration) error {
	return connect(h.ns, ip, port, timeout)
}

// LinkDown pulls the host's cable to network n. It sets the switch-side
// end of the veth down rather than the host's interface, because that is
// what a pulled cable does: the host sees its carrier go away
// (NO-CARRIER) but its interface and address configuration stay as they
// were, and nothing the host's software does can bring the link back.
func (h *Host) LinkDown(n Net) error {
	if h.ip[n] == "" {
		return fmt.Errorf("netlab: host %s is not on the %v network", h.name, n)
	}
	return ip("-n", h.lab.sw, "link", "set", h.port(n), "down")
}

// LinkUp plugs the cable back in and returns once the switch port
// forwards again.
func (h *Host) LinkUp(n Net) error {
	if h.ip[n] == "" {
		return fmt.Errorf("netlab: host %s is not on the %v network", h.name, n)
	}
	if err := ip("-n", h.lab.sw, "link", "set", h.port(n), "up"); err != nil {
		return err
	}
	return waitForwarding(h.lab.sw, n.dev(), h.port(n), readyTimeout)
}

// KillAll crashes the host: SIGKILL to every process in its namespace,
// whoever started it, and returns when they are gone and the ones Start
// started have been reaped (so their Exited is true). The host itself
// stays; Start may start new processes on it.
func (h *Host) KillAll() error {
	var errs []error
	if err := killNetns(h.ns, killTimeout); err != nil {
		errs = append(errs, err)
	}
	h.lab.mu.Lock()
	procs := h.lab.procs
	h.lab.mu.Unlock()
	for _, p := range procs {
		if p.host == h {
			if err := p.Wait(killTimeout); errors.Is(err, ErrTimeout) {
				errs = append(errs, fmt.Errorf("%s (pid %d) survives SIGKILL", p.name, p.PID()))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("netlab: KillAll on %s: %w", h.name, err)
	}
	return nil
}
