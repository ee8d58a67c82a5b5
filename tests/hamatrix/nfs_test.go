package hamatrix

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"tandemfs/internal/netlab"
	"tandemfs/internal/testenv"
)

// The NFS rows of the failure matrix: the NSS-HA service rebuilt. Two
// gateway heads on hosts of their own (gw1, gw2) hold one service address
// on the public network; the client host copies `tandem stream gen`
// streams in and out through it with libnfs while, in turn, the active
// head's process is killed, it hangs, its public link goes down, its
// private link goes down, and a storage server under it crashes. As in
// NSS-HA, a head is fenced before its address moves: the metadata leader
// runs fence_tandem_kill against the head's process (a PDU outlet here),
// and the heads' leases keep a head that is only cut off from serving.

// nfsTopology adds the heads and the client to the servers of the storage
// matrix: srv1 .11, srv2 .12, third .13, gw1 .14, gw2 .15, cli .16.
var nfsTopology = []netlab.HostSpec{
	{Name: "srv1", Public: true, Private: true},
	{Name: "srv2", Public: true, Private: true},
	{Name: "third", Public: true, Private: true},
	{Name: "gw1", Public: true, Private: true},
	{Name: "gw2", Public: true, Private: true},
	{Name: "cli", Public: true},
}

const (
	nfsService = "10.77.0.100:2049" // the service address clients mount
	nfsStream  = "256M"             // each copy in and out
)

// startNFSCluster starts metadata replicas on srv1, srv2, third, storage
// servers on srv1 and srv2, and gateway heads on gw1 and gw2; it returns
// once a head serves the service address.
func startNFSCluster(t *testing.T, prefix string) *cluster {
	t.Helper()
	netlab.Skip(t)
	testenv.RequireCommand(t, "nfs-cp")
	c := newCluster(t, prefix, nfsTopology)
	c.writeHeadFenceConfig()
	c.startServers(nil)
	for _, h := range nfsHeads {
		c.startHead(h)
	}
	c.waitFor("a head serving "+nfsService, upTimeout, func(st *status) bool { return st.NFS != nil && st.NFS.Active != "" })
	return c
}

// startHead starts host h's gateway head, holding the service address on
// its public interface, and writes its PID file for the fence agent.
func (c *cluster) startHead(h string) {
	p := c.start("nfs", h, "nfs", "--meta", strings.Join(c.metaAddrs(), ","), "--secret-file", c.secret,
		"--head", h, "--head-addr", c.host(h).PublicIP(), "--service", nfsService, "--interface", "pub", "--prefix", "24",
		"--export", "/ 10.77.0.0/24(rw,no_root_squash)")
	if err := os.WriteFile(c.headPidFile(h), []byte(fmt.Sprintf("%d\n", p.PID())), 0o644); err != nil {
		c.t.Fatal(err)
	}
}

func (c *cluster) headPidFile(h string) string { return filepath.Join(c.dir, h+".pid") }

// writeHeadFenceConfig fences each head by killing its process.
func (c *cluster) writeHeadFenceConfig() {
	kill := filepath.Join(repoRoot(c.t), "scripts", "fence", "fence_tandem_kill")
	servers := map[string]any{}
	for _, h := range nfsHeads {
		servers[h] = []any{map[string]any{"name": "pdu", "command": kill, "options": map[string]string{"pidfile": c.headPidFile(h)}}}
	}
	data, err := json.MarshalIndent(map[string]any{"timeout": "10s", "servers": servers}, "", "  ")
	if err != nil {
		c.t.Fatal(err)
	}
	c.fence = filepath.Join(c.dir, "fence.json")
	if err := os.WriteFile(c.fence, data, 0o600); err != nil {
		c.t.Fatal(err)
	}
}

// restartHead starts h's head again if it is gone (fenced or killed).
func (c *cluster) restartHead(h string) {
	if c.proc("nfs", h).Exited() {
		c.startHead(h)
	}
}

