package hamatrix

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Bounds of the expectations. They are generous so that a loaded machine
// does not fail the test; the table reports the real numbers.
const (
	injectAfter     = 1500 * time.Millisecond // load runs this long before the failure
	failoverTimeout = 20 * time.Second        // docs/ha.md: detection in 4 s, failover ~5 s
	maxStall        = 15 * time.Second        // longest tolerated client operation
	resyncTimeout   = 120 * time.Second       // from the heal to every member serving
	settle          = 3 * time.Second         // watched after a heal that must change nothing
	loadTimeout     = 180 * time.Second       // for the copies in flight to finish
	fenceTimeout    = 30 * time.Second        // for the fence outcome in status
)

// fullMatrix reports whether HA_MATRIX asks for the full matrix.
func fullMatrix() bool { return os.Getenv("HA_MATRIX") == "full" }

// sizes of the load: the short form keeps `go test ./...` quick.
func sizes() loadSize {
	if fullMatrix() {
		return loadSize{write: "256m", read: "256m"}
	}
	return loadSize{write: "64m", read: "64m"}
}

// run is one scenario in progress: its cluster, load, probes and status
// monitor, and what has been measured so far.
type run struct {
	t   *testing.T
	sc  scenario
	c   *cluster
	mon *monitor
	res *result

	pre    string // the stream written before the load, which it reads
	load   *load
	probes []*probe

	base     *status // before the failure
	injected time.Time
	healed   time.Time
	failover *status // the first status that shows the failover

	// The load's bytes written to the mount when it started, when the
	// failure was injected and when it was healed: how fast clients kept
	// writing while a resync ran, against before.
	wroteAtStart, wroteAtInject, wroteAtHeal written
}

// result is one row of the matrix.
type result struct {
	sc      scenario
	failed  bool
	check   string        // checkstream summary
	detect  time.Duration // injection to the failover in status; <0: none seen
	stall   time.Duration
	stallOf string // which probe, and when
	moved   bool
	resync  time.Duration // heal to every member serving again; <0: none
	// resyncRate is what the heads copied over the longest head's time,
	// in MB/s; 0 when nothing was copied.
	resyncRate float64
	leader     string
	notes      []string
	measured   bool // the scenario got as far as measuring
}

// runScenario brings up a cluster and starts the load, lets the scenario
// inject and heal its failure, waits for the cluster to recover while the
// load goes on (so that a resync is always measured with clients
// working), stops the load and checks every copy of the data.
func runScenario(t *testing.T, sc scenario, res *result) {
	res.detect, res.resync = -1, -1
	r := startRun(t, sc, res)
	time.Sleep(injectAfter)
	sc.act(r)
	if r.injected.IsZero() || r.healed.IsZero() {
		t.Fatalf("scenario %d did not inject and heal its failure", sc.num)
	}
	r.measureFailover()
	r.waitRecovered()
	r.stopLoad()
	r.measureStalls()
	r.checkData()
}

// startRun starts a cluster, writes the stream the load reads, starts the
// probes and the status monitor, takes the status before the failure and
// starts the load.
func startRun(t *testing.T, sc scenario, res *result) *run {
	t.Helper()
	r := &run{t: t, sc: sc, res: res}
	r.c = startCluster(t, sc.prefix(), clusterOptions{fence: sc.fence, faults: sc.faults, cache: sc.cache})
	sz := sizes()
	r.pre = writePre(r.c, sz.read)
	checkTwoCopies(r.c, r.pre)
	r.probes = []*probe{
		startProbe(r.c, "write+fsync 4 KiB", "write", filepath.Join(r.c.mnt, "probe")),
		startProbe(r.c, "open+read 4 KiB", "read", r.pre),
	}
	r.mon = startMonitor(r.c)
	cleanup(t, "stopping the status monitor", r.mon.stop)
	r.base = r.mon.waitFor(time.Now(), upTimeout, func(st *status) bool { return st.allServing() })
	if r.base == nil {
		t.Fatalf("no status with every chain serving before the failure")
	}
	res.leader = r.c.hostOfAddr(r.base.leader)
	r.load = startLoad(r.c, sz)
	r.wroteAtStart = r.load.written()
	return r
}

