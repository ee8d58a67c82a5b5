package meta_test

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"tandemfs/internal/client"
	"tandemfs/internal/meta"
	"tandemfs/internal/proto"
)

// startReplicas runs three metadata replicas in one Raft group. Their
// ports are found free before the replicas take them, and another test
// running meanwhile can take one first: then all three start again on
// other ports.
func startReplicas(t *testing.T) []*meta.Service {
	t.Helper()
	for attempt := 1; ; attempt++ {
		svcs, err := tryStartReplicas(t)
		if err == nil {
			t.Cleanup(func() {
				for _, s := range svcs {
					s.Close()
				}
			})
			return svcs
		}
		if !errors.Is(err, syscall.EADDRINUSE) || attempt == 5 {
			t.Fatal(err)
		}
		t.Logf("starting the replicas, attempt %d: %v; again on other ports", attempt, err)
	}
}

// tryStartReplicas starts three replicas, or none.
func tryStartReplicas(t *testing.T) ([]*meta.Service, error) {
	var peers []meta.Peer
	for i := 1; i <= 3; i++ {
		peers = append(peers, meta.Peer{ID: fmt.Sprintf("meta%d", i), Addr: freeAddr(t), RaftAddr: freeAddr(t)})
	}
	svcs := make([]*meta.Service, 3)
	errs := make(chan error, 3)
	for i, p := range peers {
		go func(i int, p meta.Peer) {
			svc, err := meta.Start(meta.Config{Dir: t.TempDir(), ID: p.ID, Listen: p.Addr, RaftListen: p.RaftAddr,
				Peers: peers, Secret: testSecret, Logf: t.Logf})
			svcs[i] = svc
			errs <- err
		}(i, p)
	}
	var failed error
	for range peers {
		if err := <-errs; err != nil && failed == nil {
			failed = err
		}
	}
	if failed != nil {
		for _, s := range svcs {
			if s != nil {
				s.Close()
			}
		}
		return nil, failed
	}
	return svcs, nil
}

func addrsOf(svcs []*meta.Service) string {
	var a []string
	for _, s := range svcs {
		a = append(a, s.Addr())
	}
	return strings.Join(a, ",")
}

// TestLosingTheLeaderLosesNoCommittedOperation: with three replicas, the
// leader's failure costs a pause, not data, and service resumes by itself.
func TestLosingTheLeaderLosesNoCommittedOperation(t *testing.T) {
	svcs := startReplicas(t)
	c, err := client.New(client.Config{MetaAddr: addrsOf(svcs), Secret: testSecret, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := 0; i < 20; i++ {
		mk(t, c, proto.RootIno, fmt.Sprintf("before%d", i), syscall.S_IFREG|0o644)
	}
	var leader *meta.Service
	for _, s := range svcs {
		if s.Leading() {
			leader = s
		}
	}
	if leader == nil {
		t.Fatal("no replica leads")
	}
	t0 := time.Now()
	leader.Close()
	mk(t, c, proto.RootIno, "after", syscall.S_IFREG|0o644)
	t.Logf("first create after the leader stopped took %v", time.Since(t0))
	for i := 0; i < 20; i++ {
		if _, err := c.Lookup(proto.RootIno, fmt.Sprintf("before%d", i)); err != nil {
			t.Fatalf("before%d lost in the failover: %v", i, err)
		}
	}
	if d := time.Since(t0); d > 10*time.Second {
		t.Fatalf("failover took %v", d)
	}
}
