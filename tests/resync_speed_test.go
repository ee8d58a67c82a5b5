package tests

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"tandemfs/internal/testcluster"
)

// TestResyncSpeed measures a resync on one machine: a storage server is
// killed, TANDEM_RESYNC_MIB (default 1024) MiB are written while it is
// out, and it returns; with TANDEM_RESYNC_LOAD=1 a client keeps appending
// to another file (through the mount, as fast as it can) while the head
// copies. It reports the bytes copied, the head's time and the rate, and
// what the client wrote meanwhile (docs/ha.md, "Resync speed");
// TANDEM_RESYNC_SHARE sets the servers' --resync-share, and
// TANDEM_RESYNC_STRIPE=1 stripes the missed file over one chain, so that
// one head copies it all (as after a failed disk). Skipped
// unless TANDEM_RESYNC_MIB is set: it writes a GiB.
func TestResyncSpeed(t *testing.T) {
	mib, err := strconv.Atoi(os.Getenv("TANDEM_RESYNC_MIB"))
	if err != nil || mib <= 0 {
		t.Skip("set TANDEM_RESYNC_MIB (e.g. 1024) to measure a resync")
	}
	var opts []testcluster.Option
	if share := os.Getenv("TANDEM_RESYNC_SHARE"); share != "" {
		opts = append(opts, testcluster.WithStorageFlags("--resync-share", share))
	}
	c := testcluster.Start(t, opts...)
	dir := c.Mount()
	if count := os.Getenv("TANDEM_RESYNC_STRIPE"); count != "" {
		if out, err := runTandem(t, "stripe", "set", "--count", count, dir); err != nil {
			t.Fatalf("stripe set: %v\n%s", err, out)
		}
	}
	c.KillProcess("storage2")
	waitFailover(t, c, 20*time.Second)
	_, versions := chainStatus(t, c)
	f, err := os.Create(filepath.Join(dir, "missed"))
	if err != nil {
		t.Fatal(err)
	}
	piece := randBytes(4 << 20)
	for range (mib + 3) / 4 {
		if _, err := f.Write(piece); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	c.Up()
	waitResyncStarted(t, c, "storage1", 30*time.Second)
	t0 := time.Now()
	var load int64
	stop, loadDone := make(chan struct{}), make(chan error, 1)
	if os.Getenv("TANDEM_RESYNC_LOAD") == "1" {
		go func() { loadDone <- appendUntil(filepath.Join(dir, "load"), nil, &load, stop) }()
	} else {
		loadDone <- nil
	}
	// The load stops when the head is done: it measures what clients
	// write during the copy, and must not fill the disk while the map
	// settles.
	waitHeadDone(t, c, "storage1", 5*time.Minute)
	el := time.Since(t0)
	close(stop)
	if err := <-loadDone; err != nil {
		t.Fatalf("client load: %v", err)
	}
	took := waitResynced(t, c, versions, 5*time.Minute)
	data, err := os.ReadFile(filepath.Join(c.Dir(), "logs", "storage1.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, "storage: resync of") && !resyncDoneLine.MatchString(line) {
			t.Log(line) // starts and stops, with their times
		}
	}
	var copied, nbytes int
	var head time.Duration
	for _, m := range resyncDoneLine.FindAllStringSubmatch(string(data), -1) {
		t.Log(m[0])
		n, _ := strconv.Atoi(m[4])
		b, _ := strconv.Atoi(m[5])
		copied, nbytes = copied+n, nbytes+b
	}
	// The chains resync in parallel: the head's time is the longest.
	for _, m := range resyncTookLine.FindAllStringSubmatch(string(data), -1) {
		if d, err := time.ParseDuration(m[1]); err == nil && d > head {
			head = d
		}
	}
	t.Logf("resync of %d chunks, %d MB: %v on the head (%.0f MB/s), every member serving %v after the head ended; the client wrote %d MB (%.0f MB/s) while the head copied",
		copied, nbytes/1e6, head, float64(nbytes)/1e6/head.Seconds(), took, load/1e6, float64(load)/1e6/el.Seconds())
}

var (
	resyncStartLine   = regexp.MustCompile(`resync of target \d+ in chain \d+: (copying|comparing)`)
	resyncStoppedLine = regexp.MustCompile(`resync of target \d+ in chain \d+ stopped:`)
)

// waitHeadDone waits until every resync the storage server name started
// has logged its end.
func waitHeadDone(t *testing.T, c *testcluster.Cluster, name string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		data, err := os.ReadFile(filepath.Join(c.Dir(), "logs", name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		started := len(resyncStartLine.FindAllIndex(data, -1))
		done := len(resyncDoneLine.FindAllIndex(data, -1))
		stopped := len(resyncStoppedLine.FindAllIndex(data, -1))
		if done > 0 && done+stopped == started {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d resyncs started, %d done and %d stopped after %v", name, started, done, stopped, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
