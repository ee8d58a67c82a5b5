// Package sysmon keeps the Go runtime's system monitor awake in TandemFS's
// services, because on the virtual machines it was measured on, letting it
// sleep cost a storage server half its CPU per small write.
//
// The runtime's monitor thread (sysmon) goes into a deep sleep whenever
// every Go processor is idle, and the next goroutine to enter a system
// call wakes it (runtime.entersyscallWakeSysmon, a futex wake-up). A
// server that answers one request at a time is idle between requests, so
// every request paid that wake-up, on the critical path, and on a virtual
// CPU a wake-up across CPUs is an interrupt through the hypervisor. The
// profile of a storage server during random 4 KiB writes with two copies
// (2026-11-27) had 12 % of its CPU in that one wake-up. The runtime skips
// the deep sleep only while GODEBUG's schedtrace is set, and reads GODEBUG
// once, at start; so a service re-executes itself with schedtrace set to
// the longest period there is (about 24.8 days, the interval at which the
// runtime then prints one line of scheduler statistics to standard error).
// The monitor then sleeps in steps growing to 10 ms while the process is
// idle: about a hundred wake-ups a second, against one per request.
//
// Measured on the 2-core development VM (docs/benchmarks.md, 2026-11-27):
// random 4 KiB writes with two copies went from 5,398-6,119 to 7,474-7,813
// IOPS, each storage server's CPU per write from 63-71 to 35-37 µs; serial
// creates from 4,760-5,133 to 5,474-5,525/s.
//
// TANDEM_SYSMON=sleep keeps the runtime's default; a GODEBUG that already
// sets schedtrace is left as it is.
package sysmon

import (
	"fmt"
	"os"
	"strings"
	"syscall"
)

// Period is the schedtrace value set: the longest the runtime accepts (an
// int32 of milliseconds).
const Period = "2147483647"

// awakeEnv returns the environment to re-execute with, or nil when env
// needs no change.
func awakeEnv(env []string) []string {
	godebug := ""
	at := -1
	for i, kv := range env {
		switch {
		case kv == "TANDEM_SYSMON=sleep":
			return nil
		case strings.HasPrefix(kv, "GODEBUG=") && at < 0:
			// The first, as the runtime reads it.
			godebug, at = strings.TrimPrefix(kv, "GODEBUG="), i
		}
	}
	for _, setting := range strings.Split(godebug, ",") {
		if strings.HasPrefix(setting, "schedtrace=") {
			return nil
		}
	}
	out := append([]string{}, env...)
	set := "schedtrace=" + Period
	if at < 0 {
		return append(out, "GODEBUG="+set)
	}
	if godebug != "" {
		set = godebug + "," + set
	}
	out[at] = "GODEBUG=" + set
	return out
}

// KeepAwake re-executes the running binary with schedtrace set, unless it
// is set already or TANDEM_SYSMON=sleep. It returns only if it did not
// re-execute: then the process goes on as it is, with a note on standard
// error if the re-execution failed.
func KeepAwake() {
	env := awakeEnv(os.Environ())
	if env == nil {
		return
	}
	exe, err := os.Executable()
	if err == nil {
		err = syscall.Exec(exe, os.Args, env)
	}
	fmt.Fprintf(os.Stderr, "tandem: could not re-execute with the runtime's monitor kept awake (%v); going on without\n", err)
}
