package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"tandemfs/internal/stream"
	"tandemfs/internal/testenv"
)

// runStream runs `tandem <args>` in-process with a fresh command tree and
// returns its output and the exit status main would give.
func runStream(t *testing.T, stdin []byte, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	root := &cobra.Command{Use: "tandem", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(newStreamCmd())
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetIn(bytes.NewReader(stdin))
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		errOut.WriteString("tandem: " + err.Error() + "\n")
		return out.String(), errOut.String(), exitCode(err)
	}
	return out.String(), errOut.String(), 0
}

func TestStreamGenThenCheckPasses(t *testing.T) {
	file := filepath.Join(t.TempDir(), "s")
	_, stderr, code := runStream(t, nil, "stream", "gen", "--size", "100k", "--seed", "0x2a", "-o", file, "--fsync")
	if code != 0 || !strings.Contains(stderr, "seed 0x000000000000002a, 102400 bytes") {
		t.Fatalf("gen: status %d, stderr %q", code, stderr)
	}
	stdout, _, code := runStream(t, nil, "stream", "check", file)
	if code != 0 || !strings.Contains(stdout, "valid data for 102400 bytes at offset 0\n") || !strings.Contains(stdout, "no errors") {
		t.Fatalf("check: status %d, stdout:\n%s", code, stdout)
	}
}

func TestStreamGenWritesToStdoutWithAStableDefaultSeed(t *testing.T) {
	a, _, code := runStream(t, nil, "stream", "gen", "--size", "5000")
	b, _, _ := runStream(t, nil, "stream", "gen", "--size", "5000")
	if code != 0 || len(a) != 5000 || a != b {
		t.Fatalf("status %d, %d bytes, same both times: %v", code, len(a), a == b)
	}
	// And check reads standard input, given "-" or nothing.
	for _, args := range [][]string{{"stream", "check"}, {"stream", "check", "-"}} {
		if _, _, code := runStream(t, []byte(a), args...); code != 0 {
			t.Errorf("%q: status %d", args, code)
		}
	}
}

func TestStreamCheckExitsOneOnDamageAndReportsItInJSON(t *testing.T) {
	data, _, _ := runStream(t, nil, "stream", "gen", "--size", "64k", "--seed", "9")
	damaged := []byte(data)
	clear(damaged[8192+100 : 8192+200])
	stdout, stderr, code := runStream(t, damaged[:60000], "stream", "check", "--json")
	if code != 1 || !strings.Contains(stderr, "-: 2 errors") {
		t.Fatalf("status %d, stderr %q", code, stderr)
	}
	var r struct {
		File    string
		OK      bool
		Seed    stream.Seed
		Extents []stream.Extent
	}
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("%v in %s", err, stdout)
	}
	want := []stream.Extent{
		{Kind: stream.Valid, Offset: 0, Length: 8292},
		{Kind: stream.Zero, Offset: 8292, Length: 100},
		{Kind: stream.Valid, Offset: 8392, Length: 60000 - 8392},
		{Kind: stream.Missing, Offset: 60000, Length: 65536 - 60000},
	}
	if r.File != "-" || r.OK || r.Seed != 9 || len(r.Extents) != len(want) {
		t.Fatalf("report %s", stdout)
	}
	for i := range want {
		if r.Extents[i] != want[i] {
			t.Errorf("extent %d = %+v, want %+v", i, r.Extents[i], want[i])
		}
	}
}

func TestStreamUsageErrorsExitTwo(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		args []string
		msg  string
	}{
		{[]string{"stream", "gen"}, "gen needs --size"},
		{[]string{"stream", "gen", "--size", "10Q"}, `invalid size "10Q"`},
		{[]string{"stream", "gen", "--size", "-1"}, `invalid size "-1"`},
		{[]string{"stream", "gen", "--size", "1k", "--seed", "x"}, `invalid seed "x"`},
		{[]string{"stream", "gen", "--size", "1k", "out"}, "gen takes no arguments"},
		{[]string{"stream", "gen", "--sise", "1k"}, "unknown flag: --sise"},
		{[]string{"stream", "check", "--size", "big"}, `invalid size "big"`},
		{[]string{"stream", "check", "--seed", "-3"}, `invalid seed "-3"`},
		{[]string{"stream", "check", "a", "b"}, "one file at most"},
		{[]string{"stream", "check", "--jsn"}, "unknown flag: --jsn"},
		{[]string{"stream", "check", filepath.Join(dir, "absent")}, "no such file"},
		{[]string{"stream", "chek"}, `unknown command "chek"`},
	} {
		_, stderr, code := runStream(t, nil, tt.args...)
		if code != 2 || !strings.Contains(stderr, tt.msg) {
			t.Errorf("%q: status %d, stderr %q; want 2 and %q", tt.args, code, stderr, tt.msg)
		}
	}
}

