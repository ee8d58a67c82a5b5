// Command tandem is the single TandemFS binary: every service (metadata,
// storage, FUSE client), the one-machine cluster launcher and the tools
// (status, stripe, bench, stream) are its subcommands. Each subcommand lives
// in a file of its own that adds itself to rootCmd in init.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"tandemfs/internal/sysmon"
)

var rootCmd = &cobra.Command{
	Use:           "tandem",
	Short:         "TandemFS: a highly available parallel file system for HPC clusters",
	SilenceUsage:  true,
	SilenceErrors: true,
}

// services are the subcommands that run as long-lived servers.
var services = map[string]bool{"meta": true, "storage": true, "mount": true}

func main() {
	if len(os.Args) > 1 && services[os.Args[1]] {
		sysmon.KeepAwake() // re-executes, unless kept awake already
	}
	if err := rootCmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "tandem:", err)
		os.Exit(exitCode(err))
	}
}

// exitError lets a subcommand choose its exit status (e.g. stream check
// exits 1 on a corrupt stream, 2 on a usage error).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func exitCode(err error) int {
	if ee, ok := err.(*exitError); ok {
		return ee.code
	}
	return 1
}