// stopLoad starts no new copy once the cluster has recovered and lets the
// copies in flight finish.
func (r *run) stopLoad() {
	r.t.Helper()
	if !r.load.stop(loadTimeout) {
		r.t.Errorf("the load did not finish within %v of the recovery", loadTimeout)
	}
	copies, read, errs, longest := r.load.result()
	for _, err := range errs {
		r.t.Errorf("client load failed: %v", err)
	}
	r.notef("load: %d copies (%d of them read out), the slowest %.1f s", len(copies)+read.n, read.n, longest.Seconds())
}

// measureStalls stops the probes and takes the longest operation of any.
// Clients must not see errors, and where a copy of the data survives, no
// operation may take longer than maxStall.
func (r *run) measureStalls() {
	r.t.Helper()
	for _, p := range r.probes {
		pl, err := p.finish(loadTimeout)
		if err != nil {
			r.t.Errorf("probe %s: %v", p.name, err)
		}
		if pl.err != nil {
			r.t.Errorf("probe %s failed: %v", p.name, pl.err)
		}
		if pl.longest > r.res.stall {
			r.res.stall = pl.longest
			r.res.stallOf = fmt.Sprintf("%s at %+.1fs", p.name, r.since(pl.at))
		}
	}
	r.mon.stop()
	r.res.measured = true
	if !r.sc.blocks && r.res.stall > maxStall {
		r.t.Errorf("a client operation stalled %v (%s); bound %v", r.res.stall.Round(time.Millisecond), r.res.stallOf, maxStall)
	}
}

// checkData runs checkstream over every copy the load made and the stream
// it read, and compares the copies of every chunk on the chain members.
func (r *run) checkData() {
	r.t.Helper()
	copies, read, _, _ := r.load.result()
	files := append(copies, r.pre)
	checked, bytes, failed := checkStreams(r.c, files)
	// The copies read out were checked as they were read; the errors of
	// those that failed are the load's (stopLoad).
	checked, bytes = checked+read.n, bytes+read.bytes
	r.res.check = fmt.Sprintf("%d/%d files (%d MiB): %d errors", checked, len(files)+read.n+read.failed, bytes>>20, len(failed)+read.failed)
	for _, f := range failed {
		r.t.Errorf("checkstream: %s", f)
	}
	if checked < 2*loadWriters {
		r.t.Errorf("the load finished only %d copies: not enough to check", checked)
	}
	final, err := r.c.status(r.t.Context())
	if err != nil {
		r.t.Fatalf("status after the scenario: %v", err)
	}
	if diffs := compareReplicas(final); len(diffs) > 0 {
		r.res.check += fmt.Sprintf("; %d chunk copies differ", len(diffs))
		r.t.Errorf("chain members hold different data after the resync:\n%s", strings.Join(diffs, "\n"))
	} else {
		r.res.check += "; replicas identical"
	}
}

// inject fails something and records when.
func (r *run) inject(what string, fail func() error) {
	r.t.Helper()
	r.wroteAtInject = r.load.written()
	r.injected = time.Now()
	if err := fail(); err != nil {
		r.t.Fatalf("injecting %q: %v", what, err)
	}
	r.t.Logf("+0.0s injected: %s", what)
}

// heal repairs what inject broke and records when.
func (r *run) heal(what string, repair func() error) {
	r.t.Helper()
	r.healed = time.Now()
	if err := repair(); err != nil {
		r.t.Fatalf("healing %q: %v", what, err)
	}
	r.wroteAtHeal = r.load.written()
	r.t.Logf("+%.1fs healed: %s", r.since(r.healed), what)
}

// since is seconds from the injection to t.
func (r *run) since(t time.Time) float64 { return t.Sub(r.injected).Seconds() }

func (r *run) sleepUntil(t time.Time) { time.Sleep(time.Until(t)) }

// notef adds a note to the scenario's row.
func (r *run) notef(format string, args ...any) {
	r.res.notes = append(r.res.notes, fmt.Sprintf(format, args...))
}

// changed reports whether a chain differs from before the failure: a
// version moved on or a member is out.
func (r *run) changed(st *status) bool {
	if st.anyOffline() {
		return true
	}
	base := r.base.versions()
	for id, v := range st.versions() {
		if v != base[id] {
			return true
		}
	}
	return false
}

