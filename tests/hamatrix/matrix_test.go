package hamatrix

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"tandemfs/internal/netlab"
)

// scenario is one row of the failure matrix.
type scenario struct {
	num   int
	id    string // the subtest's name after the number
	name  string // what fails, as the table says it
	short bool   // part of the short form that `go test` runs by default
	// failover says whether the metadata leader must take srv1's members
	// out of their chains; where it must not, no chain may change at all.
	failover bool
	// blocks says that no copy of the data remains, so clients must wait
	// (not fail) until a server returns: no bound on the stall then.
	blocks bool
	fence  bool   // the metadata replicas run fence agents
	faults bool   // the storage servers take disk faults from a file
	cache  string // every target has a flash cache (tmpfs) in this mode
	// act injects the failure (run.inject) into the running load and
	// heals it (run.heal) as the scenario says.
	act func(r *run)
}

// hold is how long a failure that heals by itself (a hang, a cable, a
// switch) lasts: well past the 4 s failure timeout. HA_MATRIX_HOLD (a
// duration) changes it, to see how stalls grow with the failure.
var hold = holdDuration()

func holdDuration() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("HA_MATRIX_HOLD")); err == nil && d > 0 {
		return d
	}
	return 10 * time.Second
}

// scenarios is the matrix of NSS-HA section 4.3 (server failure, heartbeat
// link, public link, private switch, fence device) plus a hang and a double
// failure, and a failing disk in place of the papers' SAS-link failures
// (targets are local disks here).
var scenarios = []scenario{
	{
		num: 1, id: "server_crash", name: "server crash (kill -9 of everything on srv1)", short: true, failover: true,
		act: func(r *run) {
			r.inject("kill -9 of every process on srv1", func() error { return r.c.host("srv1").KillAll() })
			r.waitFailover()
			r.heal("restart srv1's metadata replica and storage server", func() error {
				r.c.restartServer("srv1")
				return nil
			})
		},
	},
	{
		num: 2, id: "server_hang", name: "server hang (SIGSTOP of everything on srv1 for " + hold.String() + ")", failover: true,
		act: func(r *run) {
			r.inject("SIGSTOP of every process on srv1", func() error {
				return firstErr(r.c.proc("meta", "srv1").Stop(), r.c.proc("storage", "srv1").Stop())
			})
			r.sleepUntil(r.injected.Add(hold))
			r.heal("SIGCONT", func() error {
				return firstErr(r.c.proc("meta", "srv1").Cont(), r.c.proc("storage", "srv1").Cont())
			})
		},
	},
	{
		num: 3, id: "private_link_down", name: "heartbeat (private) link of srv1 down for " + hold.String(), short: true,
		act: func(r *run) {
			r.inject("pull srv1's private cable", func() error { return r.c.host("srv1").LinkDown(netlab.Private) })
			r.sleepUntil(r.injected.Add(hold))
			r.heal("plug it in again", func() error { return r.c.host("srv1").LinkUp(netlab.Private) })
		},
	},
	{
		num: 4, id: "public_link_down", name: "public link of srv1 down for " + hold.String(), failover: true,
		act: func(r *run) {
			r.inject("pull srv1's public cable", func() error { return r.c.host("srv1").LinkDown(netlab.Public) })
			r.sleepUntil(r.injected.Add(hold))
			r.heal("plug it in again", func() error { return r.c.host("srv1").LinkUp(netlab.Public) })
		},
	},
	{
		num: 5, id: "private_switch_down", name: "private switch down for " + hold.String(),
		act: func(r *run) {
			r.inject("switch off the private switch", func() error { return r.c.lab.SwitchDown(netlab.Private) })
			r.sleepUntil(r.injected.Add(hold))
			r.heal("switch it on again", func() error { return r.c.lab.SwitchUp(netlab.Private) })
		},
	},
	{
		num: 6, id: "fence_agent_fails", name: "primary fence agent (iDRAC) fails; srv1's storage server hangs", short: true, failover: true, fence: true,
		act: func(r *run) {
			// The fence agents run on the metadata leader; the PDU would
			// power it off with srv1.
			if h := r.c.hostOfAddr(r.base.leader); h == "srv1" {
				r.t.Fatalf("the metadata leader moved to srv1")
			}
			r.inject("SIGSTOP of srv1's storage server", func() error { return r.c.proc("storage", "srv1").Stop() })
			r.waitFailover()
			f := r.waitFenced("srv1")
			r.notef("%s", f)
			if !strings.Contains(f, "fenced by pdu") || !strings.Contains(f, "idrac failed") {
				r.t.Errorf("srv1 was not fenced by the PDU after the iDRAC failed: %q", f)
			}
			for _, role := range []string{"meta", "storage"} {
				if err := r.c.proc(role, "srv1").Wait(5 * time.Second); err != nil && !isSignaled(err) {
					r.t.Errorf("the PDU left srv1's %s running: %v", role, err)
				}
			}
			r.heal("power srv1 on: restart its metadata replica and storage server", func() error {
				r.c.restartServer("srv1")
				return nil
			})
		},
	},
	{
		num: 7, id: "double_failure", name: "double failure: kill -9 of both storage servers", failover: true, blocks: true,
		act: func(r *run) {
			r.inject("kill -9 of the storage servers on srv1 and srv2", func() error {
				return firstErr(r.c.proc("storage", "srv1").Kill9(), r.c.proc("storage", "srv2").Kill9())
			})
			w := startProbe(r.c, "blocked write", "once", filepath.Join(r.c.mnt, "blocked"))
			st := r.waitFailover()
			r.sleepUntil(r.injected.Add(hold))
			if pl := w.read(); pl.ops > 0 {
				r.t.Fatalf("a write finished (error: %v) after both servers died; it must wait", pl.err)
			}
			// The server failed over first holds stale copies; the other
			// stayed the last serving member of every chain and must
			// return first.
			last := st.servingHosts()
			if len(last) != 1 {
				r.t.Fatalf("after both servers died, %v still serve; want exactly one: %s", last, st)
			}
			r.heal("restart the storage server of "+last[0]+", which holds the last copies", func() error {
				r.c.startStorage(last[0])
				return nil
			})
			pl, err := w.finish(60 * time.Second)
			switch {
			case err != nil:
				r.t.Errorf("the write blocked by the double failure: %v", err)
			case pl.err != nil:
				r.t.Errorf("the write blocked by the double failure failed after the restart: %v", pl.err)
			default:
				r.notef("a write started after the crash waited %v, until %.1f s after the restart",
					pl.longest.Round(100*time.Millisecond), pl.at.Add(pl.longest).Sub(r.healed).Seconds())
			}
			for _, h := range r.c.storage {
				if h != last[0] {
					r.c.startStorage(h)
				}
			}
		},
	},
	{
		num: 8, id: "disk_fails", name: "a target disk of srv1 fails (EIO on every read and write)", failover: true, faults: true,
		act: func(r *run) {
			disk := r.c.targetDir("srv1", 1)
			r.inject("EIO for every open, read, write, sync and truncate under "+disk, func() error {
				return r.c.setFaults("srv1", []faultRule{{Path: disk + "/", Ops: "open,read,write,sync,truncate", Errno: "EIO"}})
			})
			st := r.waitFailover()
			// Only the chain members on the failed disk go: the other
			// target of srv1 serves on.
			for _, ch := range st.replicated() {
				for i, tg := range ch.Targets {
					if onDisk := strings.HasPrefix(st.targetPath(tg), disk); onDisk != (ch.States[i] == "offline") {
						r.t.Errorf("target %d (%s) is %s in chain %d after the disk %s failed", tg, st.targetPath(tg), ch.States[i], ch.ID, disk)
					}
				}
			}
			r.sleepUntil(r.injected.Add(hold)) // the load goes on without the disk
			r.heal("replace the disk (clear the faults) and restart srv1's storage server", func() error {
				if err := r.c.setFaults("srv1", nil); err != nil {
					return err
				}
				if err := r.c.stopStorage("srv1"); err != nil {
					return err
				}
				r.c.startStorage("srv1")
				return nil
			})
		},
	},
	{
		num: 9, id: "cache_device_fails", name: "the flash cache device of srv1's targets fails (EIO on every call), write-through",
		faults: true, cache: "writethrough", short: true,
		act: func(r *run) {
			dev := r.c.caches + "/srv1/"
			r.inject("EIO for every call under "+dev, func() error {
				return r.c.setFaults("srv1", []faultRule{{Path: dev, Ops: "all", Errno: "EIO"}})
			})
			// Nothing changes for the clients or the chains: the
			// targets serve from their disks, write-through loses
			// nothing.
			r.sleepUntil(r.injected.Add(hold))
			// The device back (faults cleared); the server keeps it
			// dropped until it restarts.
			r.heal("clear the faults", func() error { return r.c.setFaults("srv1", nil) })
		},
	},
	{
		num: 10, id: "crash_with_dirty_cache", name: "server crash (kill -9 of everything on srv1) with data written back to its flash cache and not yet on its slow disk",
		faults: true, cache: "writeback", short: true, failover: true,
		act: func(r *run) {
			slowDisks(r)
			r.inject("kill -9 of every process on srv1", func() error { return r.c.host("srv1").KillAll() })
			r.waitFailover()
			r.heal("restart srv1's metadata replica and storage server, its disks no longer slow", func() error {
				if err := r.c.setFaults("srv1", nil); err != nil {
					return err
				}
				r.c.restartServer("srv1")
				return nil
			})
		},
	},
	{
		num: 11, id: "dirty_cache_device_fails", name: "the flash cache device of srv1's targets fails (EIO on every call) holding data written back and not yet on the slow disks",
		faults: true, cache: "writeback", failover: true,
		act: func(r *run) {
			rules := slowDisks(r)
			dev := r.c.caches + "/srv1/"
			r.inject("EIO for every call under "+dev, func() error {
				return r.c.setFaults("srv1", append(rules, faultRule{Path: dev, Ops: "all", Errno: "EIO"}))
			})
			// The targets fail every call (their disks miss acknowledged
			// writes) until their chains take them out; then srv1 sets
			// the chunks its caches held dirty aside and the targets
			// rejoin, written through, for the resync to copy them back.
			r.waitFailover()
			r.sleepUntil(r.injected.Add(hold))
			r.heal("the disks at their speed again (no restart: the failed cache devices stay dropped)", func() error {
				return r.c.setFaults("srv1", []faultRule{{Path: dev, Ops: "all", Errno: "EIO"}})
			})
		},
	},
}

