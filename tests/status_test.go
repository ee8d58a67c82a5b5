package tests

import (
	"bufio"
	"encoding/json"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"tandemfs/internal/cluster"
	"tandemfs/internal/testcluster"
)

// watchRound is the part of a `tandem status --watch --json` line the
// tests read.
type watchRound struct {
	Time  time.Time `json:"time"`
	Error string    `json:"error"`
	Meta  struct {
		Addr     string `json:"addr"`
		Replicas []struct {
			Addr  string `json:"addr"`
			State string `json:"state"`
		} `json:"replicas"`
	} `json:"meta"`
	Healthy bool `json:"healthy"`
}

// startStatusWatch runs `tandem status --watch INTERVAL --json` on the
// cluster and returns its rounds as they come; the process ends with the
// test.
func startStatusWatch(t *testing.T, c *testcluster.Cluster, interval time.Duration) (<-chan watchRound, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(testcluster.Binary(t), "status", "--data", c.Dir(), "--json", "--watch", interval.String())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	rounds := make(chan watchRound, 1000)
	go func() {
		defer close(rounds)
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var r watchRound
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Errorf("status --watch printed %q: %v", sc.Text(), err)
				return
			}
			rounds <- r
		}
	}()
	return rounds, cmd
}

// nextRound returns the next round of a watch, failing the test if none
// comes within limit.
func nextRound(t *testing.T, rounds <-chan watchRound, limit time.Duration) watchRound {
	t.Helper()
	select {
	case r, ok := <-rounds:
		if !ok {
			t.Fatal("status --watch ended early")
		}
		return r
	case <-time.After(limit):
		t.Fatalf("no status round within %v", limit)
	}
	return watchRound{}
}

// TestStatusWatchKeepsItsPaceWhileAReplicaHangs: `tandem status --watch`
// shows a round every interval; when a metadata replica hangs, the rounds
// go on at the same pace from the leader, list that replica as not
// answering and the cluster as degraded, and show it back once it wakes.
// SIGTERM ends the watch with exit status 0.
func TestStatusWatchKeepsItsPaceWhileAReplicaHangs(t *testing.T) {
	c := testcluster.Start(t, testcluster.WithMetaReplicas(3), testcluster.WithoutMount())
	const interval = 100 * time.Millisecond
	rounds, cmd := startStatusWatch(t, c, interval)

	first := nextRound(t, rounds, 5*time.Second)
	if first.Error != "" || !first.Healthy || len(first.Meta.Replicas) != 3 {
		t.Fatalf("first round: %+v", first)
	}
	var hung cluster.MetaLayout // the replica to hang: not the leader
	for _, m := range c.Layout.Metas {
		if m.Addr != first.Meta.Addr {
			hung = m
		}
	}
	follower, hungAddr := hung.ID, hung.Addr

	c.Signal(follower, syscall.SIGSTOP)
	woken := false
	defer func() {
		if !woken {
			c.Signal(follower, syscall.SIGCONT)
		}
	}()
	// A round lasts at most the interval plus the wait for followers after
	// the leader answered (250 ms), far below the 2 s a round may take
	// without a leader's answer.
	const pace = interval + 250*time.Millisecond + 400*time.Millisecond
	seen := 0
	for deadline := time.Now().Add(10 * time.Second); seen < 5; {
		r := nextRound(t, rounds, pace)
		if time.Now().After(deadline) {
			t.Fatalf("the hung replica %s was not shown as silent within 10 s; last round %+v", follower, r)
		}
		if r.Error != "" {
			t.Fatalf("a round without the leader while only a follower hung: %s", r.Error)
		}
		if stateOf(r, hungAddr) == "no answer" {
			if r.Healthy {
				t.Fatalf("healthy while replica %s does not answer: %+v", follower, r)
			}
			seen++
		}
	}

	c.Signal(follower, syscall.SIGCONT)
	woken = true
	for deadline := time.Now().Add(10 * time.Second); ; {
		r := nextRound(t, rounds, 5*time.Second)
		if r.Healthy && stateOf(r, hungAddr) == "follower" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %s not shown back within 10 s: %+v", follower, r)
		}
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("status --watch after SIGTERM: %v", err)
	}
}

// stateOf is the state a round gives the replica at addr.
func stateOf(r watchRound, addr string) string {
	for _, rep := range r.Meta.Replicas {
		if rep.Addr == addr {
			return rep.State
		}
	}
	return ""
}
