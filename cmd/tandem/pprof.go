package main

import (
	"log"
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
	prev := cmd.PreRunE
	cmd.PreRunE = func(c *cobra.Command, args []string) error {
		if addr != "" {
			go func() {
				if err := http.ListenAndServe(addr, nil); err != nil {
					log.Printf("pprof on %s: %v", addr, err)
				}
			}()
		}
		if prev != nil {
			return prev(c, args)
		}
		return nil
	}
}
