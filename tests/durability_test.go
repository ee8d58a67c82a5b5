package tests

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tandemfs/internal/testcluster"
)

// TestDataSurvivesKillOfEveryProcess: once close or fsync returned, data
// and metadata survive kill -9 of every TandemFS process followed by a
// restart, and the restarted cluster starts.
func TestDataSurvivesKillOfEveryProcess(t *testing.T) {
	c := testcluster.Start(t)
	big := randBytes(5<<20 + 99)
	small := randBytes(1000)
	mustWrite(t, filepath.Join(c.Mount(), "big"), big) // closed
	mustWrite(t, filepath.Join(c.Mount(), "small"), small)
	os.MkdirAll(filepath.Join(c.Mount(), "a", "b"), 0o755)
	f, err := os.Create(filepath.Join(c.Mount(), "a", "b", "synced"))
	if err != nil {
		t.Fatal(err)
	}
	synced := randBytes(3 << 20)
	f.Write(synced)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	// Left open on purpose: the process dies with the file still open.
	g, err := os.Create(filepath.Join(c.Mount(), "a", "synced-small"))
	if err != nil {
		t.Fatal(err)
	}
	syncedSmall := randBytes(3000)
	g.Write(syncedSmall[:1000]) // buffered by the client until the fsync
	g.Write(syncedSmall[1000:])
	if err := g.Sync(); err != nil {
		t.Fatal(err)
	}
	os.Rename(filepath.Join(c.Mount(), "small"), filepath.Join(c.Mount(), "a", "small"))

	c.Kill9()
	f.Close()
	g.Close()
	c.Up()

	for path, want := range map[string][]byte{"big": big, "a/small": small, "a/b/synced": synced, "a/synced-small": syncedSmall} {
		got, err := os.ReadFile(filepath.Join(c.Mount(), path))
		if err != nil {
			t.Fatalf("%s after kill -9 and restart: %v", path, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: %d bytes back, want the %d written", path, len(got), len(want))
		}
	}
}

// TestDownAndUpBringsBackEveryFile: `tandem down` then `tandem up` on the
// same data directory.
func TestDownAndUpBringsBackEveryFile(t *testing.T) {
	c := testcluster.Start(t, testcluster.WithServers(3, 1))
	data := randBytes(2<<20 + 1)
	mustWrite(t, filepath.Join(c.Mount(), "f"), data)
	c.Down()
	c.Up()
	if got := mustRead(t, filepath.Join(c.Mount(), "f")); !bytes.Equal(got, data) {
		t.Fatal("file differs after down/up")
	}
	// A member that had not yet recorded a chain it joined just before
	// the stop is resynced first; the cluster is healthy within seconds.
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := exec.Command(testcluster.Binary(t), "status", "--data", c.Dir()).CombinedOutput()
		if err == nil && strings.Contains(string(out), "HEALTHY") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status 30 s after restart: %v\n%s", err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
