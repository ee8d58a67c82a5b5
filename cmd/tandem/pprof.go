package main

import (
	"fmt"
	"log"
	"net"
	"net/http"
	_ "net/http/pprof" // profiling endpoints for --pprof
	"os"

	"github.com/spf13/cobra"
)

// addPprofFlag gives a service command a --pprof ADDR flag that serves
// Go's profiling endpoints (/debug/pprof/), so performance work starts
// from profiles of the real processes.
func addPprofFlag(cmd *cobra.Command) {
	var addr string
	cmd.Flags().StringVar(&addr, "pprof", os.Getenv("TANDEM_PPROF"), "serve /debug/pprof on this address (e.g. 127.0.0.1:6060)")
	beforeRun(cmd, func() error {
		if addr == "" {
			return nil
		}
		// Listening here, not in the goroutine, names the port taken
		// for ":0", so TANDEM_PPROF=127.0.0.1:0 serves every process
		// of a cluster, each on its own port found in its log.
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("--pprof %s: %w", addr, err)
		}
		log.Printf("pprof on http://%s/debug/pprof/", ln.Addr())
		go http.Serve(ln, nil)
		return nil
	})
}

// beforeRun makes cmd run f once its flags are parsed, before its own
// PreRunE and RunE.
func beforeRun(cmd *cobra.Command, f func() error) {
	prev := cmd.PreRunE
	cmd.PreRunE = func(c *cobra.Command, args []string) error {
		if err := f(); err != nil {
			return err
		}
		if prev != nil {
			return prev(c, args)
		}
		return nil
	}
}
