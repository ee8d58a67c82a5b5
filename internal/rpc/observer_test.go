package rpc

import (
	"sync"
	"testing"
	"time"

	"tandemfs/internal/wire"
)

// observed is one RPC as an Observer saw it.
type observed struct {
	op             uint16
	sent, received int
	failed         bool
	took           time.Duration
}

type recorder struct {
	mu  sync.Mutex
	all []observed
}

func (r *recorder) Observe(op uint16, start time.Time, sent, received int, failed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all = append(r.all, observed{op, sent, received, failed, time.Since(start)})
}

func (r *recorder) seen() []observed {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]observed(nil), r.all...)
}

// Both ends tell their Observer of every RPC: its op, the bytes of the
// request and reply frames (the server's received are the client's sent),
// and whether it failed.
func TestServerAndClientObserveEveryRPC(t *testing.T) {
	served := &recorder{}
	_, addr, _ := observedEchoServer(t, secret, served)
	called := &recorder{}
	c := NewClient(addr, secret)
	c.Observer = called
	defer c.Close()

	payload := make([]byte, 10000)
	if _, err := echo(c, payload); err != nil {
		t.Fatal(err)
	}
	if err := c.Call(2, nil, nil); err == nil {
		t.Fatal("op 2 should fail with ENOENT")
	}
	dst := make([]byte, 20000)
	n, err := c.CallRead(1, func(e *wire.Enc) { e.Bytes(payload[:5000]) }, dst)
	if err != nil || n != 5000 {
		t.Fatalf("CallRead: %d bytes, %v", n, err)
	}

	s, cl := served.seen(), called.seen()
	if len(s) != 3 || len(cl) != 3 {
		t.Fatalf("server observed %d requests, client %d calls; want 3 each", len(s), len(cl))
	}
	wantOps, wantFailed := []uint16{1, 2, 1}, []bool{false, true, false}
	for i := range 3 {
		if s[i].op != wantOps[i] || cl[i].op != wantOps[i] {
			t.Errorf("rpc %d: ops %d (server) and %d (client), want %d", i, s[i].op, cl[i].op, wantOps[i])
		}
		if s[i].failed != wantFailed[i] || cl[i].failed != wantFailed[i] {
			t.Errorf("rpc %d: failed %v (server) and %v (client), want %v", i, s[i].failed, cl[i].failed, wantFailed[i])
		}
		if s[i].received != cl[i].sent || s[i].sent != cl[i].received {
			t.Errorf("rpc %d: server received %d and sent %d, client sent %d and received %d",
				i, s[i].received, s[i].sent, cl[i].sent, cl[i].received)
		}
		if cl[i].took < s[i].took {
			t.Errorf("rpc %d: the call (%v) took less than serving it (%v)", i, cl[i].took, s[i].took)
		}
	}
	if s[0].received < 10000 || s[0].sent < 10000 || s[2].received < 5000 || s[2].sent < 5000 {
		t.Errorf("frame sizes miss the payloads: %+v", s)
	}
}

// A call that never reaches a server is observed as failed, with nothing
// received.
func TestUnreachableCallIsObservedAsFailed(t *testing.T) {
	called := &recorder{}
	c := NewClient("127.0.0.1:1", secret)
	c.Observer = called
	c.DialTimeout = time.Second
	defer c.Close()
	if err := c.Call(1, nil, nil); err == nil {
		t.Fatal("a call to a closed port succeeded")
	}
	cl := called.seen()
	if len(cl) != 1 || !cl[0].failed || cl[0].received != 0 {
		t.Fatalf("observed %+v, want one failed call with nothing received", cl)
	}
}
