package tests

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
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
