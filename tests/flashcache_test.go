package tests

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"tandemfs/internal/testcluster"
)

// cacheDir is a directory on tmpfs, another file system than the
// cluster's, for the targets' flash caches.
func cacheDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("/dev/shm", "tandem-cache-")
	if err != nil {
		t.Fatalf("a cache directory on tmpfs: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

type cacheStatus struct {
	Healthy bool `json:"healthy"`
	Caches  []struct {
		Target   uint32  `json:"target"`
		Mode     string  `json:"mode"`
		Used     uint64  `json:"used_bytes"`
		Hits     uint64  `json:"hits"`
		HitRatio float64 `json:"hit_ratio"`
		Failed   string  `json:"failed"`
	} `json:"caches"`
}

func cacheStatusOf(t *testing.T, c *testcluster.Cluster) cacheStatus {
	t.Helper()
	out, err := runTandem(t, "status", "--json", "--data", c.Dir())
	if err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	var st cacheStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return st
}

// Targets with write-through flash caches: what is written reads back
// from the flash (writes allocate), `tandem status` shows every cache with
// its use and hit ratio, and a cache device that starts failing is
// dropped without an error reaching the application or a byte lost, and
// shown failed.
func TestTargetsWithWriteThroughCachesServeFromTheFlashAndSurviveItsFailure(t *testing.T) {
	cache := cacheDir(t)
	c := testcluster.Start(t, testcluster.WithServers(2, 1), testcluster.WithFaultFiles(),
		testcluster.WithCache(cache, "256M", "writethrough"))
	path := filepath.Join(c.Mount(), "f")
	data := randBytes(8<<20 + 123)
	mustWrite(t, path, data)
	if got := readWholeDirect(t, path); !bytes.Equal(got, data) {
		t.Fatal("the file read back differs")
	}
	// The servers report their caches with their heartbeats.
	st := waitCacheStatus(t, c, "both caches in use and a read hit", func(st cacheStatus) bool {
		var hits uint64
		for _, k := range st.Caches {
			if k.Used == 0 {
				return false
			}
			hits += k.Hits
		}
		return len(st.Caches) == 2 && hits > 0
	})
	for _, k := range st.Caches {
		if k.Mode != "writethrough" || k.Failed != "" || !st.Healthy {
			t.Fatalf("cache of target %d: %+v (healthy %v)", k.Target, k, st.Healthy)
		}
	}

	// storage1's cache device fails: everything goes on from its disk.
	setFaults(t, c.FaultFile("storage1"), `[{"path": "`+cache+`/", "ops": "all", "errno": "EIO"}]`)
	if got := readWholeDirect(t, path); !bytes.Equal(got, data) {
		t.Fatal("the file read with a cache device failing differs")
	}
	more := randBytes(4 << 20)
	mustWrite(t, filepath.Join(c.Mount(), "g"), more)
	if got := readWholeDirect(t, filepath.Join(c.Mount(), "g")); !bytes.Equal(got, more) {
		t.Fatal("a file written with a cache device failing reads back other bytes")
	}
	waitCacheStatus(t, c, "one cache failed and the cluster not healthy", func(st cacheStatus) bool {
		failed := 0
		for _, k := range st.Caches {
			if k.Failed != "" {
				failed++
			}
		}
		return failed == 1 && !st.Healthy
	})
}

// waitCacheStatus polls `tandem status --json` until ok, for 10 s.
func waitCacheStatus(t *testing.T, c *testcluster.Cluster, what string, ok func(cacheStatus) bool) cacheStatus {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := cacheStatusOf(t, c)
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never showed %s: %+v (healthy %v)", what, st.Caches, st.Healthy)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// A slow disk that fails under a warm write-through cache: reads the
// flash could answer do not hide it, since the next write meets the
// disk's errors and the target is failed over (no application sees an
// error); it stays out, whatever its cache holds, until its server
// restarts with the disk fixed, which resyncs it, and every byte then
// reads back from it with the other server gone.
func TestASlowDiskFailingUnderAWarmCacheIsFailedOver(t *testing.T) {
	cache := cacheDir(t)
	c := testcluster.Start(t, testcluster.WithServers(2, 1), testcluster.WithFaultFiles(),
		testcluster.WithCache(cache, "256M", "writethrough"))
	path := filepath.Join(c.Mount(), "f")
	data := randBytes(6 << 20)
	mustWrite(t, path, data)
	for range 2 { // warm: written chunks allocate copies; reads hit them
		if got := readWholeDirect(t, path); !bytes.Equal(got, data) {
			t.Fatal("the file read back differs")
		}
	}
	setFaults(t, c.FaultFile("storage1"), `[{"path": "`+filepath.Join(c.Dir(), "storage", "storage1")+`/", "ops": "all", "errno": "EIO"}]`)
	more := randBytes(4 << 20)
	mustWrite(t, filepath.Join(c.Mount(), "g"), more)
	if got := readWholeDirect(t, path); !bytes.Equal(got, data) {
		t.Fatal("the file read with storage1's disk failing differs")
	}
	deadline := time.Now().Add(10 * time.Second)
	for failedTargets(t, c) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("storage1's target not failed 10 s after its disk began failing")
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // a recovery in place would have begun
	if failedTargets(t, c) != 1 {
		t.Fatal("storage1's target came back with its disk failing")
	}

	c.KillProcess("storage1")
	setFaults(t, c.FaultFile("storage1"), `[]`)
	c.Up()
	waitAllServing(t, c, time.Minute)
	c.KillProcess("storage2")
	if got := readWholeDirect(t, path); !bytes.Equal(got, data) {
		t.Fatal("after the resync, with storage2 gone, the file written before the disk failed reads back other bytes")
	}
	if got := readWholeDirect(t, filepath.Join(c.Mount(), "g")); !bytes.Equal(got, more) {
		t.Fatal("after the resync, with storage2 gone, the file written while the disk failed reads back other bytes")
	}
}

// failedTargets counts the targets `tandem status --json` shows failed.
func failedTargets(t *testing.T, c *testcluster.Cluster) int {
	t.Helper()
	var st struct {
		Targets []struct {
			State string `json:"state"`
		} `json:"targets"`
	}
	readStatus(t, c, &st)
	n := 0
	for _, tg := range st.Targets {
		if tg.State == "failed" {
			n++
		}
	}
	return n
}

// dirtyBytes is the bytes the caches of a cluster hold written back and
// not yet destaged, by target, as `tandem status --json` shows them.
func dirtyBytes(t *testing.T, c *testcluster.Cluster) map[uint32]uint64 {
	t.Helper()
	out, err := runTandem(t, "status", "--json", "--data", c.Dir())
	if err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	var st struct {
		Caches []struct {
			Target uint32 `json:"target"`
			Dirty  uint64 `json:"dirty_bytes"`
		} `json:"caches"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	m := map[uint32]uint64{}
	for _, k := range st.Caches {
		m[k.Target] = k.Dirty
	}
	return m
}

// startWriteBackCluster starts two storage servers of one target each,
// with 256 MiB write-back caches in cache, and slows storage1's disk.
func startWriteBackCluster(t *testing.T) (c *testcluster.Cluster, cache string) {
	t.Helper()
	cache = cacheDir(t)
	c = testcluster.Start(t, testcluster.WithServers(2, 1), testcluster.WithFaultFiles(),
		testcluster.WithCache(cache, "256M", "writeback"))
	slowDisk(t, c)
	return c, cache
}

// slowDisk makes storage1's target disk take a second for every write:
// its destager falls behind, and what it acknowledges stays dirty.
func slowDisk(t *testing.T, c *testcluster.Cluster) {
	t.Helper()
	setFaults(t, c.FaultFile("storage1"), `[{"path": "`+filepath.Join(c.Dir(), "storage", "storage1")+`/", "ops": "write", "delay": "1s"}]`)
}

// Write-back: an fsync returns once the data is on the flash of both
// servers of its chain, with the disks behind (storage1's, slow, far
// behind); a server killed with dirty
// data (kill -9) takes it back from its flash when it restarts, so that
// with the other server gone afterwards every byte still reads back.
func TestWriteBackDataSurvivesAKilledServer(t *testing.T) {
	c, _ := startWriteBackCluster(t)
	path := filepath.Join(c.Mount(), "f")
	data := randBytes(8<<20 + 4321)
	mustWrite(t, path, data) // written and fsynced
	dirty := dirtyBytes(t, c)
	deadline := time.Now().Add(10 * time.Second)
	for slices.Max(append(slices.Collect(maps.Values(dirty)), 0)) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("dirty bytes after a write-back: %v; want storage1's cache (its disk slow) holding some", dirty)
		}
		time.Sleep(200 * time.Millisecond)
		dirty = dirtyBytes(t, c)
	}
	t.Logf("dirty bytes after writing %d: %v", len(data), dirty)

	c.KillProcess("storage1")
	c.Up() // storage1 again: its cache was not closed cleanly
	setFaults(t, c.FaultFile("storage1"), `[]`)
	time.Sleep(6 * time.Second) // past the failure timeout: it was seen gone, or not
	waitAllServing(t, c, time.Minute)
	c.KillProcess("storage2")
	if got := readWholeDirect(t, path); !bytes.Equal(got, data) {
		t.Fatal("with storage1 killed and restarted with dirty data, and storage2 gone, the file reads back other bytes")
	}
}

// The cache device failing while it holds dirty data: its target is taken
// out of its chains (the other copy serves, nothing reaches the
// application), sets aside the chunks the cache held and rejoins them
// without a restart; the resync copies those chunks back, and status says
// so. With the other server gone, every byte reads back, written before
// the failure or during the recovery.
func TestACacheDeviceFailingWithDirtyDataLosesNothing(t *testing.T) {
	c, cache := startWriteBackCluster(t)
	path := filepath.Join(c.Mount(), "f")
	data := randBytes(8 << 20)
	mustWrite(t, path, data)
	cacheFails := `{"path": "` + filepath.Join(cache, "storage1") + `/", "ops": "all", "errno": "EIO"}`
	setFaults(t, c.FaultFile("storage1"), `[`+cacheFails+`,
		{"path": "`+filepath.Join(c.Dir(), "storage", "storage1")+`/", "ops": "write", "delay": "1s"}]`)
	if got := readWholeDirect(t, path); !bytes.Equal(got, data) {
		t.Fatal("the file read with storage1's cache device failing differs")
	}
	waitCacheStatus(t, c, "storage1's cache failed, holding writes the disk lacks", func(st cacheStatus) bool {
		for _, k := range st.Caches {
			if strings.Contains(k.Failed, "not yet on the disk") {
				return true
			}
		}
		return false
	})
	// Overwrites of f's chunks at their ends while storage1 recovers:
	// those forwarded to it once it rejoined recreate chunks it set
	// aside, at their whole size, which the resync must still copy whole.
	// (Here it would anyway, since they changed within a minute of the
	// failure; storage's TestALostChunkIsListedAbsentUntilReleased covers
	// older ones.)
	setFaults(t, c.FaultFile("storage1"), `[`+cacheFails+`]`) // the disk at its speed again
	overwriteTails(t, path, data)
	waitCacheStatus(t, c, "storage1's lost chunks copied back, its chains serving", func(st cacheStatus) bool {
		for _, k := range st.Caches {
			if strings.Contains(k.Failed, "copied back") {
				return allServing(t, c)
			}
		}
		return false
	})
	more := randBytes(3 << 20)
	mustWrite(t, filepath.Join(c.Mount(), "g"), more)

	c.KillProcess("storage2")
	if got := readWholeDirect(t, path); !bytes.Equal(got, data) {
		t.Fatal("with storage2 gone, the file written back before storage1's cache failed reads back other bytes")
	}
	if got := readWholeDirect(t, filepath.Join(c.Mount(), "g")); !bytes.Equal(got, more) {
		t.Fatal("with storage2 gone, the file written after storage1's cache failed reads back other bytes")
	}
}

// overwriteTails overwrites the last 4 KiB of each MiB of path, each
// write fsynced and applied to data too.
func overwriteTails(t *testing.T, path string, data []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for off := 1<<20 - 4096; off < len(data); off += 1 << 20 {
		piece := randBytes(4096)
		if _, err := f.WriteAt(piece, int64(off)); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		copy(data[off:], piece)
	}
}
