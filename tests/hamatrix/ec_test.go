package hamatrix

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"tandemfs/internal/netlab"
	"tandemfs/internal/testcluster"
)

// The erasure-coding rows of the failure matrix. Six storage servers with
// one target each hold every file of the mount coded 4+2: each stripe has
// a shard on every server, so any two may fail and every byte still reads
// back, and a third failing stops reads and writes of every stripe until
// one returns. The client on cli writes and reads `tandem stream gen`
// streams (the load of the storage matrix, load_test.go) while, in turn,
// two servers are killed one after the other, two at once, one hangs, one
// target's disk returns EIO, and three are killed and one is brought
// back. The rows fail different servers, no server more than twice: the
// metadata service holds a server that failed three times within ten
// minutes out of its replicated chains (internal/meta/failover.go). Each
// row waits until the failed servers are back and every stripe
// written without them has been rebuilt (`tandem status`: ec_repair), and
// reports that time and rate; at the end a parity check of every coded
// file (`tandem scrub`) must find nothing to repair.

// ecTopology: srv1 .11, srv2 .12, third .13, srv4 .14, srv5 .15,
// srv6 .16, cli .17. The metadata replicas run on the first three, as in
// the storage matrix; only storage servers fail here.
var ecTopology = []netlab.HostSpec{
	{Name: "srv1", Public: true, Private: true},
	{Name: "srv2", Public: true, Private: true},
	{Name: "third", Public: true, Private: true},
	{Name: "srv4", Public: true, Private: true},
	{Name: "srv5", Public: true, Private: true},
	{Name: "srv6", Public: true, Private: true},
	{Name: "cli", Public: true},
}

const (
	ecScheme = "4+2"
	// rebuildTimeout bounds the wait, from the heal, until no stripe
	// lacks a shard.
	rebuildTimeout = 120 * time.Second
)

// ecScenario is one erasure-coding row: fail breaks something and returns
// the hosts whose storage servers it took away and how to heal it.
type ecScenario struct {
	num   int
	id    string
	name  string
	short bool // in the default run
	// blocks: more than the parity's worth of servers is gone for a
	// while, so clients wait (no bound on the stall, no errors).
	blocks bool
	fail   func(r *ecRun) (gone []string, heal func())
}

var ecScenarios = []ecScenario{
	{
		num: 1, id: "two_one_after_the_other", name: "kill -9 of two storage servers, 3 s apart",
		fail: func(r *ecRun) ([]string, func()) {
			r.kill("srv5")
			time.Sleep(3 * time.Second)
			r.kill("srv6")
			return []string{"srv5", "srv6"}, func() {
				time.Sleep(time.Until(r.injected.Add(hold)))
				r.c.startStorage("srv5")
				r.c.startStorage("srv6")
			}
		},
	},
	{
		num: 2, id: "two_at_once", name: "kill -9 of two storage servers at once", short: true,
		fail: func(r *ecRun) ([]string, func()) {
			r.kill("srv1", "srv2")
			return []string{"srv1", "srv2"}, func() {
				time.Sleep(time.Until(r.injected.Add(hold)))
				r.c.startStorage("srv1")
				r.c.startStorage("srv2")
			}
		},
	},
	{
		num: 3, id: "hang", name: "a storage server hangs (SIGSTOP for " + hold.String() + ", then SIGCONT)",
		fail: func(r *ecRun) ([]string, func()) {
			if err := r.c.proc("storage", "third").Stop(); err != nil {
				r.t.Fatal(err)
			}
			return []string{"third"}, func() {
				time.Sleep(time.Until(r.injected.Add(hold)))
				r.c.proc("storage", "third").Cont()
			}
		},
	},
	{
		num: 4, id: "disk_eio", name: "a target's disk returns EIO on every read and write", short: true,
		fail: func(r *ecRun) ([]string, func()) {
			disk := r.c.targetDir("srv4", 1)
			if err := r.c.setFaults("srv4", []faultRule{{Path: disk + "/", Ops: "open,read,write,sync,truncate", Errno: "EIO"}}); err != nil {
				r.t.Fatal(err)
			}
			return []string{"srv4"}, func() {
				time.Sleep(time.Until(r.injected.Add(hold)))
				// The disk replaced: faults cleared, the server restarted.
				if err := r.c.setFaults("srv4", nil); err != nil {
					r.t.Fatal(err)
				}
				if err := r.c.stopStorage("srv4"); err != nil {
					r.t.Fatal(err)
				}
				r.c.startStorage("srv4")
			}
		},
	},
	{
		num: 5, id: "three_then_one_back", name: "kill -9 of three storage servers, one back after " + hold.String(), short: true, blocks: true,
		fail: func(r *ecRun) ([]string, func()) {
			r.kill("srv4", "srv5", "srv6")
			return []string{"srv4", "srv5", "srv6"}, func() {
				time.Sleep(time.Until(r.injected.Add(hold)))
				r.c.startStorage("srv6")
				// Two gone is what the code survives: the load goes on
				// degraded for a while before the others return.
				time.Sleep(hold / 2)
				r.c.startStorage("srv4")
				r.c.startStorage("srv5")
			}
		},
	},
}

