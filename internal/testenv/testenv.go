// Package testenv decides what a test does when this machine cannot run
// it (no root, no FUSE, no network namespaces, a tool missing): on a
// developer's machine it is skipped; under CI (CI=true) it fails, so that
// a run cannot pass by skipping what it was meant to check.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// OnCI reports whether the tests run under CI (CI=true).
func OnCI() bool { return os.Getenv("CI") == "true" }

// Unavailable ends the test because this machine cannot run it: a
// failure under CI, a skip elsewhere.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	why := fmt.Sprintf(format, args...)
	if OnCI() {
		t.Fatalf("cannot run here: %s (CI=true: a test that cannot run fails instead of skipping)", why)
	}
	t.Skip(why)
}

// RequireRoot ends the test unless it runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Unavailable(t, "needs root")
	}
}

// RequireCommand ends the test unless prog is on PATH
// (scripts/install-deps.sh installs every one the tests use).
func RequireCommand(t testing.TB, prog string) {
	t.Helper()
	if _, err := exec.LookPath(prog); err != nil {
		Unavailable(t, "needs %s (scripts/install-deps.sh installs it)", prog)
	}
}
