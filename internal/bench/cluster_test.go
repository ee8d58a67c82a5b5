package bench

import (
	"context"
	"encoding/binary"
	"net"
	"strings"
	"tandemfs/internal/rpc"
	"testing"
	"time"
)

var testSecret = rpc.Secret("bench-agent-test-secret-32-bytes")

func TestAnAgentRefusesADriverWithoutTheSecret(t *testing.T) {
	addr := startAgent(t)
	_, err := Dial(context.Background(), []string{addr}, rpc.Secret("some-other-secret-of-32-bytes!!!"))
	if err == nil || !strings.Contains(err.Error(), "agent "+addr+" refused us") {
		t.Fatalf("driver with a wrong secret: %v, want a refusal naming the agent", err)
	}
}

// startAgent runs an agent on a loopback port for the test's duration.
func startAgent(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- (&Agent{Secret: testSecret}).Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	})
	return ln.Addr().String()
}

func dialAgents(t *testing.T, n int) *Cluster {
	t.Helper()
	var addrs []string
	for range n {
		addrs = append(addrs, startAgent(t))
	}
	c, err := Dial(context.Background(), addrs, testSecret)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestADriverWithTwoAgentsAddsUpTheirResults(t *testing.T) {
	cl := dialAgents(t, 2)
	dir := t.TempDir()
	c := smallConfig(dir, 1, 4)
	for _, r := range runAll(t, cl, c) {
		if len(r.Agents) != 2 || !strings.Contains(r.Command, "clientlist") && !strings.Contains(r.Command, "hostfile") {
			t.Errorf("%s: agents %v, command %q: want both agents and a client list", r.Group(), r.Agents, r.Command)
		}
		var want uint64
		switch r.Test {
		case TestSeq:
			want = phaseOf(t, r, "write").Bytes
			if want != c.Seq.Size || phaseOf(t, r, "read").Bytes != want {
				t.Errorf("seq t%d: %d bytes written, want %d", r.Threads, want, c.Seq.Size)
			}
		case TestRand:
			if got := phaseOf(t, r, "write").Ops; got != uint64(r.Threads)*c.Rand.Ops {
				t.Errorf("rand t%d: %d ops, want %d", r.Threads, got, uint64(r.Threads)*c.Rand.Ops)
			}
		case TestMeta:
			if got := phaseOf(t, r, "create").Ops; got != uint64(c.Meta.Files) {
				t.Errorf("%s t%d: %d files created, want %d", r.Group(), r.Threads, got, c.Meta.Files)
			}
		}
		if p := r.Phases[0]; p.Workers != r.Threads {
			t.Errorf("%s t%d: %d worker results, want one per thread", r.Group(), r.Threads, p.Workers)
		}
	}
	assertEmpty(t, dir)
}

func TestWorkersAreSharedOutInContiguousRanges(t *testing.T) {
	var got [][2]int
	for i := range 3 {
		first, count := share(7, 3, i)
		got = append(got, [2]int{first, count})
	}
	if want := [][2]int{{0, 2}, {2, 2}, {4, 3}}; !equalPairs(got, want) {
		t.Errorf("7 workers over 3 agents: %v, want %v", got, want)
	}
	if first, count := share(1, 2, 0); first != 0 || count != 0 {
		t.Errorf("1 worker over 2 agents: the first gets %d+%d, want none (the second runs it)", first, count)
	}
}

func equalPairs(a, b [][2]int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestAnUnreachableAgentIsNamedInTheError(t *testing.T) {
	good := startAgent(t)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close() // nothing listens there any more
	_, err := Dial(context.Background(), []string{good, dead}, testSecret)
	if err == nil || !strings.Contains(err.Error(), "agent "+dead+" is unreachable") || strings.Contains(err.Error(), good) {
		t.Errorf("error %v: want it to name %s, and only it", err, dead)
	}
}

func TestAnAgentErrorNamesTheAgentAndTheFailingOperation(t *testing.T) {
	cl := dialAgents(t, 2)
	c := smallConfig(t.TempDir(), 2)
	c.Tests = []string{TestMeta}
	j := mustJobs(t, c)[0]
	r := Execute(context.Background(), cl, j, Options{Observer: removeAfter{"create"}})
	if !strings.Contains(r.Error, "agent "+cl.Agents()[0]) || !strings.Contains(r.Error, "lstat "+j.Spec.Root) {
		t.Errorf("error %q: want the agent's address and the failed lstat", r.Error)
	}
}

func TestAnAgentRefusesScratchRootsOutsideItsOwnDirectories(t *testing.T) {
	cl := dialAgents(t, 1)
	s := Spec{Test: TestSeq, Root: "/etc", Workers: 1, FileSize: 4096, Record: 4096}
	_, err := cl.RunPhase(context.Background(), s, PhaseCleanup, nil)
	if err == nil || !strings.Contains(err.Error(), "not an absolute path named "+ScratchPrefix) {
		t.Errorf("cleanup of /etc: %v, want a refusal", err)
	}
}

func TestTheProtocolRefusesOversizedMessagesAndOtherVersions(t *testing.T) {
	addr := startAgent(t)
	conn, err := rpc.DialAuth(addr, testSecret, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := writeMessage(conn, request{Version: 99, Op: opHello}, time.Second); err != nil {
		t.Fatal(err)
	}
	var resp response
	if err := readMessage(conn, &resp, 5*time.Second); err != nil || !strings.Contains(resp.Error, "protocol version 99 not supported") {
		t.Errorf("version 99: %+v, %v", resp, err)
	}
	// A length over the limit makes the agent hang up without reading on.
	conn.Write(binary.BigEndian.AppendUint32(nil, MaxMessage+1))
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := conn.Read(make([]byte, 1)); err == nil {
		t.Errorf("agent answered %d bytes to an oversized message", n)
	}
	a, b := net.Pipe()
	defer a.Close()
	go b.Write(binary.BigEndian.AppendUint32(nil, MaxMessage+1))
	if err := readMessage(a, &resp, time.Second); err == nil || !strings.Contains(err.Error(), "exceeds") {
		t.Errorf("reading an oversized message: %v", err)
	}
}
