package sysmon

import (
	"slices"
	"testing"
)

func TestAServiceIsReexecutedWithSchedtraceAddedToGODEBUG(t *testing.T) {
	for _, c := range []struct {
		name string
		env  []string
		want []string // nil: no re-execution
	}{
		{"no GODEBUG", []string{"PATH=/bin"}, []string{"PATH=/bin", "GODEBUG=schedtrace=" + Period}},
		{"empty GODEBUG", []string{"GODEBUG=", "A=1"}, []string{"GODEBUG=schedtrace=" + Period, "A=1"}},
		{"other settings kept", []string{"GODEBUG=gctrace=1"}, []string{"GODEBUG=gctrace=1,schedtrace=" + Period}},
		{"set already (by the re-execution)", []string{"GODEBUG=schedtrace=" + Period}, nil},
		{"set by the administrator", []string{"GODEBUG=gctrace=1,schedtrace=1000"}, nil},
		{"turned off", []string{"TANDEM_SYSMON=sleep", "PATH=/bin"}, nil},
		{"the first GODEBUG, the one the runtime reads", []string{"GODEBUG=a=1", "GODEBUG=schedtrace=5"},
			[]string{"GODEBUG=a=1,schedtrace=" + Period, "GODEBUG=schedtrace=5"}},
	} {
		if got := awakeEnv(c.env); !slices.Equal(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

func TestTheCallersEnvironmentIsNotChanged(t *testing.T) {
	env := []string{"GODEBUG=gctrace=1"}
	awakeEnv(env)
	if env[0] != "GODEBUG=gctrace=1" {
		t.Fatalf("the caller's slice became %q", env)
	}
}
