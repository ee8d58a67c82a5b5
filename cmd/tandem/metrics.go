package main

import (
	"log"
	"os"

	"github.com/spf13/cobra"

	"tandemfs/internal/metrics"
)

// addMetricsFlag gives a service command a --metrics ADDR flag that serves
// its Prometheus metrics on http://ADDR/metrics (docs/architecture.md,
// "Metrics", lists them). TANDEM_METRICS=127.0.0.1:0 serves every process
// of a `tandem up` cluster, each on its own port, named in its log.
func addMetricsFlag(cmd *cobra.Command) {
	var addr string
	cmd.Flags().StringVar(&addr, "metrics", os.Getenv("TANDEM_METRICS"), "serve Prometheus metrics on http://ADDR/metrics (e.g. :9300)")
	beforeRun(cmd, func() error {
		if addr == "" {
			return nil
		}
		a, err := metrics.Listen(addr)
		if err != nil {
			return err
		}
		log.Printf("metrics on http://%s/metrics", a)
		return nil
	})
}
