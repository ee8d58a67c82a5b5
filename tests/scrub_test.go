package tests

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"tandemfs/internal/testcluster"
)

// scrubStatus is what `tandem status --json` says of the scrubs.
type scrubStatus struct {
	Healthy bool `json:"healthy"`
	Targets []struct {
		ID   uint32 `json:"id"`
		Path string `json:"path"`
	} `json:"targets"`
	Scrubs []struct {
		Target     uint32 `json:"target"`
		Chain      uint32 `json:"chain"`
		Running    bool   `json:"running"`
		BadBlocks  uint64 `json:"bad_blocks"`
		Repaired   uint64 `json:"repaired_since_start"`
		Unrepaired uint64 `json:"unrepaired"`
		LastDone   string `json:"last_done"`
	} `json:"scrubs"`
}

// scrubTotals sums over every store the bad and unrepaired blocks of the
// last complete pass and the blocks repaired since the servers started.
func scrubTotals(st *scrubStatus) (bad, repaired, unrepaired uint64) {
	for _, s := range st.Scrubs {
		bad += s.BadBlocks
		repaired += s.Repaired
		unrepaired += s.Unrepaired
	}
	return
}

// waitScrubbed waits until cond holds of the status, failing after within.
func waitScrubbed(t *testing.T, c *testcluster.Cluster, within time.Duration, what string, cond func(*scrubStatus) bool) *scrubStatus {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var st scrubStatus
		readStatus(t, c, &st)
		if cond(&st) {
			return &st
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s; scrubs: %+v", within, what, st.Scrubs)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// TestScrubRepairsBadBlocksNoOneReads: bit rot in blocks no client reads,
// on a follower's copy (which serves no reads at all) and on a head's, is
// found by the scrub and rewritten from the other copy, without a single
// read from a client; both copies are whole again, no target left its
// chain, and the servers' metrics count the three bad blocks.
func TestScrubRepairsBadBlocksNoOneReads(t *testing.T) {
	t.Setenv("TANDEM_METRICS", "127.0.0.1:0")
	c := testcluster.Start(t, testcluster.WithScrubEvery(2*time.Second))
	path := filepath.Join(c.Mount(), "f")
	data, ino := writeRandomFile(t, path, 2<<20+4096) // chunks 0-2 over both chains
	follower := chunkCopies(t, c, ino, 0)
	head := chunkCopies(t, c, ino, 1)
	flipByte(t, follower[1], 100_000)
	flipByte(t, head[0], 5_000)
	flipByte(t, head[0], 900_000)

	st := waitScrubbed(t, c, 30*time.Second, "the three bad blocks were not all repaired", func(st *scrubStatus) bool {
		_, repaired, _ := scrubTotals(st)
		return repaired >= 3
	})
	if _, repaired, unrepaired := scrubTotals(st); unrepaired != 0 || repaired != 3 {
		t.Fatalf("scrub repaired %d blocks and left %d bad; want 3 and 0", repaired, unrepaired)
	}
	if bad := storageSum(t, c, "tandem_storage_checksum_errors_total"); bad < 3 {
		t.Errorf("the storage servers counted %v checksum errors, want at least 3", bad)
	}
	for _, files := range [][]string{follower, head} {
		a, errA := os.ReadFile(files[0])
		b, errB := os.ReadFile(files[1])
		if errA != nil || errB != nil || !bytes.Equal(a, b) {
			t.Fatalf("the copies %v differ after the scrub (%v, %v)", files, errA, errB)
		}
	}
	onDisk, _ := os.ReadFile(follower[1])
	if !bytes.Equal(onDisk, data[:1<<20]) {
		t.Fatal("the follower's copy of chunk 0 is not the data written")
	}
	requireAllServing(t, c)
	if got := mustRead(t, path); !bytes.Equal(got, data) {
		t.Fatal("the file reads back other bytes than were written")
	}
}

// TestScrubReportsABadBlockItCannotRepair: a bad block in a file kept in
// one copy has no good copy to come from; the scrub reports it, and the
// cluster shows as degraded, instead of the damage staying unknown until
// someone reads the file.
func TestScrubReportsABadBlockItCannotRepair(t *testing.T) {
	c := testcluster.Start(t, testcluster.WithScrubEvery(2*time.Second))
	dir := filepath.Join(c.Mount(), "single")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(testcluster.Binary(t), "stripe", "set", "--replicas", "1", dir).CombinedOutput(); err != nil {
		t.Fatalf("stripe set: %v\n%s", err, out)
	}
	_, ino := writeRandomFile(t, filepath.Join(dir, "f"), 64<<10)

	var st scrubStatus
	readStatus(t, c, &st)
	var copies []string
	for _, tg := range st.Targets {
		f := filepath.Join(tg.Path, "chunks", fmt.Sprintf("%x%x", ino>>4&0xf, ino&0xf), fmt.Sprint(ino), "0")
		if _, err := os.Stat(f); err == nil {
			copies = append(copies, f)
		}
	}
	if len(copies) != 1 {
		t.Fatalf("found %d copies of a one-copy file: %v", len(copies), copies)
	}
	flipByte(t, copies[0], 10_000)

	got := waitScrubbed(t, c, 30*time.Second, "the bad block was not reported", func(st *scrubStatus) bool {
		_, _, unrepaired := scrubTotals(st)
		return unrepaired >= 1
	})
	if got.Healthy {
		t.Fatal("status calls the cluster healthy with a block no copy can repair")
	}
	out, err := runTandem(t, "status", "--data", c.Dir())
	if err != nil || !bytes.Contains([]byte(out), []byte("bad block(s)")) {
		t.Fatalf("status does not warn of the bad block (%v):\n%s", err, out)
	}
}

// TestScrubCommandStartsAPassAtOnce: `tandem scrub` makes every server
// scrub now, weeks before its schedule (a week, by default), and the bad
// block on a follower is repaired.
func TestScrubCommandStartsAPassAtOnce(t *testing.T) {
	c := testcluster.Start(t)
	path := filepath.Join(c.Mount(), "f")
	data, ino := writeRandomFile(t, path, 256<<10)
	follower := chunkCopies(t, c, ino, 0)[1]
	flipByte(t, follower, 70_000)

	out, err := runTandem(t, "scrub", "--data", c.Dir())
	if err != nil {
		t.Fatalf("tandem scrub: %v\n%s", err, out)
	}
	if !bytes.Contains([]byte(out), []byte("scrub started")) {
		t.Fatalf("tandem scrub says:\n%s", out)
	}
	waitScrubbed(t, c, 30*time.Second, "the bad block was not repaired", func(st *scrubStatus) bool {
		_, repaired, _ := scrubTotals(st)
		return repaired == 1
	})
	if onDisk, err := os.ReadFile(follower); err != nil || !bytes.Equal(onDisk, data) {
		t.Fatalf("the follower's copy is not the data written (%v)", err)
	}
}
