package tests

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"tandemfs/internal/testcluster"
)

// cachedMount mounts c's cluster on a fresh directory with a disk cache
// in cacheDir, and returns the mount point and a func that unmounts it
// and waits for the mount process to end (closing the cache cleanly).
func cachedMount(t *testing.T, c *testcluster.Cluster, cacheDir string) (string, func()) {
	t.Helper()
	dir, err := os.MkdirTemp(t.TempDir(), "cached-")
	if err != nil {
		t.Fatal(err)
	}
	cmd, log := startMount(t, c, dir, "--cache-dir", cacheDir, "--cache-size", "256M", "--give-up", "3s")
	if err := waitFUSEMount(dir, 10*time.Second); err != nil {
		t.Fatalf("the mount with a disk cache did not come up: %v\n%s", err, log.String())
	}
	done := false
	unmount := func() {
		if done {
			return
		}
		done = true
		if err := unmountSoon(dir, 10*time.Second); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
		if err := waitExit(cmd, 20*time.Second); err != nil {
			t.Errorf("the mount with a disk cache: %v\n%s", err, log.String())
		}
	}
	t.Cleanup(unmount)
	return dir, unmount
}

// The client's disk cache (tandem mount --cache-dir): what a client read
// is kept on its disk across an unmount and answered after a remount,
// even with every storage server gone, and never once another client
// has closed a newer version of the file.
func TestTheDiskCacheAnswersAfterARemountButNeverWithAnOldVersion(t *testing.T) {
	c := testcluster.Start(t)
	cache := t.TempDir()
	path := "f"
	v1 := randBytes(4<<20 + 777)
	mustWrite(t, filepath.Join(c.Mount(), path), v1)

	a, unmountA := cachedMount(t, c, cache)
	readUntilCached(t, filepath.Join(a, path), v1, cache)
	unmountA()
	var idx struct {
		Clean bool `json:"clean"`
		Files []struct {
			Blocks []uint64 `json:"blocks"`
		} `json:"files"`
	}
	b, err := os.ReadFile(filepath.Join(cache, "index.json"))
	if err != nil || json.Unmarshal(b, &idx) != nil || !idx.Clean || len(idx.Files) != 1 || len(idx.Files[0].Blocks) < 32 {
		t.Fatalf("the disk cache after an unmount: %s (%v); want the file's 33 blocks, clean", b, err)
	}

	// Remounted, with the storage servers gone: the blocks come from the
	// local disk.
	a, _ = cachedMount(t, c, cache)
	c.KillProcess("storage1")
	c.KillProcess("storage2")
	if got := readWholeDirect(t, filepath.Join(a, path)); !bytes.Equal(got, v1) {
		t.Fatal("the file read after a remount from the disk cache differs")
	}

	// Another client closes a new version: the cached mount reads it,
	// not its blocks of the old one, through a descriptor it held open
	// across the change as through a new one.
	c.Up()
	held, err := os.OpenFile(filepath.Join(a, path), os.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	v2 := append(bytes.Clone(v1[:1<<20]), randBytes(3<<20+777)...)
	mustWrite(t, filepath.Join(c.Mount(), path), v2)
	if got := readAllDirect(t, held); !bytes.Equal(got, v2) {
		t.Fatal("after another client closed a new version, a descriptor the cached mount held open read other bytes")
	}
	if got := readWholeDirect(t, filepath.Join(a, path)); !bytes.Equal(got, v2) {
		t.Fatal("after another client closed a new version, the cached mount read other bytes")
	}
}

// readUntilCached reads path through a mount with a disk cache in cache
// until the cache holds a file of want's size: a read keeps nothing while
// the mount holds no lease on the file, which it is not granted while
// another session still has the file open for writing (the writer's
// FUSE release arrives after its close returned, later under load).
func readUntilCached(t *testing.T, path string, want []byte, cache string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for tries := 1; ; tries++ {
		if got := readWholeDirect(t, path); !bytes.Equal(got, want) {
			t.Fatal("a read through the cached mount differs")
		}
		names, _ := filepath.Glob(filepath.Join(cache, "data", "*"))
		for _, n := range names {
			if fi, err := os.Stat(n); err == nil && fi.Size() == int64(len(want)) {
				if tries > 1 {
					t.Logf("the disk cache kept the file at read %d", tries)
				}
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the disk cache kept nothing of %s after %d reads in 10 s", path, tries)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