// waitFailover waits until the status shows srv1 (or whichever server)
// taken out of its chains, and returns that status.
func (r *run) waitFailover() *status {
	r.t.Helper()
	st := r.mon.waitFor(r.injected, failoverTimeout, func(st *status) bool { return st.anyOffline() })
	if st == nil {
		r.t.Fatalf("no failover within %v of the failure; last status: %s", failoverTimeout, r.mon.latest())
	}
	r.t.Logf("+%.1fs failover in status: %s", r.since(st.at), st)
	return st
}

// waitFenced waits for the fence outcome of a host's storage server and
// returns its summary.
func (r *run) waitFenced(host string) string {
	r.t.Helper()
	st := r.mon.waitFor(r.injected, fenceTimeout, func(st *status) bool {
		for _, f := range st.Fencing {
			if st.hostOfServer(f.Server) == host {
				return true
			}
		}
		return false
	})
	if st == nil {
		r.t.Fatalf("no fence outcome for %s within %v", host, fenceTimeout)
	}
	for _, f := range st.Fencing {
		if st.hostOfServer(f.Server) == host {
			r.t.Logf("+%.1fs fencing: %s (fenced %v)", r.since(st.at), f.Summary, f.Fenced)
			if !f.Fenced {
				r.t.Errorf("%s not fenced: %s", host, f.Summary)
			}
			return f.Summary
		}
	}
	panic("unreachable")
}

// measureFailover times the first change of the chains after the
// injection and checks it against the scenario's expectation.
func (r *run) measureFailover() {
	r.t.Helper()
	st := r.mon.first(r.injected, r.changed)
	if st == nil && r.sc.failover {
		// The change may show a moment after the heal (a hang).
		st = r.mon.waitFor(r.injected, failoverTimeout, r.changed)
	}
	switch {
	case st == nil && r.sc.failover:
		r.t.Errorf("no failover: the chains never changed; last status: %s", r.mon.latest())
	case st != nil && !r.sc.failover:
		r.t.Errorf("failover where none is expected, %.1fs after the failure: %s", r.since(st.at), st)
	}
	if st == nil {
		return
	}
	r.failover = st
	r.res.detect = st.at.Sub(r.injected)
	before, after := r.base.heads(), st.heads()
	for id, h := range before {
		if after[id] != h && after[id] != 0 {
			r.res.moved = true
		}
	}
}

// waitRecovered waits for the cluster to be whole again after the heal:
// every member serving (the failed server resynced) where there was a
// failover, and otherwise a few seconds in which still nothing changes.
func (r *run) waitRecovered() {
	r.t.Helper()
	if r.failover == nil {
		r.sleepUntil(r.healed.Add(settle))
		for _, st := range r.mon.all(r.injected) {
			if r.changed(st) {
				r.t.Errorf("chains changed %.1fs after the failure, where nothing should: %s", r.since(st.at), st)
				break
			}
		}
		return
	}
	// After the heal, and after the failover, which a hang may show only
	// once healed.
	since := r.healed
	if r.failover.at.After(since) {
		since = r.failover.at
	}
	st := r.mon.waitFor(since, resyncTimeout, r.c.whole)
	if st == nil {
		r.c.dumpGoroutines()
		r.t.Fatalf("chains not all serving %v after the heal; last status: %s", resyncTimeout, r.mon.latest())
	}
	r.res.resync = st.at.Sub(r.healed)
	wroteAtServing := r.load.written() // before waiting for the heads' logs
	r.t.Logf("+%.1fs every member serving again: %s", r.since(st.at), st)
	if t := r.settledResyncs(); t.chunks > 0 {
		r.res.resyncRate = float64(t.bytes) / 1e6 / t.longest.Seconds()
		r.notef("resync copied %d chunks (%d MiB) in %.1f s on the heads (%.0f MB/s; %.2f s of it making the copies durable, %.2f s waiting for bucket listings)",
			t.chunks, t.bytes>>20, t.longest.Seconds(), r.res.resyncRate, t.durable.Seconds(), t.listWait.Seconds())
		if t.stopped > 0 {
			r.notef("%d resync runs stopped and restarted", t.stopped)
		}
		during, before := wroteAtServing.rateSince(r.wroteAtHeal), r.wroteAtInject.rateSince(r.wroteAtStart)
		r.notef("the load wrote %.0f MB/s to the mount from the heal until every member served (%.0f MB/s before the failure)", during, before)
	}
	r.c.waitAllReplicas()
}

