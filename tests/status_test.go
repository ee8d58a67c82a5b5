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

// TestCapacityCountsEachDiskOnce: a one-machine cluster keeps its four
// targets on one disk, and df on the mount and `tandem status` show that
// disk's size once, not four times; the capacity is also shown per
// server, and a server's targets that went offline are named as left out.
func TestCapacityCountsEachDiskOnce(t *testing.T) {
	c := testcluster.Start(t)
	var disk, mnt syscall.Statfs_t
	if err := syscall.Statfs(c.Dir(), &disk); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Statfs(c.Mount(), &mnt); err != nil {
		t.Fatal(err)
	}
	diskBytes := disk.Blocks * uint64(disk.Bsize)
	if got := mnt.Blocks * uint64(mnt.Bsize); got != diskBytes {
		t.Fatalf("df on the mount: %d bytes, the one disk under its targets: %d", got, diskBytes)
	}
	var st struct {
		Total       uint64   `json:"total_bytes"`
		FileSystems int      `json:"file_systems"`
		Offline     []uint32 `json:"offline_targets"`
		Servers     []struct {
			ID      uint32 `json:"id"`
			Total   uint64 `json:"total_bytes"`
			Targets int    `json:"targets"`
			Online  int    `json:"targets_online"`
		} `json:"servers"`
	}
	status := func() {
		t.Helper()
		out, err := exec.Command(testcluster.Binary(t), "status", "--data", c.Dir(), "--json").Output()
		if err != nil {
			t.Fatalf("status: %v", err)
		}
		if err := json.Unmarshal(out, &st); err != nil {
			t.Fatal(err)
		}
	}
	status()
	if st.Total != diskBytes || st.FileSystems != 1 || len(st.Offline) != 0 || len(st.Servers) != 2 {
		t.Fatalf("status: %+v; want %d bytes in one file system, nothing offline, two servers", st, diskBytes)
	}
	for _, s := range st.Servers {
		if s.Total != diskBytes || s.Targets != 2 || s.Online != 2 {
			t.Fatalf("server %+v: want the disk once and 2 of 2 targets online", s)
		}
	}
	c.KillProcess("storage2")
	deadline := time.Now().Add(15 * time.Second)
	for status(); len(st.Offline) < 2; status() {
		if time.Now().After(deadline) {
			t.Fatalf("server 2's targets not listed offline after its kill: %+v", st)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Server IDs follow registration order, not process names.
	var alive, dead int
	for _, s := range st.Servers {
		switch {
		case s.Online == 2 && s.Total == diskBytes:
			alive++
		case s.Online == 0 && s.Total == 0:
			dead++
		}
	}
	if alive != 1 || dead != 1 {
		t.Fatalf("servers %+v: want one with its disk and 2 of 2 online, one with nothing counted", st.Servers)
	}
	if st.Total != diskBytes {
		t.Fatalf("the disk still has online targets of server 1, yet the capacity is %d", st.Total)
	}
}
