package netlab

import (
	"fmt"
	"os"
	"os/exec"
	"sync"
	"tandemfs/internal/testenv"
	"testing"
)

var (
	supportOnce sync.Once
	unsupported string // why labs cannot be built here; "" if they can
)

// Skip ends the test unless labs can be built here: root, ip, nsenter and
// bash present, and network namespaces creatable (a container may forbid
// them even to root). It skips, or under CI fails (testenv). The check
// runs once per test process.
func Skip(t testing.TB) {
	t.Helper()
	supportOnce.Do(func() { unsupported = checkSupport() })
	if unsupported != "" {
		testenv.Unavailable(t, "netlab: %s", unsupported)
	}
}

func checkSupport() string {
	if os.Geteuid() != 0 {
		return "needs root"
	}
	for _, prog := range []string{"ip", "nsenter", "bash"} {
		if _, err := exec.LookPath(prog); err != nil {
			return "needs " + prog
		}
	}
	// The name cannot collide with a lab's: those contain a '-'.
	ns := fmt.Sprintf("netlabprobe%d", os.Getpid())
	if err := ip("netns", "add", ns); err != nil {
		return "cannot create network namespaces: " + err.Error()
	}
	if err := ip("netns", "del", ns); err != nil {
		return "cannot delete network namespaces: " + err.Error()
	}
	return ""
}
