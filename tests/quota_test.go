package tests

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"tandemfs/internal/testcluster"
)

// Quotas, as XFS, Lustre and BeeGFS give them: users, groups and projects
// (directory trees), each with file and byte limits, soft and hard;
// writers past a limit get EDQUOT on every mount; the usage survives
// crashes and metadata failovers; `tandem quota report` reads like
// repquota and `tandem status` shows the limited quotas.

const nobody = "65534"

// quotaCmd runs `tandem quota ARGS --data DIR` and returns its output.
func quotaCmd(t *testing.T, c *testcluster.Cluster, args ...string) string {
	t.Helper()
	out, err := runTandem(t, append(append([]string{"quota"}, args...), "--data", c.Dir())...)
	if err != nil {
		t.Fatalf("tandem quota %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

type quotaState struct {
	Bytes      uint64 `json:"bytes"`
	Inodes     uint64 `json:"inodes"`
	OverBlocks bool   `json:"over_blocks"`
	OverInodes bool   `json:"over_inodes"`
}

func quotaGet(t *testing.T, c *testcluster.Cluster, who ...string) quotaState {
	t.Helper()
	out, err := exec.Command(testcluster.Binary(t), append([]string{"quota", "get", "--json", "--data", c.Dir()}, who...)...).Output()
	if err != nil {
		t.Fatalf("tandem quota get %v: %v", who, err)
	}
	var q quotaState
	if err := json.Unmarshal(out, &q); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return q
}

// openDir makes a directory every user may write in.
func openDir(t *testing.T, parent, name string) string {
	t.Helper()
	d := filepath.Join(parent, name)
	if err := os.Mkdir(d, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(d, 0o777)
	return d
}

func TestQuotas(t *testing.T) {
	c := testcluster.Start(t)
	root := c.Mount()
	os.Chmod(root, 0o755)

	t.Run("a file limit refuses new files with EDQUOT on every mount", func(t *testing.T) {
		d := openDir(t, root, "files")
		quotaCmd(t, c, "set", "--user", nobody, "--inode-hard", "3")
		defer quotaCmd(t, c, "set", "--user", nobody, "--inode-hard", "0")
		for _, f := range []string{"a", "b", "c"} {
			if err := asNobody(`: > "$1"`, filepath.Join(d, f)); err != nil {
				t.Fatalf("file %s within the limit: %v", f, err)
			}
		}
		out, err := exec.Command("setpriv", "--reuid", nobody, "--regid", nobody, "--clear-groups",
			"touch", filepath.Join(d, "d")).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "quota exceeded") {
			t.Fatalf("a fourth file over a limit of 3: %v: %s", err, out)
		}
		mnt2 := secondMount(t, c)
		os.Chmod(filepath.Dir(mnt2), 0o755)
		os.Chmod(filepath.Dir(filepath.Dir(mnt2)), 0o755)
		if asNobody(`: > "$1"`, filepath.Join(mnt2, "files", "e")) == nil {
			t.Fatal("the other mount let nobody make a fourth file")
		}
		if q := quotaGet(t, c, "--user", nobody); q.Inodes != 3 || !q.OverInodes {
			t.Fatalf("quota get: %+v; want 3 files and new ones refused", q)
		}
		// Room again once a file is gone.
		os.Remove(filepath.Join(d, "a"))
		if err := asNobody(`: > "$1"`, filepath.Join(d, "d")); err != nil {
			t.Fatalf("after a removal: %v", err)
		}
	})

	t.Run("a byte limit stops a writer at most one write past it", func(t *testing.T) {
		d := openDir(t, root, "bytes")
		quotaCmd(t, c, "set", "--user", nobody, "--block-hard", "16M")
		defer quotaCmd(t, c, "set", "--user", nobody, "--block-hard", "0")
		f := filepath.Join(d, "big")
		out, err := exec.Command("setpriv", "--reuid", nobody, "--regid", nobody, "--clear-groups",
			"dd", "if=/dev/zero", "of="+f, "bs=1M", "count=64").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "quota exceeded") {
			t.Fatalf("64 MiB over a 16 MiB limit: %v: %s", err, out)
		}
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() < 15<<20 || fi.Size() > 17<<20 {
			t.Fatalf("the writer stopped at %d bytes; want 16 MiB, give or take one write", fi.Size())
		}
		if q := quotaGet(t, c, "--user", nobody); q.Bytes != uint64(fi.Size()) || !q.OverBlocks {
			t.Fatalf("quota get: %+v; want the file's %d bytes, writes refused", q, fi.Size())
		}
		// Another user writes on.
		if err := os.WriteFile(filepath.Join(d, "roots"), make([]byte, 4<<20), 0o644); err != nil {
			t.Fatalf("root over nobody's limit: %v", err)
		}
		os.Remove(f)
		time.Sleep(1100 * time.Millisecond) // the client's view of the limits, refreshed
		if err := asNobody(`dd if=/dev/zero of="$1" bs=1M count=4 2>/dev/null`, f); err != nil {
			t.Fatalf("after the file was removed: %v", err)
		}
	})

	t.Run("a project limits a directory tree, and nothing moves in or out of it by rename", func(t *testing.T) {
		d := openDir(t, root, "proj")
		mustWrite(t, filepath.Join(d, "old"), make([]byte, 1000))
		if out, err := runTandem(t, "quota", "project", "--id", "7", d); err != nil {
			t.Fatalf("tandem quota project: %v\n%s", err, out)
		}
		quotaCmd(t, c, "set", "--project", "7", "--inode-hard", "4")
		if q := quotaGet(t, c, "--project", "7"); q.Inodes != 2 || q.Bytes != 1000 {
			t.Fatalf("project 7 after tandem quota project: %+v; want the directory and its file", q)
		}
		mustWrite(t, filepath.Join(d, "new"), nil)
		if err := os.Mkdir(filepath.Join(d, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
		// Limits of projects hold root too: files are charged to the tree.
		err := os.WriteFile(filepath.Join(d, "sub", "one-too-many"), nil, 0o644)
		wantErrno(t, err, syscall.EDQUOT)
		mustWrite(t, filepath.Join(root, "outside"), []byte("x"))
		err = os.Rename(filepath.Join(root, "outside"), filepath.Join(d, "sub", "moved"))
		wantErrno(t, err, syscall.EXDEV)
	})

	t.Run("the report reads like repquota and status shows the limited quotas", func(t *testing.T) {
		quotaCmd(t, c, "set", "--group", nobody, "--block-soft", "1M", "--block-hard", "2M", "--block-grace", "1h")
		out := quotaCmd(t, c, "report", "--group")
		for _, want := range []string{"*** Report for group quotas on TandemFS", "Block grace time: 01:00; Inode grace time: 7days",
			"Block limits", "File limits", "used", "soft", "hard", "grace", "1024", "2048"} {
			if !strings.Contains(out, want) {
				t.Fatalf("report does not show %q:\n%s", want, out)
			}
		}
		st, err := runTandem(t, "status", "--data", c.Dir())
		if err != nil || !strings.Contains(st, "QUOTA") || !strings.Contains(st, "group ") || !strings.Contains(st, "2.0 MiB") {
			t.Fatalf("status: %v\n%s", err, st)
		}
		bad, err := runTandem(t, "quota", "set", "--user", nobody, "--block-soft", "2M", "--block-hard", "1M", "--data", c.Dir())
		if err == nil || !strings.Contains(bad, "soft limit above its hard limit") {
			t.Fatalf("a soft limit above the hard one: %v\n%s", err, bad)
		}
	})

	t.Run("usage survives kill -9 of the whole cluster", func(t *testing.T) {
		before := quotaGet(t, c, "--project", "7")
		c.Kill9()
		c.Up()
		if after := quotaGet(t, c, "--project", "7"); after != before {
			t.Fatalf("project 7 after kill -9 and restart: %+v, before %+v", after, before)
		}
	})
}

// TestQuotaUsageSurvivesAMetadataFailover: the usage is state of the
// metadata service's Raft group, so a new leader has it.
func TestQuotaUsageSurvivesAMetadataFailover(t *testing.T) {
	c := testcluster.Start(t, testcluster.WithMetaReplicas(3))
	d := openDir(t, c.Mount(), "d")
	for _, f := range []string{"a", "b"} {
		if err := asNobody(`dd if=/dev/zero of="$1" bs=64k count=2 2>/dev/null`, filepath.Join(d, f)); err != nil {
			t.Fatal(err)
		}
	}
	before := quotaGet(t, c, "--user", nobody)
	if before.Inodes != 2 || before.Bytes != 2*128<<10 {
		t.Fatalf("usage %+v; want 2 files of 128 KiB", before)
	}
	leader := leaderReplica(t, c)
	c.KillProcess(leader)
	var after quotaState
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, err := exec.Command(testcluster.Binary(t), "quota", "get", "--json", "--user", nobody, "--data", c.Dir()).Output()
		if err == nil && json.Unmarshal(out, &after) == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new leader answered: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if after != before {
		t.Fatalf("after the leader %s was killed: %+v, before %+v", leader, after, before)
	}
}
