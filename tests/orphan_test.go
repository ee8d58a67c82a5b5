package tests

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"tandemfs/internal/fuseconn"
	"tandemfs/internal/testcluster"
)

// orphanEnv, set, makes TestHelperDiesWithItsClusterRunning a test process
// that starts a cluster, says where, and dies without cleaning up, as
// one killed by go test's -timeout does.
const orphanEnv = "TANDEM_TEST_DIE_WITH_CLUSTER"

// TestHelperDiesWithItsClusterRunning is the dying test process of
// TestATestsClusterEndsWhenTheTestProcessDies; run otherwise, it does
// nothing.
func TestHelperDiesWithItsClusterRunning(t *testing.T) {
	if os.Getenv(orphanEnv) == "" {
		return
	}
	c := testcluster.Start(t)
	fmt.Printf("cluster %s %s\n", c.Dir(), c.Mount())
	os.Exit(3) // no cleanup runs, as after a -timeout panic
}

// A test process that dies in the middle of a test (go test's -timeout
// panics, and no cleanup runs) takes its cluster with it: every server
// is gone, and the mount has unmounted itself.
func TestATestsClusterEndsWhenTheTestProcessDies(t *testing.T) {
	testcluster.RequireFUSE(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperDiesWithItsClusterRunning$", "-test.count=1")
	cmd.Env = append(os.Environ(), orphanEnv+"=1", "TANDEM_BIN="+testcluster.Binary(t))
	out, _ := cmd.Output() // it exits with 3 by design
	dir, mnt := orphanCluster(t, string(out))
	t.Cleanup(func() { os.RemoveAll(filepath.Dir(dir)) })
	pids := clusterPids(t, dir)
	if len(pids) < 4 { // metadata, two storage servers, the mount
		t.Fatalf("the helper's cluster recorded %d processes (%v), want at least 4", len(pids), pids)
	}
	deadline := time.Now().Add(10 * time.Second)
	for name, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				syscall.Kill(pid, syscall.SIGKILL)
				t.Errorf("%s (pid %d) still runs 10 s after the test process that started it died", name, pid)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if m, mounted := fuseconn.MountedAt(mnt); mounted {
		exec.Command("umount", "-l", mnt).Run()
		t.Errorf("%s is still mounted (%s) after the test process died", mnt, m.FSType)
	}
}

// orphanCluster finds the helper's "cluster DIR MOUNT" line.
func orphanCluster(t *testing.T, out string) (dir, mnt string) {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "cluster" {
			return f[1], f[2]
		}
	}
	t.Fatalf("the helper said no cluster; its output:\n%s", out)
	return "", ""
}

// clusterPids reads the PID files of the cluster in dir.
func clusterPids(t *testing.T, dir string) map[string]int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "run", "*.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pids := map[string]int{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		pids[strings.TrimSuffix(filepath.Base(f), ".pid")] = pid
	}
	return pids
}

// alive reports whether pid runs: it exists and is no zombie (a killed
// orphan may wait for a PID 1 that never reaps it).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && len(b) > i+2 && b[i+2] != 'Z' && b[i+2] != 'X'
}
