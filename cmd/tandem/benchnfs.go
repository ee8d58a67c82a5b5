package main

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"tandemfs/internal/nfsbench"
)

// newBenchNFSCmd measures an NFS server with its own NFSv3 client: the
// same client for TandemFS's gateway and for NFS-Ganesha.
func newBenchNFSCmd() *cobra.Command {
	cfg := nfsbench.Config{}
	var seconds int
	var size string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "nfs --server HOST:PORT [--mount-server HOST:PORT] --export PATH",
		Short: "Measure an NFSv3 server: random 4 KiB reads and stable writes, and creates (ops/s)",
		Long: `Measure an NFSv3 server with TandemFS's own NFS client, which sends what an
O_DIRECT client on Linux sends: 4 KiB READs, and 4 KiB WRITEs as FILE_SYNC (each one
stable before its reply), at random offsets of one file; and CREATEs of new files.
Each test runs from one connection and from two at once. Sequential 1 MiB copies are
measured with libnfs's nfs-cp and nfs-cat instead (scripts/bench-nfs.sh).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.NFSAddr == "" || cfg.Export == "" {
				return benchUsage(fmt.Errorf("bench nfs: give --server HOST:PORT and --export PATH"))
			}
			if cfg.MountAddr == "" {
				cfg.MountAddr = cfg.NFSAddr
			}
			n, err := parseSize(size)
			if err != nil || n < 1<<20 {
				return benchUsage(fmt.Errorf("bench nfs: --file-size %q: want a size of 1M or more", size))
			}
			cfg.FileSize = int64(n)
			cfg.Duration = time.Duration(seconds) * time.Second
			cfg.Progress = os.Stderr
			results, err := nfsbench.Run(cfg)
			if asJSON {
				json.NewEncoder(os.Stdout).Encode(results)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.NFSAddr, "server", "", "the NFS server, HOST:PORT")
	f.StringVar(&cfg.MountAddr, "mount-server", "", "its MOUNT service, HOST:PORT (default: --server)")
	f.StringVar(&cfg.Export, "export", "", "the export to mount")
	f.StringVar(&cfg.Dir, "dir", "tandem-bench-nfs", "the directory under the export for the test files")
	f.StringVar(&size, "file-size", "256M", "the size of the file the random tests use")
	f.IntVar(&seconds, "seconds", 15, "how long each test runs")
	f.BoolVar(&asJSON, "json", false, "print the results as JSON on stdout")
	f.StringSliceVar(&cfg.Tests, "tests", nil, "run only these tests (rand-read-4k, rand-write-4k-stable, create)")
	f.IntSliceVar(&cfg.Jobs, "jobs", []int{1, 2}, "connections at once, each test run once per value")
	return cmd
}