// holdsService reports whether host h has the service address on an
// interface.
func (c *cluster) holdsService(h string) bool {
	out, _ := c.host(h).Run("ip", "-4", "-o", "addr", "show", "dev", "pub")
	ip, _, _ := strings.Cut(nfsService, ":")
	return strings.Contains(string(out), " "+ip+"/")
}

// nfsHeads are the hosts of the gateway's heads.
var nfsHeads = []string{"gw1", "gw2"}

func nfsURL(path string) string {
	host, port, _ := strings.Cut(nfsService, ":")
	return fmt.Sprintf("nfs://%s/%s?version=3&nfsport=%s&mountport=%s&auto-traverse-mounts=0", host, path, port, port)
}

// nfsScenario is one NFS row: what fails, and whether the address must
// move to the other head.
type nfsScenario struct {
	id    string
	name  string
	moves bool
	// fail injects the failure on the active head's host (or under it)
	// and returns how to heal it.
	fail func(c *cluster, active string) (heal func())
	// fullOnly, if set, says why the row runs only in the full matrix
	// (HA_MATRIX=full).
	fullOnly string
}

// libnfsReconnectBug is why the public-link row is not in CI's short form.
// A head whose public link goes down leaves its clients' replies cut in
// the middle. libnfs 4.0.0 (Debian 12's) keeps the half-read reply's
// state when it reconnects, reads the new connection's bytes as the rest
// of it, and from then on takes a size out of the middle of a reply as a
// record marker: it closes every new connection at its first reply, for
// ever (the head logs "broken pipe" for each). The fix, "Reset state on
// reconnect" (sahlberg/libnfs a38a321), came in libnfs 5.0.3.
const libnfsReconnectBug = "libnfs 4.0.0 loops reconnecting after a connection cut in the middle of a reply (fixed in libnfs 5.0.3); HA_MATRIX=full runs it"

var nfsScenarios = []nfsScenario{
	{"head_crash", "active head killed (kill -9)", true, func(c *cluster, active string) func() {
		if err := c.proc("nfs", active).Kill9(); err != nil {
			c.t.Fatal(err)
		}
		return func() { c.restartHead(active) }
	}, ""},
	{"head_hang", "active head hangs (SIGSTOP for " + hold.String() + ", then SIGCONT)", true, func(c *cluster, active string) func() {
		if err := c.proc("nfs", active).Stop(); err != nil {
			c.t.Fatal(err)
		}
		return func() {
			time.Sleep(hold)
			c.proc("nfs", active).Cont() // if the fence has not killed it
			c.restartHead(active)
		}
	}, ""},
	{"head_public_link_down", "active head's public link down for " + hold.String(), true, func(c *cluster, active string) func() {
		if err := c.host(active).LinkDown(netlab.Public); err != nil {
			c.t.Fatal(err)
		}
		return func() {
			time.Sleep(hold)
			c.host(active).LinkUp(netlab.Public)
			c.restartHead(active)
		}
	}, libnfsReconnectBug},
	{"head_private_link_down", "active head's private link down for " + hold.String(), false, func(c *cluster, active string) func() {
		if err := c.host(active).LinkDown(netlab.Private); err != nil {
			c.t.Fatal(err)
		}
		return func() {
			time.Sleep(hold)
			c.host(active).LinkUp(netlab.Private)
		}
	}, ""},
	{"storage_crash", "a storage server under the active head crashes (kill -9 of srv1's storage)", false, func(c *cluster, active string) func() {
		if err := c.proc("storage", "srv1").Kill9(); err != nil {
			c.t.Fatal(err)
		}
		return func() { c.startStorage("srv1") }
	}, ""},
}

