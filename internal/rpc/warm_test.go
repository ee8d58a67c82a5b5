package rpc

import (
	"errors"
	"testing"
	"time"
)

func (c *Client) idleConns() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.idle)
}

func TestWarmOpensIdleConnectionsThatCallsThenUse(t *testing.T) {
	_, addr, _ := echoServer(t, secret)
	c := NewClient(addr, secret)
	defer c.Close()
	c.Warm(3)
	c.Warm(3) // the first one's dials are under way: no more
	deadline := time.Now().Add(5 * time.Second)
	for c.idleConns() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d idle connections 5 s after Warm(3)", c.idleConns())
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.Warm(3) // enough are idle: no more
	time.Sleep(50 * time.Millisecond)
	if n := c.idleConns(); n != 3 {
		t.Fatalf("%d idle connections after Warm(3) three times, want 3", n)
	}
	if got, err := echo(c, []byte("hi")); err != nil || string(got) != "hi" {
		t.Fatalf("call over a warmed connection: %q, %v", got, err)
	}
	if n := c.idleConns(); n != 3 {
		t.Fatalf("%d idle connections after a call, want 3: the call took one of them and gave it back", n)
	}
}

func TestWarmingAnUnreachableServerLeavesTheErrorToTheFirstCall(t *testing.T) {
	c := NewClient("127.0.0.1:1", secret)
	defer c.Close()
	c.Warm(2)
	time.Sleep(100 * time.Millisecond)
	if n := c.idleConns(); n != 0 {
		t.Fatalf("%d idle connections to a server that is not there", n)
	}
	_, err := echo(c, []byte("hi"))
	var ne *NetError
	if !errors.As(err, &ne) {
		t.Fatalf("call to an unreachable server: %v, want a NetError", err)
	}
}
