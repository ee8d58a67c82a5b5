package fence

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"tandemfs/internal/testenv"
	"testing"
	"time"
)

// The tests write small shell scripts into t.TempDir() as agents. They do
// not use t.Parallel: exec of a file that another test's fork still holds
// open for writing fails with ETXTBSY.

// script writes an executable /bin/sh script with this body and returns its
// path.
func script(t *testing.T, name, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// marker is a file an agent creates to show that it ran.
func marker(t *testing.T) string {
	return filepath.Join(t.TempDir(), "ran")
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// srv1 is the server the tests fence.
var srv1 = Server{UUID: "srv1", Addr: "10.0.0.1:7001", ID: 1}

// pair is a config that fences srv1 with idrac first and pdu second, the
// NSS-HA pair of the white papers.
func pair(timeout time.Duration, idrac, pdu string) *Config {
	return &Config{Timeout: timeout, Servers: map[string][]Agent{"srv1": {
		{Name: "idrac", Command: idrac},
		{Name: "pdu", Command: pdu},
	}}}
}

func TestPrimarySucceedsSecondaryIsNotRun(t *testing.T) {
	pduRan := marker(t)
	c := pair(0,
		script(t, "idrac", "echo 'Success: Powered OFF'"),
		script(t, "pdu", "touch "+pduRan))

	o := c.Fence(context.Background(), srv1)

	if !o.Fenced || o.By != "idrac" {
		t.Fatalf("Fenced=%v By=%q, want fenced by idrac: %s", o.Fenced, o.By, o)
	}
	if len(o.Results) != 1 {
		t.Fatalf("%d results, want 1 (only the primary): %+v", len(o.Results), o.Results)
	}
	r := o.Results[0]
	if !r.OK || r.Err != "" || r.Output != "Success: Powered OFF" || r.Command != c.Servers["srv1"][0].Command {
		t.Errorf("result %+v", r)
	}
	if exists(pduRan) {
		t.Error("the secondary agent ran although the primary succeeded")
	}
	if want := "server srv1 (10.0.0.1:7001) fenced by idrac in "; !strings.HasPrefix(o.String(), want) {
		t.Errorf("String() = %q, want prefix %q", o, want)
	}
}

func TestPrimaryFailsSecondaryFences(t *testing.T) {
	c := pair(0,
		script(t, "idrac", "echo 'Unable to connect to 10.0.0.11' >&2; exit 1"),
		script(t, "pdu", "exit 0"))

	o := c.Fence(context.Background(), Server{UUID: "srv1"})

	if !o.Fenced || o.By != "pdu" {
		t.Fatalf("Fenced=%v By=%q, want fenced by pdu: %s", o.Fenced, o.By, o)
	}
	if len(o.Results) != 2 {
		t.Fatalf("%d results, want 2: %+v", len(o.Results), o.Results)
	}
	idrac, pdu := o.Results[0], o.Results[1]
	if idrac.Agent != "idrac" || idrac.OK || idrac.Err != "exit status 1" || idrac.Output != "Unable to connect to 10.0.0.11" {
		t.Errorf("primary result %+v", idrac)
	}
	if pdu.Agent != "pdu" || !pdu.OK {
		t.Errorf("secondary result %+v", pdu)
	}
	if re := `^server srv1 fenced by pdu after idrac failed \(exit status 1\) in \d.*s$`; !regexp.MustCompile(re).MatchString(o.String()) {
		t.Errorf("String() = %q, want match for %s", o, re)
	}
}

func TestAllAgentsFailMeansNotFenced(t *testing.T) {
	c := pair(0,
		script(t, "idrac", "echo idrac down; exit 1"),
		script(t, "pdu", "echo no such plug; exit 3"))

	o := c.Fence(context.Background(), srv1)

	if o.Fenced || o.By != "" {
		t.Fatalf("Fenced=%v By=%q, want not fenced", o.Fenced, o.By)
	}
	want := []struct{ agent, err, output string }{
		{"idrac", "exit status 1", "idrac down"},
		{"pdu", "exit status 3", "no such plug"},
	}
	if len(o.Results) != len(want) {
		t.Fatalf("%d results, want %d: %+v", len(o.Results), len(want), o.Results)
	}
	for i, w := range want {
		r := o.Results[i]
		if r.Agent != w.agent || r.OK || r.Err != w.err || r.Output != w.output {
			t.Errorf("result %d = %+v, want agent %s failing with %q, output %q", i, r, w.agent, w.err, w.output)
		}
	}
	if want := "NOT fenced: idrac failed (exit status 1), pdu failed (exit status 3) in "; !strings.Contains(o.String(), want) {
		t.Errorf("String() = %q, want it to contain %q", o, want)
	}
}

func TestMissingCommandFailsAndTheNextAgentRuns(t *testing.T) {
	c := pair(0, "/nonexistent/fence_ipmilan", script(t, "pdu", "exit 0"))

	o := c.Fence(context.Background(), srv1)

	if !o.Fenced || o.By != "pdu" {
		t.Fatalf("want fenced by pdu: %s", o)
	}
	if r := o.Results[0]; r.OK || !strings.Contains(r.Err, "/nonexistent/fence_ipmilan") {
		t.Errorf("primary result %+v, want an error naming the command", r)
	}
}

// processGone reports whether pid has exited. A zombie counts as gone: it
// runs no more code, it only waits for its parent (or init) to reap it.
func processGone(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(stat)
	s = s[strings.LastIndexByte(s, ')')+1:]
	return strings.HasPrefix(s, " Z") || strings.HasPrefix(s, " X")
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !processGone(pid); {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("process %d still runs", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestHangingAgentIsKilledWithItsChildrenAtTheTimeout(t *testing.T) {
	childPID := filepath.Join(t.TempDir(), "child.pid")
	c := pair(300*time.Millisecond,
		script(t, "idrac", "sleep 100 &\necho $! > "+childPID+"\necho waiting for the BMC\nsleep 100"),
		script(t, "pdu", "exit 0"))

	o := c.Fence(context.Background(), srv1)

	hung := o.Results[0]
	if hung.OK || hung.Err != "timed out after 300ms" {
		t.Fatalf("hanging agent: %+v, want it to time out after 300ms", hung)
	}
	// Killing the process group, not just the script, is what ends the run
	// this early: otherwise the child's copy of the output pipe would keep
	// it waiting for waitDelay, or for 100 s.
	if hung.Duration < 300*time.Millisecond || hung.Duration >= waitDelay {
		t.Errorf("hanging agent ran %v, want about the 300ms timeout", hung.Duration)
	}
	if hung.Output != "waiting for the BMC" {
		t.Errorf("output %q", hung.Output)
	}
	if !o.Fenced || o.By != "pdu" {
		t.Errorf("the next agent must run after a timeout: %s", o)
	}
	b, err := os.ReadFile(childPID)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid)
}

func TestCanceledContextStopsFencing(t *testing.T) {
	pduRan := marker(t)
	c := pair(0, script(t, "idrac", "sleep 100"), script(t, "pdu", "touch "+pduRan))
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)

	o := c.Fence(ctx, srv1)

	if o.Fenced || len(o.Results) != 1 || !strings.HasPrefix(o.Results[0].Err, "canceled") {
		t.Fatalf("want one canceled result: %s %+v", o, o.Results)
	}
	if exists(pduRan) {
		t.Error("an agent ran after the context was canceled")
	}
}

func TestAgentGetsOptionsOnStdinAndServerInEnvironment(t *testing.T) {
	dir := t.TempDir()
	agent := script(t, "agent", fmt.Sprintf(
		"cat > %[1]s/stdin\nenv | grep ^TANDEM_FENCE_ | sort > %[1]s/env", dir))
	c := &Config{Servers: map[string][]Agent{"*": {{
		Name:    "idrac",
		Command: agent,
		Options: map[string]string{"ip": "10.0.0.11", "username": "root", "password_script": "/etc/tandem/pw", "plug": "3"},
	}}}}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	if o := c.Fence(context.Background(), Server{UUID: "u-42", Addr: "10.0.0.1:7001", ID: 42}); !o.Fenced {
		t.Fatalf("not fenced: %s", o)
	}
	// action first, then the options sorted by key, one key=value a line.
	wantStdin := "action=off\nip=10.0.0.11\npassword_script=/etc/tandem/pw\nplug=3\nusername=root\n"
	if got := read("stdin"); got != wantStdin {
		t.Errorf("stdin:\n%s\nwant:\n%s", got, wantStdin)
	}
	wantEnv := "TANDEM_FENCE_SERVER_ADDR=10.0.0.1:7001\nTANDEM_FENCE_SERVER_ID=42\nTANDEM_FENCE_SERVER_UUID=u-42\n"
	if got := read("env"); got != wantEnv {
		t.Errorf("environment:\n%s\nwant:\n%s", got, wantEnv)
	}

	c.Action = "reboot"
	c.Fence(context.Background(), srv1)
	if got := read("stdin"); !strings.HasPrefix(got, "action=reboot\n") {
		t.Errorf("with Action reboot, stdin:\n%s", got)
	}
}

func TestOutputIsBoundedToItsEnd(t *testing.T) {
	c := pair(0, script(t, "idrac", "i=0; while [ $i -lt 200 ]; do echo 'line of forty-odd bytes of BMC chatter'; i=$((i+1)); done; echo last words; exit 1"), script(t, "pdu", "exit 0"))

	r := c.Fence(context.Background(), srv1).Results[0]

	if !strings.HasPrefix(r.Output, "[...] ") || !strings.HasSuffix(r.Output, "last words") {
		t.Errorf("output should be marked as cut and keep the end: %q...%q", r.Output[:20], r.Output[len(r.Output)-20:])
	}
	if len(r.Output) > outputTail+len("[...] ") {
		t.Errorf("output is %d bytes, want at most %d", len(r.Output), outputTail)
	}
}

func TestNoAgentsMeansNotFenced(t *testing.T) {
	var c *Config // no fence config at all
	o := c.Fence(context.Background(), srv1)
	if o.Fenced || len(o.Results) != 0 {
		t.Fatalf("%+v", o)
	}
	if want := "server srv1 (10.0.0.1:7001) NOT fenced: no fence agent configured"; o.String() != want {
		t.Errorf("String() = %q, want %q", o, want)
	}
}

// writeConfig writes a fence config file and returns its path.
func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fence.json")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoad(t *testing.T) {
	path := writeConfig(t, `{"timeout": "20s",
	  "servers": {
	    "srv1": [ {"name": "idrac", "command": "/usr/sbin/fence_ipmilan", "options": {"ip": "10.0.0.11", "username": "root", "password_script": "/etc/tandem/pw"}},
	              {"name": "pdu",   "command": "/usr/sbin/fence_apc", "options": {"ip": "10.0.0.50", "plug": 3}} ],
	    "*": [ {"command": "/usr/sbin/fence_ipmilan"} ] }}`)

	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{Timeout: 20 * time.Second, Action: "off", Servers: map[string][]Agent{
		"srv1": {
			{Name: "idrac", Command: "/usr/sbin/fence_ipmilan", Options: map[string]string{"ip": "10.0.0.11", "username": "root", "password_script": "/etc/tandem/pw"}},
			// A number is as good as a string for an option.
			{Name: "pdu", Command: "/usr/sbin/fence_apc", Options: map[string]string{"ip": "10.0.0.50", "plug": "3"}},
		},
		// An agent without a name is named after its command.
		"*": {{Name: "fence_ipmilan", Command: "/usr/sbin/fence_ipmilan", Options: map[string]string{}}},
	}}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("Load:\n%+v\nwant:\n%+v", c, want)
	}

	c, err = Load(writeConfig(t, `{"action": "reboot", "servers": {"*": [{"command": "fence_apc"}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Timeout != DefaultTimeout || c.Action != "reboot" {
		t.Errorf("timeout %v action %q, want the default 30s and reboot", c.Timeout, c.Action)
	}
}

func TestLoadErrorsNameTheFileAndTheProblem(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"unknown key", `{"timout": "20s", "servers": {"*": [{"command": "/bin/true"}]}}`, `unknown field "timout"`},
		{"unknown agent key", `{"servers": {"*": [{"comand": "/bin/true"}]}}`, `unknown field "comand"`},
		{"empty command", `{"servers": {"srv1": [{"name": "idrac", "command": ""}]}}`, `servers["srv1"][0]: empty command`},
		{"blank command", `{"servers": {"srv1": [{"name": "idrac", "command": "  "}]}}`, `servers["srv1"][0]: empty command`},
		{"duplicate names", `{"servers": {"srv1": [{"name": "idrac", "command": "/a"}, {"name": "idrac", "command": "/b"}]}}`, `servers["srv1"][1]: duplicate agent name "idrac"`},
		{"bad timeout", `{"timeout": "soon", "servers": {"*": [{"command": "/bin/true"}]}}`, `bad timeout "soon"`},
		{"timeout without unit", `{"timeout": "20", "servers": {"*": [{"command": "/bin/true"}]}}`, `bad timeout "20"`},
		{"negative timeout", `{"timeout": "-1s", "servers": {"*": [{"command": "/bin/true"}]}}`, `bad timeout "-1s"`},
		{"bad action", `{"action": "on", "servers": {"*": [{"command": "/bin/true"}]}}`, `bad action "on"`},
		{"action as an option", `{"servers": {"*": [{"command": "/bin/true", "options": {"action": "on"}}]}}`, `set "action" at the top level`},
		{"newline in an option", `{"servers": {"*": [{"command": "/bin/true", "options": {"password": "x\naction=on"}}]}}`, `option "password": value contains a newline`},
		{"list as an option", `{"servers": {"*": [{"command": "/bin/true", "options": {"plug": [3]}}]}}`, `option "plug": want a string, number or boolean`},
		{"no servers", `{"timeout": "20s"}`, `no "servers"`},
		{"server without agents", `{"servers": {"srv1": []}}`, `servers["srv1"]: no agents`},
		{"syntax error", "{\"servers\": {\n  \"*\": [{\"command\": \"/bin/true\",}]}}", `line 2, column`},
		{"two objects", `{"servers": {"*": [{"command": "/bin/true"}]}} {}`, `data after the JSON object`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeConfig(t, tc.text)
			_, err := Load(path)
			if err == nil {
				t.Fatalf("Load succeeded, want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want one naming %s and containing %q", err, path, tc.want)
			}
		})
	}

	t.Run("missing file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "nope.json")
		_, err := Load(path)
		if err == nil || !strings.Contains(err.Error(), path) || !errors.Is(err, os.ErrNotExist) {
			t.Errorf("error %v, want a not-exist error naming %s", err, path)
		}
	})
}

func TestAgentsForPrefersUUIDThenHostThenWildcard(t *testing.T) {
	agents := func(name string) []Agent { return []Agent{{Name: name, Command: "/bin/true"}} }
	c := &Config{Servers: map[string][]Agent{
		"srv1":      agents("by-uuid"),
		"10.0.0.2":  agents("by-host"),
		"fe80::1":   agents("by-ipv6-host"),
		Wildcard:    agents("default"),
		"10.0.0.99": agents("unused"),
	}}
	for _, tc := range []struct{ uuid, addr, want string }{
		{"srv1", "10.0.0.2:7001", "by-uuid"},
		{"srv2", "10.0.0.2:7001", "by-host"},
		{"", "10.0.0.2:7001", "by-host"},
		{"srv3", "[fe80::1]:7001", "by-ipv6-host"},
		{"srv3", "10.0.0.3:7001", "default"},
		{"", "", "default"},
	} {
		got := c.AgentsFor(tc.uuid, tc.addr)
		if len(got) != 1 || got[0].Name != tc.want {
			t.Errorf("AgentsFor(%q, %q) = %+v, want %s", tc.uuid, tc.addr, got, tc.want)
		}
	}

	delete(c.Servers, Wildcard)
	if got := c.AgentsFor("srv3", "10.0.0.3:7001"); got != nil {
		t.Errorf("without a wildcard, an unlisted server has agents %+v", got)
	}
	if got := (*Config)(nil).AgentsFor("srv1", ""); got != nil {
		t.Errorf("nil config has agents %+v", got)
	}
}

func TestLogKeepsTheLatestOutcomePerServer(t *testing.T) {
	l := NewLog(2)
	t0 := time.Now()
	outcome := func(uuid string, minute int, fenced bool) Outcome {
		return Outcome{Server: Server{UUID: uuid}, Started: t0.Add(time.Duration(minute) * time.Minute), Fenced: fenced}
	}
	l.Record(outcome("srv2", 0, false))
	l.Record(outcome("srv1", 1, false))
	l.Record(outcome("srv1", 2, false))
	l.Record(outcome("srv1", 3, true))

	latest := l.Latest()
	if len(latest) != 2 {
		t.Fatalf("Latest() has %d outcomes, want one per server: %+v", len(latest), latest)
	}
	if s := latest[0]; s.Server.UUID != "srv1" || !s.Fenced || !s.Started.Equal(t0.Add(3*time.Minute)) {
		t.Errorf("latest of srv1 = %+v, want the fenced one of minute 3", s)
	}
	if s := latest[1]; s.Server.UUID != "srv2" || !s.Started.Equal(t0) {
		t.Errorf("latest of srv2 = %+v", s)
	}
	if h := l.History("srv1"); len(h) != 2 || !h[0].Started.Equal(t0.Add(2*time.Minute)) {
		t.Errorf("History(srv1) = %+v, want the last 2, oldest first", h)
	}
}

func TestLogIsSafeForConcurrentUse(t *testing.T) {
	var l Log // the zero Log works too
	done := make(chan bool)
	for i := range 4 {
		go func() {
			for j := range 100 {
				l.Record(Outcome{Server: Server{UUID: fmt.Sprint("srv", i)}, Results: []Result{{Agent: fmt.Sprint(j)}}})
				l.Latest()
			}
			done <- true
		}()
	}
	for range 4 {
		<-done
	}
	latest := l.Latest()
	if len(latest) != 4 {
		t.Fatalf("%d servers, want 4", len(latest))
	}
	for _, o := range latest {
		if o.Results[0].Agent != "99" {
			t.Errorf("latest of %s is outcome %s, want 99", o.Server.UUID, o.Results[0].Agent)
		}
	}
	if h := l.History("srv0"); len(h) != DefaultKeep {
		t.Errorf("zero Log kept %d outcomes, want %d", len(h), DefaultKeep)
	}
}

// sampleAgent returns the path of one of the agents in scripts/fence.
func sampleAgent(t *testing.T, name string) string {
	t.Helper()
	path, err := filepath.Abs(filepath.Join("..", "..", "scripts", "fence", name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	return path
}

// startSleep starts a process standing in for a storage server.
func startSleep(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// wasKilled waits for cmd and reports whether SIGKILL ended it.
func wasKilled(cmd *exec.Cmd) bool {
	cmd.Wait()
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// The sample agents as the NSS-HA pair: a broken iDRAC, then a "PDU" that
// kills the server's process named in a pidfile.
func TestSampleAgentsKillByPidfileAfterABrokenIDRAC(t *testing.T) {
	server := startSleep(t, "sleep", "100")
	pidfile := filepath.Join(t.TempDir(), "storage.pid")
	if err := os.WriteFile(pidfile, []byte(strconv.Itoa(server.Process.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := &Config{Timeout: 10 * time.Second, Servers: map[string][]Agent{"srv1": {
		{Name: "idrac", Command: sampleAgent(t, "fence_tandem_fail")},
		{Name: "pdu", Command: sampleAgent(t, "fence_tandem_kill"), Options: map[string]string{"pidfile": pidfile}},
	}}}

	o := c.Fence(context.Background(), srv1)

	if !o.Fenced || o.By != "pdu" {
		t.Fatalf("want fenced by pdu: %s %+v", o, o.Results)
	}
	if r := o.Results[0]; !strings.Contains(r.Output, "simulated failure") {
		t.Errorf("fence_tandem_fail said %q", r.Output)
	}
	if r := o.Results[1]; !strings.Contains(r.Output, fmt.Sprintf("killed %d", server.Process.Pid)) {
		t.Errorf("fence_tandem_kill said %q, want it to name the PID it killed", r.Output)
	}
	if !wasKilled(server) {
		t.Errorf("server process ended with %v, want SIGKILL", server.ProcessState)
	}
}

func TestSampleKillAgentFailsWithNothingToFence(t *testing.T) {
	c := &Config{Servers: map[string][]Agent{"*": {{
		Name: "kill", Command: sampleAgent(t, "fence_tandem_kill"),
		Options: map[string]string{"pidfile": filepath.Join(t.TempDir(), "absent.pid")},
	}}}}

	o := c.Fence(context.Background(), srv1)

	if o.Fenced || o.Results[0].Err != "exit status 1" || !strings.Contains(o.Results[0].Output, "nothing to fence") {
		t.Errorf("want a failure saying there is nothing to fence: %+v", o.Results)
	}
}

// A PID file whose process has ended is a target already off: fenced, as
// the real agents answer for a node that is off.
func TestSampleKillAgentCountsAnEndedProcessAsFenced(t *testing.T) {
	done := exec.Command("true")
	if err := done.Run(); err != nil {
		t.Fatal(err)
	}
	pidfile := filepath.Join(t.TempDir(), "head.pid")
	os.WriteFile(pidfile, []byte(fmt.Sprintf("%d\n", done.Process.Pid)), 0o600)
	c := &Config{Servers: map[string][]Agent{"*": {{
		Name: "kill", Command: sampleAgent(t, "fence_tandem_kill"), Options: map[string]string{"pidfile": pidfile},
	}}}}
	if o := c.Fence(context.Background(), srv1); !o.Fenced || !strings.Contains(o.Results[0].Output, "Already OFF") {
		t.Errorf("an ended process: %s %+v", o, o.Results)
	}
}

// The failure matrix runs each storage server in its own network namespace;
// fencing one kills everything in it. Needs root and iproute2.
func TestSampleKillAgentKillsANetworkNamespace(t *testing.T) {
	testenv.RequireRoot(t)
	ns := fmt.Sprintf("tandem-fence-test-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		testenv.Unavailable(t, "ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "delete", ns).Run() })
	servers := []*exec.Cmd{
		startSleep(t, "ip", "netns", "exec", ns, "sleep", "100"),
		startSleep(t, "ip", "netns", "exec", ns, "sleep", "100"),
	}
	// Wait until both have entered the namespace.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		out, _ := exec.Command("ip", "netns", "pids", ns).Output()
		if len(strings.Fields(string(out))) == len(servers) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes in %s: %q", ns, out)
		}
	}
	c := &Config{Servers: map[string][]Agent{"*": {{
		Name: "netns", Command: sampleAgent(t, "fence_tandem_kill"), Options: map[string]string{"netns": ns},
	}}}}

	if o := c.Fence(context.Background(), srv1); !o.Fenced {
		t.Fatalf("not fenced: %s %+v", o, o.Results)
	}
	for _, s := range servers {
		if !wasKilled(s) {
			t.Errorf("process %d ended with %v, want SIGKILL", s.Process.Pid, s.ProcessState)
		}
	}
	// An empty namespace is nothing to fence.
	if o := c.Fence(context.Background(), srv1); o.Fenced {
		t.Errorf("fenced an empty namespace: %s", o)
	}
}
