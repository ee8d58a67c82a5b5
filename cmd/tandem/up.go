package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"tandemfs/internal/cluster"
	"tandemfs/internal/fuse"
	"tandemfs/internal/fuseconn"
)

// defaultDataDir is where up, down and status keep a one-machine cluster
// unless --data (or $TANDEM_DATA) says otherwise.
func defaultDataDir() string {
	if d := os.Getenv("TANDEM_DATA"); d != "" {
		return d
	}
	return "./tandem-data"
}

func init() {
	var o cluster.Options
	var inline string
	var cacheDirect bool
	up := &cobra.Command{
		Use:   "up [--data DIR] [--mount MNT] [--servers N] [--targets-per-server M]",
		Short: "Start a whole cluster on this machine (metadata service, storage servers, FUSE mount) in the background",
		Long: `up starts the metadata service, N storage servers with M targets each, and a FUSE
mount, as background processes whose logs and PIDs live under DIR. It returns once
the mount is usable. Running it again on the same DIR restarts whatever is not
running and brings back every file.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.Servers < 1 || o.TargetsPerServer < 1 {
				return fmt.Errorf("--servers and --targets-per-server must be at least one server and one target")
			}
			if cmd.Flags().Changed("inline-max") {
				o.InlineMax = inline
			}
			if _, err := fuse.ParseIoUringMode(o.IoUring); err != nil {
				return err
			}
			if cacheDirect {
				o.MountFlags = append(o.MountFlags, "--cache-direct-io")
			}
			o.Progress = os.Stdout
			if err := cluster.CheckMountPoint(o); err != nil {
				return err
			}
			if o.Mount != "" && o.IoUring != string(fuse.IoUringOff) {
				enableUring(o.Dir)
			}
			l, err := cluster.Up(o)
			if err != nil {
				return err
			}
			fmt.Printf("TandemFS is up: metadata %s, %d storage servers", l.MetaAddr, len(l.Servers))
			if l.Mount != "" {
				fmt.Printf(", mounted at %s", l.Mount)
			}
			if l.NFS != nil {
				_, port, _ := net.SplitHostPort(l.NFS.Address)
				host, _, _ := net.SplitHostPort(l.NFS.Address)
				fmt.Printf("\nNFS gateway (heads %s) at %s: nfs-ls 'nfs://%s/?version=3&nfsport=%s&mountport=%s'",
					strings.Join(l.NFS.Heads, ", "), l.NFS.Address, host, port, port)
			}
			// Named as this command was run, so that it works from here.
			fmt.Printf("\nstop it with: %s down --data %s\n", os.Args[0], o.Dir)
			return nil
		},
	}
	f := up.Flags()
	f.StringVar(&o.Dir, "data", defaultDataDir(), "data directory (state, logs, PIDs); $TANDEM_DATA")
	f.StringVar(&o.Mount, "mount", "", "mount point (none: no FUSE mount)")
	f.BoolVar(&o.NFS, "nfs", false, "also start an NFS gateway: two heads holding one service address on a loopback alias (docs/nfs.md)")
	f.StringArrayVar(&o.NFSExports, "nfs-export", nil, "an export of the NFS gateway, as a line of /etc/exports (default: '"+cluster.DefaultNFSExport+"'; a new gateway only)")
	f.IntVar(&o.Servers, "servers", 2, "storage servers")
	f.IntVar(&o.TargetsPerServer, "targets-per-server", 2, "storage targets per server")
	f.IntVar(&o.MetaReplicas, "meta-replicas", 1, "metadata replicas in one Raft group: 1, or 3 to survive the loss of one (new clusters only)")
	f.StringVar(&inline, "inline-max", "4096", "largest file kept inline in the metadata, at most 65536; 0 keeps every file on storage targets (new file systems only)")
	f.BoolVar(&o.NoInline, "no-inline", false, "keep every file on storage targets (new file systems only)")
	f.StringVar(&o.ChunkSize, "chunk-size", "", "default chunk size, e.g. 1M (new file systems only)")
	f.IntVar(&o.StripeCount, "stripe-count", 0, "default stripe count (new file systems only; default 4)")
	f.IntVar(&o.Racks, "racks", 0, "label the storage servers rack1..rackN in turn, as failure domains for erasure coding (--failure-domain rack)")
	f.StringVar(&o.EC, "ec", "", "erasure code new files K+M (e.g. 4+2 with --servers 6, 8+2 with --servers 10): set on the root directory")
	f.StringVar(&o.FenceConfig, "fence-config", "", "fence agents to run against a failed storage server (JSON, see docs/ha.md)")
	f.StringVar(&o.IoUring, "io-uring", "on", "the mount's --io-uring: on serves the kernel over FUSE-over-io_uring where it has it (Linux 6.14+), turning the fuse module's enable_uring on (root); off keeps to /dev/fuse")
	f.DurationVar(&o.FailureTimeout, "failure-timeout", 0, "fail over a storage server silent this long (default 3s)")
	f.DurationVar(&o.ECRebuildAfter, "ec-rebuild-after", 0, "rebuild the erasure-coded shards of a storage server silent this long on other servers (default 10m)")
	f.StringVar(&o.TargetRoot, "target-root", "", "put the storage targets under this directory (a disk of their own) instead of DIR/storage (new clusters only)")
	f.StringVar(&o.Cache, "cache", "", "give every storage target a flash cache in this directory, on a faster device than the targets' (tandem storage --cache)")
	f.StringVar(&o.CacheSize, "cache-size", "", "bytes each target's cache may hold (e.g. 20G; default: nine tenths of the cache file system)")
	f.StringVar(&o.CacheMode, "cache-mode", "", "writethrough (default), writeback or off: see tandem storage --cache-mode")
	f.BoolVar(&cacheDirect, "cache-direct-io", false, "the mount's --cache-direct-io: its block cache answers O_DIRECT reads too")
	rootCmd.AddCommand(up)

	var dir string
	var force bool
	down := &cobra.Command{
		Use:   "down [--data DIR]",
		Short: "Unmount and stop exactly what `tandem up` started",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cluster.Down(dir, force, os.Stdout); err != nil {
				return err
			}
			restoreUring(dir)
			return nil
		},
	}
	down.Flags().StringVar(&dir, "data", defaultDataDir(), "data directory given to `tandem up`; $TANDEM_DATA")
	down.Flags().BoolVar(&force, "force", false, "detach a busy mount instead of failing, and end it: operations still under way on it fail")
	rootCmd.AddCommand(down)
}

// uringMarker records in a cluster's data directory that its `tandem up`
// turned the fuse module's enable_uring parameter on.
func uringMarker(dir string) string { return filepath.Join(dir, "run", "enable_uring.turned-on") }

// enableUring turns on the machine-wide switch the mount's io_uring
// transport needs, and says so: it is a setting of the whole machine, not
// of this cluster. Where the kernel has no such switch, the mount says
// what it serves over instead.
func enableUring(dir string) {
	changed, err := fuse.EnableUring()
	switch {
	case err != nil && !errors.Is(err, os.ErrNotExist):
		fmt.Printf("could not turn on %s (FUSE over io_uring): %v; the mount serves over /dev/fuse\n", fuse.EnableUringParam, err)
	case changed:
		fmt.Printf("turned on %s, for the whole machine (FUSE over io_uring); `down` turns it off again\n", fuse.EnableUringParam)
		os.MkdirAll(filepath.Dir(uringMarker(dir)), 0o700)
		os.WriteFile(uringMarker(dir), nil, 0o600)
	}
}

// restoreUring turns the switch back off if this cluster's up turned it
// on, unless FUSE mounts remain: a mount served over io_uring stops
// working once the switch is off.
func restoreUring(dir string) {
	if _, err := os.Stat(uringMarker(dir)); err != nil {
		return
	}
	if left := fuseconn.FUSEMounts(); len(left) > 0 {
		fmt.Printf("left %s on, as other FUSE mounts may use it: %s\n", fuse.EnableUringParam, strings.Join(left, ", "))
	} else if err := fuse.DisableUring(); err != nil {
		fmt.Printf("could not turn %s back off: %v\n", fuse.EnableUringParam, err)
	} else {
		fmt.Printf("turned %s back off, as it was before up\n", fuse.EnableUringParam)
	}
	os.Remove(uringMarker(dir))
}