// TestStreamHelperProcess is not a test: it is the tandem binary for the
// pipeline tests, which run the test executable itself with
// TANDEM_STREAM_HELPER=1 and tandem's arguments after "--".
func TestStreamHelperProcess(t *testing.T) {
	if os.Getenv("TANDEM_STREAM_HELPER") != "1" {
		return
	}
	args := os.Args
	for i, a := range args {
		if a == "--" {
			args = args[i+1:]
			break
		}
	}
	os.Args = append([]string{"tandem"}, args...)
	main()
	os.Exit(0) // main returns on success; the testing framework must not print after it
}

func tandemCmd(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^TestStreamHelperProcess$", "--"}, args...)...)
	// Under -race each exiting process would otherwise sleep for a second.
	cmd.Env = append(os.Environ(), "TANDEM_STREAM_HELPER=1", "GORACE=atexit_sleep_ms=0")
	return cmd
}

// pipeline runs gen | dd ddArgs | check, as the white papers' failover tests
// did, and returns check's output and exit status.
func pipeline(t *testing.T, size string, ddArgs []string, checkArgs ...string) (string, int) {
	t.Helper()
	gen := tandemCmd("stream", "gen", "--size", size)
	dd := exec.Command("dd", append(ddArgs, "status=none")...)
	check := tandemCmd(append([]string{"stream", "check"}, checkArgs...)...)
	// Plain pipes whose parent ends are closed once the children hold them,
	// so that gen sees a broken pipe when dd stops early, as in a shell.
	r1, w1, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r2, w2, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	gen.Stdout, dd.Stdin, dd.Stdout, check.Stdin = w1, r1, w2, r2
	var out, genErr, ddErr, checkErr bytes.Buffer
	check.Stdout, check.Stderr, gen.Stderr, dd.Stderr = &out, &checkErr, &genErr, &ddErr
	for _, c := range []*exec.Cmd{gen, dd, check} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []*os.File{r1, w1, r2, w2} {
		f.Close()
	}
	waitErr := check.Wait()
	gen.Wait() // fails with a broken pipe when dd stops early; only check's verdict counts
	dd.Wait()
	code := 0
	var ee *exec.ExitError
	if errors.As(waitErr, &ee) {
		code = ee.ExitCode()
	} else if waitErr != nil {
		t.Fatal(waitErr)
	}
	return out.String() + checkErr.String(), code
}

func TestStreamSurvivesDDWithMismatchedBlockSizes(t *testing.T) {
	testenv.RequireCommand(t, "dd")
	for _, dd := range [][]string{{"bs=1000"}, {"ibs=4095", "obs=3333"}, {"bs=1M"}, {"bs=512", "iflag=fullblock"}} {
		// An odd size, so that the stream's last block is cut short too.
		out, code := pipeline(t, "3000001", dd, "--size", "3000001")
		if code != 0 || !strings.Contains(out, "valid data for 3000001 bytes at offset 0\n") {
			t.Errorf("dd %q: status %d, output:\n%s", dd, code, out)
		}
	}
}

func TestStreamCheckFindsTheTailACutCopyLost(t *testing.T) {
	testenv.RequireCommand(t, "dd")
	// As if the copy died part way: dd stops after 1000 blocks of 1000 bytes.
	out, code := pipeline(t, "4M", []string{"bs=1000", "count=1000", "iflag=fullblock"})
	if code != 1 || !strings.Contains(out, "valid data for 1000000 bytes at offset 0\n") ||
		!strings.Contains(out, "missing data for 3194304 bytes at offset 1000000") {
		t.Errorf("status %d, output:\n%s", code, out)
	}
}
