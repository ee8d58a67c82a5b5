package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"tandemfs/internal/testcluster"
)

// readStatus decodes `tandem status --json` of the cluster into st, a
// struct naming the fields the caller needs.
func readStatus(t *testing.T, c *testcluster.Cluster, st any) {
	t.Helper()
	out, err := runTandem(t, "status", "--data", c.Dir(), "--json")
	if err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	if err := json.Unmarshal([]byte(out), st); err != nil {
		t.Fatalf("status --json: %v: %s", err, out)
	}
}

// leaderReplica returns the name of the metadata replica that leads, as
// `tandem status --json` reports it.
func leaderReplica(t *testing.T, c *testcluster.Cluster) string {
	t.Helper()
	var st struct {
		Meta struct {
			Addr string `json:"addr"`
		} `json:"meta"`
	}
	readStatus(t, c, &st)
	for _, m := range c.Layout.Metas {
		if m.Addr == st.Meta.Addr {
			return m.ID
		}
	}
	t.Fatalf("leader %s is not among the replicas %+v", st.Meta.Addr, c.Layout.Metas)
	return ""
}

// TestMetadataSurvivesTheCrashOfItsLeader: with three metadata replicas,
// kill -9 of the leader loses no committed change, and the mount goes on
// working after a pause of seconds; the restarted replica rejoins.
func TestMetadataSurvivesTheCrashOfItsLeader(t *testing.T) {
	c := testcluster.Start(t, testcluster.WithMetaReplicas(3))
	data := randBytes(3<<20 + 17)
	mustWrite(t, filepath.Join(c.Mount(), "big"), data)
	for i := 0; i < 50; i++ {
		mustWrite(t, filepath.Join(c.Mount(), fmt.Sprintf("small%d", i)), []byte(fmt.Sprint(i)))
	}
	leader := leaderReplica(t, c)
	c.KillProcess(leader)

	t0 := time.Now()
	mustWrite(t, filepath.Join(c.Mount(), "after"), []byte("written after the failover"))
	stall := time.Since(t0)
	t.Logf("killed %s; the next create took %v", leader, stall)
	if stall > 10*time.Second {
		t.Fatalf("service resumed only after %v", stall)
	}
	if got := mustRead(t, filepath.Join(c.Mount(), "big")); !bytes.Equal(got, data) {
		t.Fatal("file written before the failover changed")
	}
	for i := 0; i < 50; i++ {
		if got := string(mustRead(t, filepath.Join(c.Mount(), fmt.Sprintf("small%d", i)))); got != fmt.Sprint(i) {
			t.Fatalf("small%d = %q after the failover", i, got)
		}
	}
	if newLeader := leaderReplica(t, c); newLeader == leader {
		t.Fatalf("%s was killed but still leads", leader)
	}

	c.Up() // restarts the killed replica, which catches up from the others
	if _, err := os.Stat(filepath.Join(c.Mount(), "after")); err != nil {
		t.Fatal(err)
	}
}