// ecRun is one row in progress on the shared cluster.
type ecRun struct {
	t        *testing.T
	c        *cluster
	injected time.Time
}

func (r *ecRun) kill(hosts ...string) {
	r.t.Helper()
	for _, h := range hosts {
		if err := r.c.proc("storage", h).Kill9(); err != nil {
			r.t.Fatal(err)
		}
	}
}

// startECCluster starts six storage servers, the metadata replicas and
// the mount, and codes the mount's root directory 4+2.
func startECCluster(t *testing.T, prefix string) *cluster {
	t.Helper()
	netlab.Skip(t)
	testcluster.RequireFUSE(t)
	c := newCluster(t, prefix, ecTopology)
	c.storage = []string{"srv1", "srv2", "third", "srv4", "srv5", "srv6"}
	c.targets, c.chains = 1, 0
	c.faults = true
	c.mnt = filepath.Join(c.dir, "mnt")
	cleanup(t, "unmounting", c.unmount)
	if err := os.MkdirAll(c.mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	c.startServers(c.startMount)
	c.waitMounted()
	if out, err := exec.Command(c.bin, "stripe", "set", "--ec", ecScheme, c.mnt).CombinedOutput(); err != nil {
		t.Fatalf("stripe set --ec %s on the mount: %v: %s", ecScheme, err, out)
	}
	return c
}

// TestECMatrix runs the erasure-coding rows on one cluster, one after the
// other, each with its own load. A row reports the checkstream result,
// when the status showed the failed servers' targets out, the longest
// stall of a probe, and the rebuild: from the heal until no stripe lacked
// a shard, and the rate of the bytes rebuilt.
func TestECMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("the failure matrix runs real clusters for minutes; not with -short")
	}
	c := startECCluster(t, "ecmx")
	pre := writePre(c, sizes().read)
	checkCoded(c, pre)
	for _, sc := range ecScenarios {
		t.Run(fmt.Sprintf("%d_%s", sc.num, sc.id), func(t *testing.T) {
			if !(scenario{num: sc.num, short: sc.short}).selected() {
				t.Skip("not in the short form; HA_MATRIX=full runs it")
			}
			c.t = t
			row := runECScenario(t, c, sc)
			t.Logf("RESULT EC %d. %s: %s", sc.num, sc.name, row)
		})
	}
	t.Run("parity", func(t *testing.T) {
		c.t = t
		checkParity(c)
	})
}

// runECScenario runs one row and returns its line of the table.
func runECScenario(t *testing.T, c *cluster, sc ecScenario) string {
	removeLoadFiles(c)
	base := c.waitFor("every server online and no stripe degraded", upTimeout, func(st *status) bool {
		return c.whole(st) && st.degraded() == 0
	})
	r := &ecRun{t: t, c: c}
	// A row that fails part way leaves the next one a whole cluster.
	t.Cleanup(func() { c.reviveStorage() })
	probes := []*probe{
		startProbe(c, "write+fsync 4 KiB", "write", filepath.Join(c.mnt, "probe")),
		startProbe(c, "open+read 4 KiB", "read", filepath.Join(c.mnt, "pre")),
	}
	load := startLoad(c, sizes())
	time.Sleep(injectAfter)
	r.injected = time.Now()
	gone, heal := sc.fail(r)
	t.Logf("+%.1fs injected: %s", time.Since(r.injected).Seconds(), sc.name)
	seen := c.waitFor("the failed servers' targets out of service", failoverTimeout, func(st *status) bool {
		return st.targetsOut(gone)
	})
	detect := seen.at.Sub(r.injected)
	t.Logf("+%.1fs status shows %v out: %s", detect.Seconds(), gone, seen)
	heal()
	healed := time.Now()
	t.Logf("+%.1fs healed", healed.Sub(r.injected).Seconds())
	whole := c.waitFor("every server online and every stripe whole again", rebuildTimeout, func(st *status) bool {
		return c.whole(st) && st.degraded() == 0
	})
	rebuild := whole.at.Sub(healed)
	bytes, since := whole.rebuiltBytes(), "since the metadata leader changed"
	if whole.leader == base.leader {
		bytes, since = bytes-base.rebuiltBytes(), ""
	}
	t.Logf("+%.1fs every stripe whole: %s", whole.at.Sub(r.injected).Seconds(), whole)

	if !load.stop(loadTimeout) {
		t.Errorf("the load did not finish within %v of the recovery", loadTimeout)
	}
	copies, read, errs, _ := load.result()
	for _, err := range errs {
		t.Errorf("client load failed: %v", err)
	}
	var stall time.Duration
	var stallOf string
	for _, p := range probes {
		pl, err := p.finish(loadTimeout)
		if err != nil {
			t.Errorf("probe %s: %v", p.name, err)
		}
		if pl.err != nil {
			t.Errorf("probe %s failed: %v", p.name, pl.err)
		}
		if pl.longest > stall {
			stall, stallOf = pl.longest, fmt.Sprintf("%s at %+.1fs", p.name, pl.at.Sub(r.injected).Seconds())
		}
	}
	if !sc.blocks && stall > maxStall {
		t.Errorf("a client operation stalled %v (%s); bound %v", stall.Round(time.Millisecond), stallOf, maxStall)
	}
	checked, size, failed := checkStreams(c, append(copies, filepath.Join(c.mnt, "pre")))
	for _, f := range failed {
		t.Errorf("checkstream: %s", f)
	}
	if checked+read.n < 2*loadWriters {
		t.Errorf("the load finished only %d copies: not enough to check", checked+read.n)
	}
	rate := "nothing to rebuild"
	if bytes > 0 {
		rate = fmt.Sprintf("%d MiB rebuilt%s, %.0f MB/s", bytes>>20, prefixed(since), float64(bytes)/1e6/rebuild.Seconds())
	}
	return fmt.Sprintf("checkstream %d/%d files (%d MiB): %d errors | out in status %.1f s | longest stall %.1f s (%s) | rebuild %.1f s after the heal (%s)",
		checked+read.n, len(copies)+1+read.n+read.failed, (size+read.bytes)>>20, len(failed)+read.failed+len(errs),
		detect.Seconds(), stall.Seconds(), stallOf, rebuild.Seconds(), rate)
}