// TestNFSMatrix runs every NFS row in one lab. Each row writes a stream
// in and reads another out through the service address while its failure
// happens, checks both with `tandem stream check`, and reports the time
// until the other head served (detect + move), the copies' durations
// against a copy without failure (the longest stall), and where the
// address ended up.
func TestNFSMatrix(t *testing.T) {
	c := startNFSCluster(t, "nfsha")
	cli := c.host("cli")
	work := filepath.Join(c.dir, "cli")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	gen := func(path string) {
		if out, err := cli.Run(c.bin, "stream", "gen", "--size", nfsStream, "-o", path); err != nil {
			t.Fatalf("stream gen: %v: %s", err, out)
		}
	}
	copyOnce := func(from, to string) (time.Duration, error) {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		out, err := cli.RunContext(ctx, "nfs-cp", from, to)
		if err != nil {
			err = fmt.Errorf("%v: %s", err, out)
		}
		return time.Since(start), err
	}
	// The copy without failures is the yardstick of the stalls: it
	// runs once the heads have taken their block caches' memory, which
	// they do as they start (at most half a core each, shared here).
	for _, h := range nfsHeads {
		c.waitLog("nfs", h, "block cache of", upTimeout)
	}
	gen(filepath.Join(work, "base"))
	baseline, err := copyOnce(filepath.Join(work, "base"), nfsURL("base"))
	if err != nil {
		t.Fatalf("a copy without failures: %v", err)
	}
	t.Logf("a %s copy in without failures: %v", nfsStream, baseline.Round(time.Millisecond))

	for i, sc := range nfsScenarios {
		t.Run(fmt.Sprintf("%d_%s", i+1, sc.id), func(t *testing.T) {
			if sc.fullOnly != "" && !fullMatrix() {
				t.Skip("not in the short form: " + sc.fullOnly)
			}
			c.t = t
			before := c.waitFor("an active head", upTimeout, func(st *status) bool { return st.NFS != nil && st.NFS.Active != "" })
			active := before.NFS.Active
			in, out := filepath.Join(work, sc.id+"-in"), filepath.Join(work, sc.id+"-out")
			gen(in)
			gen(filepath.Join(work, sc.id+"-src"))
			if _, err := copyOnce(filepath.Join(work, sc.id+"-src"), nfsURL(sc.id+"-src")); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			var took [2]time.Duration
			var errs [2]error
			for j, cp := range [][2]string{{in, nfsURL(sc.id + "-in")}, {nfsURL(sc.id + "-src"), out}} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					took[j], errs[j] = copyOnce(cp[0], cp[1])
				}()
			}
			time.Sleep(200 * time.Millisecond)
			injected := time.Now()
			heal := sc.fail(c, active)
			moved := time.Duration(0)
			if sc.moves {
				c.waitFor("the other head serving", 30*time.Second, func(st *status) bool {
					return st.NFS != nil && st.NFS.Active != "" && st.NFS.Active != active
				})
				moved = time.Since(injected)
			}
			wg.Wait()
			heal()
			for j, err := range errs {
				if err != nil {
					t.Fatalf("copy %d across the failure: %v", j, err)
				}
			}
			back := filepath.Join(work, sc.id+"-in-back")
			if _, err := copyOnce(nfsURL(sc.id+"-in"), back); err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{back, out} {
				if res, err := cli.Run(c.bin, "stream", "check", f); err != nil {
					t.Fatalf("checkstream of %s: %v\n%s", f, err, res)
				}
			}
			after := c.waitFor("an active head", upTimeout, func(st *status) bool { return st.NFS != nil && st.NFS.Active != "" })
			if !sc.moves && after.NFS.Active != active {
				t.Errorf("the address moved from %s to %s, which it must not for this failure", active, after.NFS.Active)
			}
			for _, h := range nfsHeads {
				if h != after.NFS.Active && c.holdsService(h) {
					t.Errorf("%s, not the active head, still has the service address", h)
				}
			}
			stall := max(took[0], took[1]) - baseline
			t.Logf("ROW %s | checkstream 0 errors (in and out) | detect+move %v | longest stall %v (copies took %v and %v; %v without failures) | moved: %v (%s -> %s)",
				sc.name, moved.Round(10*time.Millisecond), stall.Round(10*time.Millisecond),
				took[0].Round(10*time.Millisecond), took[1].Round(10*time.Millisecond), baseline.Round(10*time.Millisecond),
				after.NFS.Active != active, active, after.NFS.Active)
		})
	}
}
