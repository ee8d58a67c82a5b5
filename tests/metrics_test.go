package tests

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"tandemfs/internal/testcluster"
)

// Every process of a cluster serves Prometheus metrics with --metrics
// (here TANDEM_METRICS, which `tandem up` passes on): what it served,
// what it called, and its own gauges, counted as the work happens.
func TestEveryServiceExportsWhatItDoesAsPrometheusMetrics(t *testing.T) {
	t.Setenv("TANDEM_METRICS", "127.0.0.1:0")
	c := testcluster.Start(t)
	const size = 4 << 20
	mustWrite(t, filepath.Join(c.Mount(), "f"), randBytes(size))

	meta := scrapeMetrics(t, c, "meta")
	if v := meta.sum("tandem_rpc_served_seconds_count", `op="create"`); v < 1 {
		t.Errorf("meta served %v creates, want at least 1", v)
	}
	if meta.sum("tandem_meta_leader") != 1 || meta.sum("tandem_meta_raft_applied_index") < 1 {
		t.Errorf("meta: leader %v, applied index %v; want 1 and more than 0",
			meta.sum("tandem_meta_leader"), meta.sum("tandem_meta_raft_applied_index"))
	}

	if meta.sum("tandem_meta_chain_members", `state="serving"`) < 2 || !meta.has("tandem_meta_chains_degraded") || meta.sum("tandem_meta_chains_degraded") != 0 {
		t.Errorf("meta: %v serving chain members and %v degraded chains on a healthy cluster",
			meta.sum("tandem_meta_chain_members", `state="serving"`), meta.sum("tandem_meta_chains_degraded"))
	}

	// Two copies: the client sends every byte to a chain's head, which
	// forwards it to the other member.
	var received, forwarded float64
	for _, name := range []string{"storage1", "storage2"} {
		s := scrapeMetrics(t, c, name)
		received += s.sum("tandem_rpc_served_received_bytes_total", `op="chunk_write"`)
		forwarded += s.sum("tandem_rpc_called_sent_bytes_total", `op="chunk_write"`, `service="storage"`)
		if s.sum("tandem_storage_target_free_bytes", `target="`) <= 0 || s.sum("tandem_storage_target_size_bytes") <= 0 {
			t.Errorf("%s reports no target capacity", name)
		}
		if s.sum("tandem_storage_checksum_errors_total") != 0 {
			t.Errorf("%s counted checksum errors on a healthy disk", name)
		}
	}
	if received < 2*size || forwarded < size {
		t.Errorf("storage servers received %v bytes of chunk writes and forwarded %v; want at least %d and %d",
			received, forwarded, 2*size, size)
	}

	mount := scrapeMetrics(t, c, "mount")
	if v := mount.sum("tandem_rpc_called_sent_bytes_total", `op="chunk_write"`, `service="storage"`); v < size {
		t.Errorf("the client sent %v bytes of chunk writes, want at least %d", v, size)
	}
	if v := mount.sum("tandem_rpc_called_seconds_count", `op="create"`, `service="meta"`); v < 1 {
		t.Errorf("the client made %v create calls, want at least 1", v)
	}
	if mount.sum("tandem_client_meta_calls_total") < 1 || !mount.has("go_goroutines") {
		t.Errorf("the mount lacks its own counts or the Go runtime's metrics")
	}
}

// A stream of large writes has the storage servers flush their targets'
// file systems behind it (internal/storage/flushbehind.go): each target
// here takes 80 MiB of a 160 MiB file (two copies over four targets), more
// than the 64 MiB after which a flush begins.
func TestLargeWritesAreFlushedBehindOnTheServersDisks(t *testing.T) {
	t.Setenv("TANDEM_METRICS", "127.0.0.1:0")
	c := testcluster.Start(t)
	f, err := os.Create(filepath.Join(c.Mount(), "stream"))
	if err != nil {
		t.Fatal(err)
	}
	piece := randBytes(1 << 20)
	for range 160 {
		if _, err := f.Write(piece); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	var flushes, failed float64
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		flushes, failed = 0, 0
		for _, name := range []string{"storage1", "storage2"} {
			s := scrapeMetrics(t, c, name)
			flushes += s.sum("tandem_storage_flush_behind_total")
			failed += s.sum("tandem_storage_flush_behind_errors_total")
		}
		if flushes >= 4 || time.Now().After(end) {
			break
		}
	}
	if flushes < 4 || failed != 0 {
		t.Fatalf("%v flushes behind the writes, %v failed; want one or more on each of the 4 targets, none failed", flushes, failed)
	}
}

// When a storage server dies, the metadata service's metrics show its
// chains degraded and their members on it offline, the alert an
// administrator needs before a second failure.
func TestMetricsShowTheChainsOfAFailedServerDegraded(t *testing.T) {
	t.Setenv("TANDEM_METRICS", "127.0.0.1:0")
	c := testcluster.Start(t)
	if v := scrapeMetrics(t, c, "meta").sum("tandem_meta_chains_degraded"); v != 0 {
		t.Fatalf("%v chains degraded before any failure", v)
	}
	c.KillProcess("storage2")
	deadline := time.Now().Add(30 * time.Second)
	for {
		m := scrapeMetrics(t, c, "meta")
		degraded, offline := m.sum("tandem_meta_chains_degraded"), m.sum("tandem_meta_chain_members", `state="offline"`)
		if degraded > 0 && offline > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after storage2 died: %v chains degraded, %v members offline", degraded, offline)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// storageSum adds metric name (with labels, as metricsPage.sum takes
// them) over the cluster's two storage servers.
func storageSum(t *testing.T, c *testcluster.Cluster, name string, labels ...string) float64 {
	t.Helper()
	total := 0.0
	for _, server := range []string{"storage1", "storage2"} {
		total += scrapeMetrics(t, c, server).sum(name, labels...)
	}
	return total
}

// metricsPage is one scrape of /metrics, as sample lines.
type metricsPage []string

// sum adds the samples of metric name whose labels include every one of
// labels (each `key="value"`).
func (p metricsPage) sum(name string, labels ...string) float64 {
	var total float64
	for _, line := range p {
		series, value, ok := strings.Cut(line, " ")
		metric, _, _ := strings.Cut(series, "{")
		if !ok || metric != name || !containsAll(series, labels) {
			continue
		}
		if v, err := strconv.ParseFloat(value, 64); err == nil {
			total += v
		}
	}
	return total
}

func (p metricsPage) has(name string) bool {
	for _, line := range p {
		if strings.HasPrefix(line, name+" ") || strings.HasPrefix(line, name+"{") {
			return true
		}
	}
	return false
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

var metricsAddrLine = regexp.MustCompile(`metrics on http://([^/\s]+)/metrics`)

// scrapeMetrics fetches /metrics from the cluster's process name, at the
// address its log names.
func scrapeMetrics(t *testing.T, c *testcluster.Cluster, name string) metricsPage {
	t.Helper()
	log, err := os.ReadFile(filepath.Join(c.Opts.Dir, "logs", name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	m := metricsAddrLine.FindAllSubmatch(log, -1)
	if m == nil {
		t.Fatalf("%s's log names no metrics address", name)
	}
	addr := string(m[len(m)-1][1]) // the latest start's
	cl := http.Client{Timeout: 10 * time.Second}
	resp, err := cl.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: status %s, %v", name, resp.Status, err)
	}
	return metricsPage(strings.Split(string(b), "\n"))
}