// reviveStorage clears every disk fault and wakes or restarts every
// storage server that is stopped or gone.
func (c *cluster) reviveStorage() {
	for _, h := range c.storage {
		c.setFaults(h, nil)
		p := c.procs["storage@"+h]
		if p == nil || p.Exited() {
			c.startStorage(h)
			continue
		}
		p.Cont()
	}
}

// removeLoadFiles deletes the files an earlier row's load and probes
// wrote, keeping the stream every row reads, and the probes' logs and
// stop files.
func removeLoadFiles(c *cluster) {
	logs, _ := filepath.Glob(filepath.Join(c.dir, "logs", "probe-*"))
	for _, f := range logs {
		os.Remove(f)
	}
	files, _ := filepath.Glob(filepath.Join(c.mnt, "w[0-9]*-[0-9]*"))
	for _, f := range append(files, filepath.Join(c.mnt, "probe")) {
		if err := os.Remove(f); err != nil && !os.IsNotExist(err) {
			c.t.Fatal(err)
		}
	}
}

// checkCoded checks with `tandem stripe get --json` that a file is coded
// 4+2 with its shards on six different servers.
func checkCoded(c *cluster, path string) {
	c.t.Helper()
	out, err := exec.Command(c.bin, "stripe", "get", "--json", path).CombinedOutput()
	if err != nil {
		c.t.Fatalf("stripe get %s: %v: %s", path, err, out)
	}
	var l struct {
		EC *struct {
			Data   int `json:"data"`
			Parity int `json:"parity"`
			Shards []struct {
				Server uint32 `json:"server"`
			} `json:"shards"`
		} `json:"ec"`
	}
	if err := json.Unmarshal(out, &l); err != nil {
		c.t.Fatalf("stripe get --json %s: %v: %s", path, err, out)
	}
	if l.EC == nil || l.EC.Data != 4 || l.EC.Parity != 2 {
		c.t.Fatalf("%s is not coded %s: %s", path, ecScheme, out)
	}
	var servers []uint32
	for _, s := range l.EC.Shards {
		if !slices.Contains(servers, s.Server) {
			servers = append(servers, s.Server)
		}
	}
	if len(servers) != 6 {
		c.t.Fatalf("%s has its shards on %d servers, want 6: %s", path, len(servers), out)
	}
}

// checkParity runs `tandem scrub` and waits for the parity check of every
// coded file: no shard may be missing or disagree with the others.
func checkParity(c *cluster) {
	c.t.Helper()
	started := time.Now()
	if out, err := c.host("cli").Run(c.bin, "scrub", "--meta", strings.Join(c.metaAddrs(), ","), "--secret-file", c.secret); err != nil {
		c.t.Fatalf("tandem scrub: %v: %s", err, out)
	}
	st := c.waitFor("the parity check to end", rebuildTimeout, func(st *status) bool {
		return st.ECScrub != nil && !st.ECScrub.Running && st.ECScrub.Ended != ""
	})
	s := st.ECScrub
	c.t.Logf("RESULT EC parity check after every row (%.1f s): %d files, %d stripes, %d missing, %d mismatched, %d rebuilt, %d unreachable shards",
		time.Since(started).Seconds(), s.Files, s.Stripes, s.Missing, s.Mismatched, s.Rebuilt, s.Unreachable)
	if s.Files == 0 || s.Stripes == 0 {
		c.t.Errorf("the parity check looked at nothing: %+v", *s)
	}
	if s.Missing+s.Mismatched+s.Unreachable > 0 {
		c.t.Errorf("the parity check found shards to repair after every row had been rebuilt: %+v", *s)
	}
}

// prefixed puts ", " before a remark, if there is one.
func prefixed(s string) string {
	if s == "" {
		return ""
	}
	return ", " + s
}