// slowDisks makes srv1's target disks take 100 ms for each write (its
// flash caches, on tmpfs, stay fast) and waits until its caches report
// written-back data their destagers have not copied yet (at least 3 s);
// it returns the rules.
func slowDisks(r *run) []faultRule {
	var rules []faultRule
	for i := 1; i <= r.c.targets; i++ {
		rules = append(rules, faultRule{Path: r.c.targetDir("srv1", i) + "/", Ops: "write", Delay: "100ms"})
	}
	if err := r.c.setFaults("srv1", rules); err != nil {
		r.t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		st, err := r.c.status(context.Background())
		var dirty uint64
		for _, k := range st.cachesOf(r.c.targetDir("srv1", 1)) {
			dirty += k
		}
		if err == nil && dirty > 0 {
			r.t.Logf("srv1's caches hold %d MiB written back and not yet on the disks", dirty>>20)
			return rules
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("srv1's caches hold nothing dirty 23 s after its disks were slowed (%v): the row would not test write-back", err)
		}
	}
}

// prefix is the scenario's lab prefix.
func (sc scenario) prefix() string { return fmt.Sprintf("hamx%d", sc.num) }

// selected reports whether HA_MATRIX asks for the scenario: "full" runs
// all, a comma-separated list of numbers those, anything else the short
// form.
func (sc scenario) selected() bool {
	mode := os.Getenv("HA_MATRIX")
	if mode == "full" {
		return true
	}
	if mode != "" && mode != "short" {
		for _, f := range strings.Split(mode, ",") {
			if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && n == sc.num {
				return true
			}
		}
		return false
	}
	return sc.short
}

// TestHAMatrix runs the failure matrix: each scenario on a fresh cluster
// under load, with the expectations of docs/ha.md — zero checkstream
// errors everywhere, failover within seconds where a server is lost to the
// clients and none where only the private network is, stalls of seconds,
// and every copy identical once the failed server has been resynced.
func TestHAMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("the failure matrix runs real clusters for minutes; not with -short")
	}
	var results []*result
	var disk diskBench
	disk.measure(t)
	t.Cleanup(func() {
		disk.measure(t)
		writeReport(t, results, &disk)
	})
	for _, sc := range scenarios {
		t.Run(fmt.Sprintf("%d_%s", sc.num, sc.id), func(t *testing.T) {
			if !sc.selected() {
				t.Skip("not in the short form; HA_MATRIX=full runs it")
			}
			res := &result{sc: sc}
			results = append(results, res)
			t.Cleanup(func() {
				res.failed = t.Failed()
				t.Logf("RESULT %d. %s: %s", sc.num, sc.name, res.line())
			})
			runScenario(t, sc, res)
		})
	}
}
