package testenv

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// A test that cannot run is skipped on a developer's machine and fails
// under CI: run a test of this package in a child process both ways.
func TestUnavailableFailsOnlyUnderCI(t *testing.T) {
	if os.Getenv("TESTENV_CHILD") != "" {
		RequireCommand(t, "no-such-program-anywhere")
		return
	}
	run := func(ci string) (string, error) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestUnavailableFailsOnlyUnderCI$", "-test.v")
		cmd.Env = append(os.Environ(), "TESTENV_CHILD=1", "CI="+ci)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run("false"); err != nil || !strings.Contains(out, "SKIP") {
		t.Fatalf("without CI: %v\n%s", err, out)
	}
	if out, err := run("true"); err == nil || !strings.Contains(out, "CI=true: a test that cannot run fails") {
		t.Fatalf("under CI: %v\n%s", err, out)
	}
}