// settledResyncs reads the resync totals once the heads' logs stop
// growing: a head logs a finished resync after the metadata leader
// answered its report, so the status can show every member serving a
// moment before the line is written.
func (r *run) settledResyncs() resyncTotals {
	t := r.c.resyncsDone()
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
		time.Sleep(250 * time.Millisecond)
		again := r.c.resyncsDone()
		if again == t && t.chunks > 0 {
			break
		}
		t = again
	}
	return t
}

// checkTwoCopies checks with `tandem stripe get --json` that a file has
// two copies, on different servers.
func checkTwoCopies(c *cluster, path string) {
	c.t.Helper()
	out, err := exec.Command(c.bin, "stripe", "get", "--json", path).CombinedOutput()
	if err != nil {
		c.t.Fatalf("stripe get %s: %v: %s", path, err, out)
	}
	var l struct {
		Replicas uint32 `json:"replicas"`
		Copies   []struct {
			Targets []uint32 `json:"targets"`
		} `json:"copies"`
	}
	if err := json.Unmarshal(out, &l); err != nil {
		c.t.Fatalf("stripe get --json %s: %v: %s", path, err, out)
	}
	st, err := c.status(c.t.Context())
	if err != nil {
		c.t.Fatal(err)
	}
	if l.Replicas != 2 || len(l.Copies) == 0 {
		c.t.Fatalf("%s has %d replicas in %d chains, want 2 copies: %s", path, l.Replicas, len(l.Copies), out)
	}
	for _, cp := range l.Copies {
		if len(cp.Targets) != 2 || st.hostOfTarget(cp.Targets[0]) == st.hostOfTarget(cp.Targets[1]) {
			c.t.Fatalf("%s: a chain of targets %v, want one on each server (%s)", path, cp.Targets, st)
		}
	}
}

// compareReplicas compares, chain by chain, the chunk files that the
// members of each replicated chain hold (their chain stores,
// <target>/chains/<chain>/chunks, see internal/storage): after a resync
// every copy must be the same. Checksum sidecars are not compared, since
// their "previous" slots record each member's own history.
func compareReplicas(st *status) []string {
	var diffs []string
	for _, ch := range st.replicated() {
		var ref map[string]string
		var refTarget uint32
		for _, tg := range ch.Targets {
			dir := filepath.Join(st.targetPath(tg), "chains", fmt.Sprint(ch.ID), "chunks")
			files, err := chunkFiles(dir)
			if err != nil {
				diffs = append(diffs, fmt.Sprintf("chain %d target %d: %v", ch.ID, tg, err))
				continue
			}
			if ref == nil {
				ref, refTarget = files, tg
				continue
			}
			for _, name := range slices.Sorted(mapsKeys(ref, files)) {
				if a, b := ref[name], files[name]; a != b {
					diffs = append(diffs, fmt.Sprintf("chain %d chunk %s: target %d has %s, target %d has %s",
						ch.ID, name, refTarget, orMissing(a), tg, orMissing(b)))
				}
			}
		}
	}
	if len(diffs) > 20 {
		diffs = append(diffs[:20], fmt.Sprintf("... and %d more", len(diffs)-20))
	}
	return diffs
}

// chunkFiles maps each chunk file under dir (sidecars excluded) to a
// digest of its contents.
func chunkFiles(dir string) (map[string]string, error) {
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if errors.Is(err, os.ErrNotExist) && path == dir {
			return filepath.SkipDir // no chunk of this chain yet
		}
		if err != nil || d.IsDir() || strings.HasSuffix(path, ".sum") {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		sum, err := digest(path)
		out[rel] = sum
		return err
	})
	return out, err
}

func orMissing(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func mapsKeys(a, b map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range a {
			if !yield(k) {
				return
			}
		}
		for k := range b {
			if _, dup := a[k]; !dup && !yield(k) {
				return
			}
		}
	}
}

// firstErr returns the first non-nil error.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// isSignaled reports whether a process ended by a signal (the PDU's kill).
func isSignaled(err error) bool {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok {
			return ws.Signaled()
		}
	}
	return false
}

// digest is the size and SHA-256 of a file's contents.
func digest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d bytes sha256 %s", n, hex.EncodeToString(h.Sum(nil))[:16]), nil
}
