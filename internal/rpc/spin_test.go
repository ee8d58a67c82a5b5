package rpc

import (
	"bytes"
	"runtime"
	"testing"
	"time"

	"tandemfs/internal/osthread"
)

// withSpin sets how long callers poll for replies for one test.
func withSpin(t *testing.T, d time.Duration) {
	old := spinMax
	spinMax = d
	t.Cleanup(func() { spinMax = old })
}

func TestSpinIsSetInMicrosecondsAndZeroTurnsItOff(t *testing.T) {
	for v, want := range map[string]time.Duration{
		"":    defaultSpin,
		"0":   0,
		"250": 250 * time.Microsecond,
		"-3":  defaultSpin,
		"abc": defaultSpin,
	} {
		if got := spinFromEnv(v); got != want {
			t.Errorf("TANDEM_RPC_SPIN_US=%q: %v, want %v", v, got, want)
		}
	}
}

func TestCallsAreGroupedByOpAndByWhetherTheyMoveMuch(t *testing.T) {
	if kindOf(100, 4096) == kindOf(100, 1<<20) {
		t.Error("a 4 KiB and a 1 MiB chunk write are one kind")
	}
	if kindOf(100, 4096) == kindOf(101, 4096) {
		t.Error("two ops are one kind")
	}
	if kindOf(100, 0) != kindOf(100, 4096) {
		t.Error("two small calls of one op are two kinds")
	}
}

// A kind of call is polled for while its replies come within twice the
// polling time, and no longer once they come later.
func TestOnlyCallsWhoseRepliesComeQuicklyArePolledFor(t *testing.T) {
	withSpin(t, 100*time.Microsecond)
	var rt replyTimes
	k := kindOf(1, 10)
	if !rt.worthSpinning(k) {
		t.Fatal("a kind never seen is not tried")
	}
	for range 30 {
		rt.record(k, 2*time.Millisecond)
	}
	if rt.worthSpinning(k) {
		t.Fatal("polled for after 30 replies of 2 ms")
	}
	for range 30 {
		rt.record(k, 20*time.Microsecond)
	}
	if !rt.worthSpinning(k) {
		t.Fatal("not polled for after 30 replies of 20 µs")
	}
	withSpin(t, 0)
	if rt.worthSpinning(k) {
		t.Fatal("polled for with polling off")
	}
}

// In a process with more than one Go processor, quick replies are caught
// by polling, from a goroutine or a dedicated thread alike; with one,
// nothing polls. A slow call still gets its reply.
func TestQuickRepliesAreCaughtByPollingAndSlowOnesStillArrive(t *testing.T) {
	withSpin(t, 5*time.Millisecond) // generous: a loaded test machine answers late
	_, addr, _ := echoServer(t, secret)
	c := NewClient(addr, secret)
	defer c.Close()
	calls := func() {
		for i := range 50 {
			want := bytes.Repeat([]byte{byte(i)}, 1+i*100)
			if got, err := echo(c, want); err != nil || !bytes.Equal(got, want) {
				t.Errorf("echo %d: %d bytes back, %v", i, len(got), err)
				return
			}
		}
	}
	check := func(who string, n int64) {
		t.Helper()
		if !mayPoll() && n != 0 {
			t.Fatalf("with one Go processor %s polled for %d replies", who, n)
		}
		if mayPoll() && n < 25 {
			t.Fatalf("%s caught only %d of 50 quick replies by polling", who, n)
		}
	}
	before := repliesSpun.Load()
	calls()
	check("a goroutine", repliesSpun.Load()-before)
	before = repliesSpun.Load()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer osthread.Dedicate()()
		calls()
	}()
	<-done
	check("a dedicated thread", repliesSpun.Load()-before)
	start := time.Now()
	if err := c.Call(4, nil, nil); err != nil || time.Since(start) < 2*time.Second {
		t.Fatalf("slow call: %v after %v", err, time.Since(start))
	}
}
