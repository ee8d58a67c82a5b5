// Package hamatrix is the high-availability failure matrix of the white
// papers (NSS-HA, section 4.3) as an automated test: a real TandemFS
// cluster in network namespaces (internal/netlab), a client load of
// genstream writes and reads on a real FUSE mount, one failure injected
// into it per scenario, and checkstream over every copy afterwards.
//
// Every scenario gets a fresh lab and cluster:
//
//	srv1, srv2   public + private: a metadata replica and a storage server
//	             with two targets each (so every file has one copy per server)
//	third        public + private: the third metadata voter
//	cli          public only: the FUSE mount, the load, the probes and
//	             `tandem status --watch`
//
// The metadata leader is kept off srv1, the server the failures hit, so
// that each scenario measures the failover of storage chains alone (the
// loss of a metadata leader is tests/ha_test.go's subject).
//
// The scenarios are in matrix_test.go, what each one measures and checks
// in run_test.go. By default (`go test ./tests/hamatrix/`, and so `make
// test`) a short form runs: scenarios 1, 3 and 6, about 70 s. HA_MATRIX=full
// runs all of them with larger streams (`make test-ha`, about 4 minutes);
// HA_MATRIX=2,4 runs the ones listed. HA_MATRIX_HOLD (e.g. 30s) makes the
// failures that heal by themselves last longer than the default 10 s.
// HA_MATRIX_STORAGE_FLAGS (e.g. "--resync-share 0.9") is added to every
// storage server's command line.
// HA_MATRIX_REPORT=FILE writes the results as a markdown table (a relative
// FILE is taken from the repository root). The full matrix and any run
// with a report also measure the disk under $TMPDIR before and after the
// scenarios (disk_test.go) and judge each resync against half of it.
// Needs root, /dev/fuse, ip and nsenter; skipped otherwise, and under
// -short. A failed scenario keeps
// its directory (data, logs of every process) and says where;
// HA_MATRIX_KEEP=1 keeps every scenario's. TestNFSMatrix (nfs_test.go)
// is the NFS gateway's rows, in a lab of its own. TestECMatrix (ec_test.go)
// is the erasure-coding rows, on six storage servers of their own: by
// default rows 2, 4 and 5 (two servers killed at once, a disk returning
// EIO, three killed and one back), about 2 minutes; HA_MATRIX=full adds
// two killed one after the other and a hang.
package hamatrix

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"tandemfs/internal/netlab"
	"tandemfs/internal/testcluster"
)

// TestMain removes what a killed earlier run left behind before the tests,
// and the tandem binary they built after them.
// Started with HAMATRIX_PROBE set, the binary is a client probe instead.
func TestMain(m *testing.M) {
	if mode := os.Getenv(probeEnv); mode != "" {
		os.Exit(probeMain(mode))
	}
	removeLeftovers()
	code := m.Run()
	testcluster.RemoveBinary()
	os.Exit(code)
}

// removeLeftovers unmounts the FUSE mounts and removes the labs of runs
// that died before their cleanup (go test's -timeout kills the process
// without running it). It touches only this package's own names: labs
// "hamx<N>" and mounts under $TMPDIR/hamatrix-*.
func removeLeftovers() {
	if os.Geteuid() != 0 {
		return
	}
	for _, sc := range scenarios {
		netlab.Cleanup(sc.prefix())
	}
	for _, mnt := range staleMounts() {
		exec.Command("umount", "-l", mnt).Run()
	}
}

// staleMounts lists the FUSE mounts under $TMPDIR/hamatrix-*.
func staleMounts() []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	pattern := filepath.Join(os.TempDir(), "hamatrix-*")
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// 36 35 0:42 / /tmp/hamatrix-x/mnt rw,... - fuse.tandem tandem rw
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mnt := fields[4]
		if ok, _ := filepath.Match(pattern, filepath.Dir(mnt)); ok && filepath.Base(mnt) == "mnt" {
			out = append(out, mnt)
		}
	}
	return out
}
