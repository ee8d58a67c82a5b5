package rpc

import (
	"runtime"
	"testing"
	"time"
)

// A server with PollNext waits for a client's next request by polling,
// on all its connections at once.

func TestServerPollingSeesTheNextRequestOfACallerInARow(t *testing.T) {
	for _, poll := range []time.Duration{0, 50 * time.Millisecond} {
		srv, addr, _ := startEchoServer(t, &Server{Secret: secret, PollNext: poll})
		c := NewClient(addr, secret)
		for i := 0; i < 20; i++ {
			if _, err := echo(c, []byte("next")); err != nil {
				t.Fatal(err)
			}
		}
		c.Close()
		found := srv.polls.found.Load()
		if poll == 0 && found != 0 {
			t.Errorf("a server without PollNext saw %d requests by polling", found)
		}
		// The first call's request comes before any reply; of the other
		// 19, each sent right after a reply, most must be seen polling.
		if poll > 0 && found < 10 {
			t.Errorf("polling for %v after each reply saw %d of 19 requests sent right after one", poll, found)
		}
	}
}

// The poller watches every connection: a request on another connection
// ends its poll at once, even with one Go processor, where the scheduler
// would not look at the network while the poller runs.
func TestServerPollingEndsForARequestOnAnotherConnection(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	srv, addr, _ := startEchoServer(t, &Server{Secret: secret, PollNext: 5 * time.Second})
	a, b := NewClient(addr, secret), NewClient(addr, secret)
	defer a.Close()
	defer b.Close()
	// Each request ends the poll after the reply before it.
	for _, c := range []*Client{a, b, a} {
		if _, err := echo(c, []byte("connect")); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "a poll after a's reply", func() bool { return srv.polls.polling.Load() })
	before := srv.polls.found.Load()
	if _, err := echo(b, []byte("b, while the server polls after a")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Second)
	for srv.polls.found.Load() == before {
		if time.Now().After(deadline) {
			t.Fatal("a request on another connection did not end the poll after a's reply")
		}
		time.Sleep(time.Millisecond)
	}
}

// A poll lets the rest of the server run: a client that connects while
// it goes on is served long before it ends.
func TestServerPollingLetsANewConnectionIn(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	srv, addr, _ := startEchoServer(t, &Server{Secret: secret, PollNext: 5 * time.Second})
	a := NewClient(addr, secret)
	defer a.Close()
	if _, err := echo(a, []byte("a")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a poll after a's reply", func() bool { return srv.polls.polling.Load() })
	b := NewClient(addr, secret)
	defer b.Close()
	t0 := time.Now()
	if _, err := echo(b, []byte("b connects while the server polls")); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(t0); took > time.Second {
		t.Fatalf("a new connection's first call took %v while the server polled", took)
	}
}

// The poll set holds the listener (a new connection ends a poll) and each
// open connection, and drops a connection when it closes.
func TestServerPollSetFollowsItsListenerAndConnections(t *testing.T) {
	srv, addr, _ := startEchoServer(t, &Server{Secret: secret, PollNext: time.Millisecond})
	watched := func(n int) func() bool {
		return func() bool { set := srv.polls.fds.Load(); return set != nil && len(*set) == n }
	}
	waitFor(t, "the listener in the poll set", watched(1))
	c := NewClient(addr, secret)
	if _, err := echo(c, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the listener and one connection in the poll set", watched(2))
	c.Close()
	waitFor(t, "the closed connection out of the poll set", watched(1))
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// A server with more connections than pollNextMaxConns does not poll:
// that many clients keep it busy without, and poll(2) costs per
// descriptor.
func TestServerWithManyConnectionsDoesNotPoll(t *testing.T) {
	srv, addr, _ := startEchoServer(t, &Server{Secret: secret, PollNext: 50 * time.Millisecond})
	var clients []*Client
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	for range pollNextMaxConns + 1 {
		c := NewClient(addr, secret)
		clients = append(clients, c)
		if _, err := echo(c, []byte("connect")); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "every connection in the poll set", func() bool {
		set := srv.polls.fds.Load()
		return set != nil && len(*set) == pollNextMaxConns+2 // and the listener
	})
	before := srv.polls.found.Load()
	for range 20 {
		if _, err := echo(clients[0], []byte("next")); err != nil {
			t.Fatal(err)
		}
	}
	if found := srv.polls.found.Load() - before; found != 0 {
		t.Errorf("a server with %d connections saw %d requests by polling, want none", pollNextMaxConns+1, found)
	}
}
