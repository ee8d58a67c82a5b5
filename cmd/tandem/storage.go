package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"tandemfs/internal/flashcache"
	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
	"tandemfs/internal/storage"
)

func init() {
	var (
		listen, advertise, meta, secretFile, state string
		metaPrivate, faultFile, scrubRate, rack    string
		cacheSize, cacheMode                       string
		targets, caches                            []string
		heartbeat, scrubEvery                      time.Duration
		resyncShare                                float64
	)
	cmd := &cobra.Command{
		Use:   "storage --listen ADDR --meta ADDR[,ADDR] --secret-file FILE --target DIR [--target DIR ...]",
		Short: "Run a storage server: serve chunks from target directories",
		Long: `Run a storage server in the foreground until SIGTERM or SIGINT.

Each --target is a directory on a local file system (XFS or ext4 on RAID or
NVMe) that must exist; its first use formats it (target.json). The server
registers its targets with the metadata service and heartbeats to it; while
the metadata service is unreachable it keeps retrying and serves the targets
it was registered with before.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var missing []string
			for _, f := range []string{"listen", "meta", "secret-file", "target"} {
				if !cmd.Flags().Changed(f) {
					missing = append(missing, "--"+f)
				}
			}
			if len(missing) > 0 {
				return &exitError{2, fmt.Errorf("storage: missing %s", strings.Join(missing, ", "))}
			}
			metas, private := splitAddrs(meta), splitAddrs(metaPrivate)
			if len(metas) == 0 {
				return &exitError{2, errors.New("storage: --meta names no address")}
			}
			for _, dir := range targets {
				if err := checkTargetDir(dir); err != nil {
					return err
				}
			}
			rate, err := parseSize(scrubRate)
			if err != nil {
				return &exitError{2, fmt.Errorf("storage: --scrub-rate %q: %v", scrubRate, err)}
			}
			if resyncShare < 0 || resyncShare >= 1 {
				return &exitError{2, fmt.Errorf("storage: --resync-share %g: must be at least 0 and below 1 (0: no pacing)", resyncShare)}
			}
			if scrubEvery < 0 {
				return &exitError{2, fmt.Errorf("storage: --scrub-every %v is negative (0 scrubs only when asked)", scrubEvery)}
			}
			secret, err := rpc.ReadSecretFile(secretFile)
			if err != nil {
				return err
			}
			logger := log.New(os.Stderr, "", log.LstdFlags|log.Lmicroseconds)
			var fsys storage.FS
			stopFaults := make(chan struct{})
			defer close(stopFaults)
			if faultFile != "" {
				ffs := storage.NewFaultFS(nil)
				if err := storage.WatchFaultFile(ffs, faultFile, stopFaults, logger.Printf); err != nil {
					return err
				}
				fsys = ffs
			}
			set, err := openCaches(targets, caches, cacheSize, cacheMode, fsys, logger.Printf)
			if err != nil {
				return err
			}
			var reports func() []proto.CacheReport
			if set != nil {
				defer set.Close() // after the server: the caches are marked clean
				fsys, reports = set, set.Reports
			}
			svc, err := storage.Start(storage.Config{
				FS:                fsys,
				CacheReports:      reports,
				Listen:            listen,
				AdvertiseAddr:     advertise,
				MetaAddrs:         metas,
				PrivateMetaAddrs:  private,
				Rack:              rack,
				Secret:            secret,
				TargetDirs:        targets,
				StateDir:          state,
				HeartbeatInterval: heartbeat,
				ScrubEvery:        scrubEvery,
				ScrubRate:         int64(rate),
				ResyncShare:       resyncShare,
				Logf:              logger.Printf,
			})
			if err != nil {
				return err
			}
			if set != nil {
				set.SetWriteBackRule(svc.ServedTwice)
			}
			svc.ExportMetrics()
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			<-ctx.Done()
			logger.Printf("storage: shutting down")
			return svc.Close()
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "", "TCP address to serve on, e.g. :8003")
	f.StringVar(&advertise, "advertise", "", "address clients should use (default: the listen address, or the local address towards the metadata service)")
	f.StringVar(&meta, "meta", "", "metadata service address(es), comma-separated")
	f.StringVar(&secretFile, "secret-file", "", "file holding the cluster secret (mode 0600)")
	f.StringArrayVar(&targets, "target", nil, "target directory (repeat for several)")
	f.StringVar(&state, "state", "", "directory for the server's identity file (default: the first target)")
	f.StringVar(&rack, "rack", "", "the rack (or room, or any failure domain above the server) this server is in: erasure-coded files with --failure-domain rack put one shard per rack")
	f.StringVar(&metaPrivate, "meta-private", "", "the metadata replicas' addresses on the private network, comma-separated: heartbeats go over both networks")
	f.StringArrayVar(&caches, "cache", nil, "a directory on a faster device (flash) to cache a target's chunks in: one per --target, in the same order")
	f.StringVar(&cacheSize, "cache-size", "0", "bytes each --cache may hold (e.g. 200G; 0: nine tenths of the cache file system's size)")
	f.StringVar(&cacheMode, "cache-mode", "writethrough", "how a --cache treats writes: writethrough (durable on the target's disk before acknowledged, copies kept for reads), writeback (durable on the flash of every serving chain member before acknowledged, destaged to the disk in the background; chains of one target and chains with one serving member write through) or off (a cache that was written back is destaged first)")
	f.StringVar(&faultFile, "fault-file", "", "for failure tests: JSON rules, reloaded when the file changes, that make the targets' disk calls fail (see internal/storage/faultfile.go)")
	f.DurationVar(&heartbeat, "heartbeat", 500*time.Millisecond, "interval between heartbeats to the metadata service (well below half the failure timeout)")
	f.DurationVar(&scrubEvery, "scrub-every", storage.DefaultScrubEvery, "time between scrubs, which read back and verify every stored block and repair bad ones from another copy (0: only when asked, by tandem scrub)")
	f.StringVar(&scrubRate, "scrub-rate", "64M", "most bytes a second a scrub reads (e.g. 64M; 0: no limit)")
	f.Float64Var(&resyncShare, "resync-share", storage.DefaultResyncShare, "while this server copies a resync, the share of the bytes moved here that the copy is guaranteed against clients' reads and writes, which wait for it (0: no pacing)")
	addPprofFlag(cmd)
	addMetricsFlag(cmd)
	rootCmd.AddCommand(cmd)
}

// openCaches opens a flash cache tier for each target (none without
// --cache) over base, the targets' file system (nil: the real one).
func openCaches(targets, caches []string, sizeText, modeText string, base storage.FS, logf func(string, ...any)) (*flashcache.Set, error) {
	if len(caches) == 0 {
		for _, t := range targets {
			if err := flashcache.CheckUncached(t, base); err != nil {
				return nil, &exitError{2, fmt.Errorf("storage: %v", err)}
			}
		}
		return nil, nil
	}
	if len(caches) != len(targets) {
		return nil, &exitError{2, fmt.Errorf("storage: %d --cache for %d --target: give one cache directory per target, in the same order", len(caches), len(targets))}
	}
	mode, err := flashcache.ParseMode(modeText)
	if err != nil {
		return nil, &exitError{2, fmt.Errorf("storage: --cache-mode: %v", err)}
	}
	size, err := parseSize(sizeText)
	if err != nil {
		return nil, &exitError{2, fmt.Errorf("storage: --cache-size %q: %v", sizeText, err)}
	}
	if base == nil {
		base = storage.OSFS{}
	}
	set := &flashcache.Set{Base: base}
	for i, dir := range caches {
		n := int64(size)
		if n == 0 {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				set.Close()
				return nil, fmt.Errorf("storage: --cache %s: %w", dir, err)
			}
			total, _, err := storage.OSFS{}.Statfs(dir)
			if err != nil {
				set.Close()
				return nil, fmt.Errorf("storage: --cache %s: %w", dir, err)
			}
			n = int64(total / 10 * 9)
		}
		// A fault file's rules reach the cache device too (base is then
		// the FaultFS): a rule naming the cache directory fails it.
		tier, err := flashcache.Open(flashcache.Config{Target: targets[i], Dir: dir, Size: n, Mode: mode, Slow: base, Fast: base, Logf: logf})
		if err != nil {
			set.Close()
			return nil, &exitError{2, fmt.Errorf("storage: --cache: %v", err)}
		}
		logf("storage: target %s cached in %s (%s, %s)", targets[i], dir, mode, humanBytes(uint64(n)))
		set.Tiers = append(set.Tiers, tier)
	}
	return set, nil
}

// splitAddrs splits a comma-separated address list, dropping blanks.
func splitAddrs(list string) []string {
	var out []string
	for _, a := range strings.Split(list, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// checkTargetDir fails early, naming the directory, if a target cannot be
// used; the engine would fail too, but less directly.
func checkTargetDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("storage: target directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("storage: target %s is not a directory", dir)
	}
	if err := syscall.Access(dir, 7 /* R_OK|W_OK|X_OK */); err != nil {
		return fmt.Errorf("storage: target directory %s is not readable and writable: %w", dir, err)
	}
	return nil
}
