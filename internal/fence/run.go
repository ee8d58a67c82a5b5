package fence

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// outputTail is how much of an agent's combined stdout and stderr a Result
// keeps: the end, where fence-agents print why they failed.
const outputTail = 4 << 10

// waitDelay bounds how long Fence waits for an agent's output pipe to close
// after the agent has exited or been killed. Only a descendant that left the
// agent's process group can hold it open that long, and it must not hold up
// the next agent.
const waitDelay = 2 * time.Second

// Server identifies the storage server to fence. Agents see it in the
// environment as TANDEM_FENCE_SERVER_UUID, _ADDR and _ID, so that one
// generic agent script can serve every server.
type Server struct {
	UUID string
	Addr string // host:port of its storage service
	ID   uint32
}

// String names the server for logs: its UUID, with its address if known.
func (s Server) String() string {
	switch {
	case s.UUID != "" && s.Addr != "":
		return s.UUID + " (" + s.Addr + ")"
	case s.UUID != "":
		return s.UUID
	case s.Addr != "":
		return s.Addr
	}
	return "#" + strconv.FormatUint(uint64(s.ID), 10)
}

// Result is what one agent run did. It holds no options, as those may hold
// credentials.
type Result struct {
	Agent    string        // Agent.Name
	Command  string        // Agent.Command
	OK       bool          // the agent exited with status 0
	Err      string        // why not, if !OK: "exit status 1", "timed out after 20s", ...
	Duration time.Duration // from start to exit
	Output   string        // the end of its combined output, trimmed
}

// Outcome is the result of fencing one server.
type Outcome struct {
	Server   Server
	Started  time.Time
	Duration time.Duration // of the whole fence, all agents together
	Results  []Result      // one per agent run, in the order run
	Fenced   bool          // some agent succeeded
	By       string        // the name of the agent that succeeded
}

// String is a one-line summary for logs, such as
// "server srv1 fenced by pdu after idrac failed (exit status 1) in 1.2s".
func (o Outcome) String() string {
	var failed []string
	for _, r := range o.Results {
		if !r.OK {
			failed = append(failed, fmt.Sprintf("%s failed (%s)", r.Agent, r.Err))
		}
	}
	head := "server " + o.Server.String()
	switch {
	case o.Fenced && len(failed) == 0:
		return fmt.Sprintf("%s fenced by %s in %s", head, o.By, roundDuration(o.Duration))
	case o.Fenced:
		return fmt.Sprintf("%s fenced by %s after %s in %s", head, o.By, strings.Join(failed, ", "), roundDuration(o.Duration))
	case len(o.Results) == 0:
		return head + " NOT fenced: no fence agent configured"
	}
	return fmt.Sprintf("%s NOT fenced: %s in %s", head, strings.Join(failed, ", "), roundDuration(o.Duration))
}

// roundDuration keeps log lines short: "1.2s", "340ms".
func roundDuration(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}

// Fence runs the server's agents (see AgentsFor) one after the other until
// one succeeds, each bounded by the config's timeout. It stops early when
// ctx is done. The Outcome says whether the server was fenced; it has no
// Results if no agent is configured for the server. Fence may be called
// for several servers at once.
func (c *Config) Fence(ctx context.Context, server Server) Outcome {
	o := Outcome{Server: server, Started: time.Now()}
	for _, a := range c.AgentsFor(server.UUID, server.Addr) {
		r := c.run(ctx, a, server)
		o.Results = append(o.Results, r)
		if r.OK {
			o.Fenced, o.By = true, a.Name
			break
		}
		if ctx.Err() != nil {
			break
		}
	}
	o.Duration = time.Since(o.Started)
	return o
}

// run runs one agent the fence-agents way and reports what happened.
func (c *Config) run(ctx context.Context, a Agent, s Server) Result {
	r := Result{Agent: a.Name, Command: a.Command}
	timeout := c.timeout()
	// The clock starts before the deadline does, so an agent that times
	// out is reported as running at least the timeout.
	start := time.Now()
	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	cmd := exec.CommandContext(runCtx, a.Command)
	cmd.Stdin = strings.NewReader(agentInput(a, c.action()))
	// One writer for both, so exec copies them through one pipe in the
	// order the agent wrote them (and only one goroutine writes to it).
	out := &tailBuffer{max: outputTail}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(),
		"TANDEM_FENCE_SERVER_UUID="+s.UUID,
		"TANDEM_FENCE_SERVER_ADDR="+s.Addr,
		"TANDEM_FENCE_SERVER_ID="+strconv.FormatUint(uint64(s.ID), 10))
	// Its own process group, so that a timeout kills what the agent
	// started too (ipmitool, ssh, sleep), not just the shell script.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killGroup(cmd.Process.Pid) }
	cmd.WaitDelay = waitDelay

	err := cmd.Run()
	r.Duration = time.Since(start)
	if cmd.Process != nil {
		// Whatever the agent left behind must not go on acting on the
		// server while the next agent runs or after we have reported.
		// The group ID cannot have been reused while members remain, and
		// Linux hands out PIDs in sequence, so this kills only leftovers.
		killGroup(cmd.Process.Pid)
	}
	r.Output = out.String()

	switch {
	case cmd.ProcessState != nil && cmd.ProcessState.Success():
		// Exit status 0 is the agent's word that the server is off, even
		// if it left its output pipe open past waitDelay.
		r.OK = true
	case ctx.Err() != nil:
		r.Err = "canceled: " + ctx.Err().Error()
	case errors.Is(runCtx.Err(), context.DeadlineExceeded):
		r.Err = fmt.Sprintf("timed out after %s", timeout)
	case err != nil:
		r.Err = err.Error()
	default:
		r.Err = "unknown failure" // not reached: Run returns an error unless the agent exited 0
	}
	return r
}

// agentInput is the agent's stdin: action first, then the options sorted by
// key so that runs are reproducible. port/plug come from the options only;
// Fence cannot know which outlet or BMC user a server has.
func agentInput(a Agent, action string) string {
	var b strings.Builder
	b.WriteString("action=" + action + "\n")
	keys := make([]string, 0, len(a.Options))
	for k := range a.Options {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b.WriteString(k + "=" + a.Options[k] + "\n")
	}
	return b.String()
}

// killGroup sends SIGKILL to the process group led by pid. A group that is
// already gone is not an error: it is what we want.
func killGroup(pid int) error {
	if pid <= 0 {
		// kill(0) and kill(-1) would hit our own group or everything.
		return fmt.Errorf("fence: refusing to kill process group %d", pid)
	}
	err := syscall.Kill(-pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}

// tailBuffer keeps the last max bytes written to it. exec.Cmd writes to it
// from a single goroutine (Stdout and Stderr are the same writer) and it is
// read only after Run returns, so it needs no lock.
type tailBuffer struct {
	max     int
	buf     []byte
	dropped bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	// Cut only when twice the limit, so a chatty agent does not make us
	// copy the buffer on every write.
	if len(t.buf) > 2*t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
		t.dropped = true
	}
	return len(p), nil
}

// String is the kept output, trimmed, and marked if its start was dropped.
func (t *tailBuffer) String() string {
	b := t.buf
	dropped := t.dropped
	if len(b) > t.max {
		b, dropped = b[len(b)-t.max:], true
	}
	// The cut may have split a UTF-8 sequence.
	s := strings.TrimSpace(strings.ToValidUTF8(string(b), ""))
	if dropped {
		s = "[...] " + s
	}
	return s
}
