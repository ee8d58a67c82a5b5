package tests

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"tandemfs/internal/cluster"
	"tandemfs/internal/rpc"
	"tandemfs/internal/testcluster"
)

// runTandem runs the binary and returns its combined output and error.
func runTandem(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command(testcluster.Binary(t), args...).CombinedOutput()
	return string(out), err
}

// TestBadInputGetsAClearMessage: wrong flags, missing files and
// unreachable services are reported with a message naming the problem,
// and a non-zero exit status.
func TestBadInputGetsAClearMessage(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	s, _ := rpc.NewSecret()
	rpc.WriteSecretFile(secret, s)
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"unknown command", []string{"frobnicate"}, "unknown command"},
		{"unknown flag", []string{"status", "--colour"}, "unknown flag"},
		{"missing required flag", []string{"meta", "--secret-file", secret}, `"data"`},
		{"missing secret file", []string{"mount", "--meta", "127.0.0.1:1", "--secret-file", filepath.Join(dir, "nope"), dir}, "cluster secret"},
		{"unreachable metadata service", []string{"status", "--meta", "127.0.0.1:1", "--secret-file", secret}, "127.0.0.1:1"},
		{"no cluster in data dir", []string{"status", "--data", dir}, "holds no TandemFS cluster"},
		{"stripe outside a mount", []string{"stripe", "get", dir}, "not on a TandemFS mount"},
		{"bad size", []string{"stripe", "set", "--chunk-size", "lots", dir}, "not a size"},
		{"zero servers", []string{"up", "--data", filepath.Join(dir, "d"), "--servers", "0"}, "at least one server"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := runTandem(t, c.args...)
			if err == nil {
				t.Fatalf("tandem %s succeeded; output:\n%s", strings.Join(c.args, " "), out)
			}
			if !strings.Contains(out, c.want) {
				t.Fatalf("tandem %s: message %q does not mention %q", strings.Join(c.args, " "), out, c.want)
			}
		})
	}
}

// TestFullTargetGivesENOSPCAndKeepsWhatIsStored: a writer that fills the
// only target gets ENOSPC, and so does the fsync of another descriptor
// open on the file (as Linux reports a writeback error to every open
// file, once); files already stored stay intact, and the file system
// goes on working.
func TestFullTargetGivesENOSPCAndKeepsWhatIsStored(t *testing.T) {
	testcluster.RequireFUSE(t)
	small := func(o *cluster.Options) {
		target := filepath.Join(o.Dir, "storage", "storage1", "target1")
		os.MkdirAll(target, 0o700)
		if err := syscall.Mount("tmpfs", target, "tmpfs", 0, "size=48m"); err != nil {
			t.Skipf("cannot mount a small tmpfs: %v", err)
		}
		t.Cleanup(func() { syscall.Unmount(target, syscall.MNT_DETACH) })
	}
	c := testcluster.Start(t, testcluster.WithServers(1, 1), small)
	keep := randBytes(8 << 20)
	mustWrite(t, filepath.Join(c.Mount(), "keep"), keep)

	f, err := os.Create(filepath.Join(c.Mount(), "filler"))
	if err != nil {
		t.Fatal(err)
	}
	other, err := os.OpenFile(filepath.Join(c.Mount(), "filler"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	chunk := randBytes(1 << 20)
	var werr error
	for i := 0; i < 100 && werr == nil; i++ {
		_, werr = f.Write(chunk)
	}
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if !errors.Is(werr, syscall.ENOSPC) {
		t.Fatalf("filling the target: got %v, want ENOSPC", werr)
	}
	if err := other.Sync(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("fsync of another descriptor open on the file: got %v, want ENOSPC", err)
	}
	if err := other.Sync(); err != nil {
		t.Fatalf("a second fsync of that descriptor: got %v, want the failure reported once", err)
	}
	if got := mustRead(t, filepath.Join(c.Mount(), "keep")); !bytes.Equal(got, keep) {
		t.Fatal("a file stored before the target filled up changed")
	}
	mustWrite(t, filepath.Join(c.Mount(), "tiny"), []byte("metadata still works"))
	if err := os.Remove(filepath.Join(c.Mount(), "filler")); err != nil {
		t.Fatal(err)
	}
}
