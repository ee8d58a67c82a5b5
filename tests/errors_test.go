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
	"tandemfs/internal/testenv"
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
		{"stripe set outside a mount", []string{"stripe", "set", "--count", "2", dir}, "not on a TandemFS mount"},
		{"bench on a missing directory", []string{"bench", "seq", filepath.Join(dir, "missing")}, "does not exist"},
		{"bench meta with files that do not split", []string{"bench", "meta", "--files", "7", "--threads", "1,2,3", dir}, "give a value such as 12"},
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
			testenv.Unavailable(t, "cannot mount a small tmpfs: %v", err)
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

// TestAdminCommandsRefuseWhatTheyCannotDo: a second cluster is not
// mounted over a first, a stopped cluster is said to be stopped, and a
// stripe count larger than the chains gets a note on what files get.
func TestAdminCommandsRefuseWhatTheyCannotDo(t *testing.T) {
	c := testcluster.Start(t)
	other := filepath.Join(t.TempDir(), "data")
	out, err := runTandem(t, "up", "--data", other, "--mount", c.Mount())
	if err == nil || !strings.Contains(out, "already mounted") {
		t.Fatalf("up over a mounted cluster: %v\n%s", err, out)
	}
	if _, err := os.Stat(other); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused up left %s behind (%v)", other, err)
	}
	d := filepath.Join(c.Mount(), "wide")
	os.Mkdir(d, 0o755)
	out, err = runTandem(t, "stripe", "set", "--count", "3", d)
	if err != nil || !strings.Contains(out, "new files get 2 stripes of 2 copies") {
		t.Fatalf("stripe set --count 3 with 2 chains: %v\n%s", err, out)
	}
	mustWrite(t, filepath.Join(d, "f"), make([]byte, 3<<20))
	if l := getLayout(t, filepath.Join(d, "f")); l.Count != 2 {
		t.Fatalf("a new file got %d stripes, the note said 2", l.Count)
	}

	c.Down()
	for _, cmd := range [][]string{{"status"}, {"down"}} {
		out, err := runTandem(t, append(cmd, "--data", c.Dir())...)
		if !strings.Contains(out, "stopped") || strings.Contains(out, "connection refused") {
			t.Fatalf("tandem %s on a stopped cluster: %v\n%s", cmd[0], err, out)
		}
		if strings.Contains(out, "stopped meta") {
			t.Fatalf("down claims to have stopped what was not running:\n%s", out)
		}
	}
}

// TestInlineMaxZeroKeepsEveryFileOnTargets: --inline-max 0 does what it
// says, as --no-inline does: even a one-byte file lives on targets.
func TestInlineMaxZeroKeepsEveryFileOnTargets(t *testing.T) {
	c := testcluster.Start(t, testcluster.WithInlineMax("0"))
	f := filepath.Join(c.Mount(), "tiny")
	mustWrite(t, f, []byte("x"))
	if l := getLayout(t, f); l.Inline || len(l.Targets) == 0 {
		t.Fatalf("a 1-byte file with --inline-max 0: %+v, want it on targets", l)
	}
	if got := mustRead(t, f); string(got) != "x" {
		t.Fatalf("read back %q", got)
	}
}
