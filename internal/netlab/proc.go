package netlab

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// ErrTimeout is returned by Wait for a process that is still running.
var ErrTimeout = errors.New("netlab: process still running")

// Proc is a process started by Host.Start.
type Proc struct {
	name string
	host *Host
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has been reaped
	err  error         // cmd.Wait's result; read only after done is closed
}

// newProc reaps the process in the background, so it never lingers as a
// zombie and Exited and Wait need no caller to sit in cmd.Wait.
func newProc(name string, h *Host, cmd *exec.Cmd) *Proc {
	p := &Proc{name: name, host: h, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p
}

// Name returns the name given to Start.
func (p *Proc) Name() string { return p.name }

// Host returns the host the process runs on.
func (p *Proc) Host() *Host { return p.host }

// PID returns the process ID (that of argv, since nsenter execs it).
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Signal sends sig to the process. Once the process has been reaped it
// returns os.ErrProcessDone and signals nothing, so a reused PID is safe.
func (p *Proc) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Stop freezes the process with SIGSTOP: a hung server that still holds its
// sockets, so peers see connections that accept but never answer.
func (p *Proc) Stop() error { return p.Signal(syscall.SIGSTOP) }

// Cont resumes a process frozen by Stop.
func (p *Proc) Cont() error { return p.Signal(syscall.SIGCONT) }

// Kill9 crashes the process with SIGKILL and returns once it has been
// reaped. A process that had already exited is no error.
func (p *Proc) Kill9() error {
	p.kill()
	if err := p.Wait(killTimeout); errors.Is(err, ErrTimeout) {
		return fmt.Errorf("netlab: %s (pid %d) survives SIGKILL", p.name, p.PID())
	}
	return nil
}

// kill sends SIGKILL without waiting; SIGKILL works on stopped processes too.
func (p *Proc) kill() { p.Signal(syscall.SIGKILL) }

// Exited reports whether the process has exited (and been reaped).
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Done returns a channel that is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Wait waits up to timeout for the process to exit. It returns ErrTimeout
// if it is still running, otherwise what exec.Cmd.Wait returned: nil for
// exit status 0, an *exec.ExitError for anything else, a signal included.
func (p *Proc) Wait(timeout time.Duration) error {
	// Checked first because select picks at random among ready cases, and
	// with a zero timeout the timer may be ready too.
	if p.Exited() {
		return p.err
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
		return p.err
	case <-t.C:
		return ErrTimeout
	}
}
