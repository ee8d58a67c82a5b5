package tests

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"

	"tandemfs/internal/sysmon"
	"tandemfs/internal/testcluster"
)

// How `tandem up` starts its services, read from their environments (one
// cluster for both specifications).
func TestUpStartsItsServicesTuned(t *testing.T) {
	c := testcluster.Start(t)

	// A one-machine cluster divides the cores among its storage servers:
	// each, and the metadata service, runs with GOMAXPROCS set to a
	// server's share, while the client keeps them all.
	t.Run("EachServerGetsItsShareOfTheCores", func(t *testing.T) {
		if os.Getenv("GOMAXPROCS") != "" {
			t.Skip("GOMAXPROCS is set in this environment, which `tandem up` then leaves alone")
		}
		want := fmt.Sprintf("GOMAXPROCS=%d", max(1, runtime.NumCPU()/2))
		for _, name := range []string{"meta", "storage1", "storage2"} {
			if env := processEnv(t, c, name); !strings.Contains(env, "\x00"+want+"\x00") {
				t.Errorf("%s runs without %s", name, want)
			}
		}
		if env := processEnv(t, c, "mount"); strings.Contains(env, "GOMAXPROCS=") {
			t.Errorf("the client runs with a GOMAXPROCS of its own")
		}
	})

	// Every service runs with the Go runtime's monitor kept awake
	// (internal/sysmon): it re-executes itself with GODEBUG's schedtrace
	// set.
	t.Run("ServicesKeepTheRuntimesMonitorAwake", func(t *testing.T) {
		if strings.Contains(os.Getenv("GODEBUG"), "schedtrace=") || os.Getenv("TANDEM_SYSMON") == "sleep" {
			t.Skip("this environment sets schedtrace or TANDEM_SYSMON=sleep itself")
		}
		want := "GODEBUG=schedtrace=" + sysmon.Period
		for _, name := range []string{"meta", "storage1", "storage2", "mount"} {
			if env := processEnv(t, c, name); !strings.Contains(env, "\x00"+want+"\x00") {
				t.Errorf("%s runs without %s", name, want)
			}
		}
	})
}

// processEnv returns the environment of the cluster's process name, NUL
// separated, with a NUL at both ends.
func processEnv(t *testing.T, c *testcluster.Cluster, name string) string {
	t.Helper()
	pid, err := os.ReadFile(c.PidFile(name))
	if err != nil {
		t.Fatal(err)
	}
	env, err := os.ReadFile("/proc/" + strings.TrimSpace(string(pid)) + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	return "\x00" + string(env)
}
