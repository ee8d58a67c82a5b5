package main

import (
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"tandemfs/internal/client"
	"tandemfs/internal/fuse"
	"tandemfs/internal/rpc"
	"tandemfs/internal/storage"
)

func init() {
	var metaAddr, secretFile, memCacheSize, ioUring string
	var debug, cacheDirect bool
	var cacheDir, cacheSize string
	var giveUp time.Duration
	cmd := &cobra.Command{
		Use:   "mount --meta ADDR --secret-file FILE MOUNTPOINT",
		Short: "Mount TandemFS with FUSE and serve it in the foreground until unmounted",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			mnt := args[0]
			if fi, err := os.Stat(mnt); err != nil || !fi.IsDir() {
				return fmt.Errorf("mount point %s is not a directory", mnt)
			}
			cacheBytes, err := blockCacheSetting(memCacheSize)
			if err != nil {
				return err
			}
			uring, err := fuse.ParseIoUringMode(ioUring)
			if err != nil {
				return err
			}
			secret, err := rpc.ReadSecretFile(secretFile)
			if err != nil {
				return err
			}
			logger := log.New(os.Stderr, "mount: ", log.LstdFlags|log.Lmicroseconds)
			diskBytes, err := diskCacheSetting(cacheDir, cacheSize)
			if err != nil {
				return &exitError{2, err}
			}
			c, err := client.New(client.Config{MetaAddr: metaAddr, Secret: secret, Logf: logger.Printf, GiveUp: giveUpSetting(giveUp),
				BlockCacheBytes: cacheBytes, CacheDirectIO: cacheDirect, DiskCacheDir: cacheDir, DiskCacheBytes: diskBytes})
			if err != nil {
				return err
			}
			defer c.Close()
			c.ExportMetrics()
			srv, err := fuse.Mount(c, mnt, fuse.MountOptions{Debug: debug, IoUring: uring, Logf: logger.Printf})
			if err != nil {
				return err
			}
			logger.Printf("mounted at %s (metadata service %s)", mnt, metaAddr)
			c.WarmStorage(warmConns)
			client.ReserveBuffers()
			go stopOnSignals(srv, mnt, logger)
			srv.Wait()
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&metaAddr, "meta", "127.0.0.1:7100", "metadata service address, or the addresses of all replicas (comma-separated)")
	f.StringVar(&secretFile, "secret-file", "", "cluster secret file (required)")
	f.BoolVar(&debug, "debug", false, "log every FUSE request")
	f.DurationVar(&giveUp, "give-up", 120*time.Second, "how long an operation waits for an unreachable service before failing with EIO; 0 waits forever (an NFS hard mount)")
	f.StringVar(&memCacheSize, "mem-cache-size", "512M", "memory for the block cache, which answers small reads of files this client holds leases on; 0 turns it off")
	f.StringVar(&cacheDir, "cache-dir", "", "keep blocks of the files read in this directory on the local disk (flash), across mounts, up to --cache-size; answered only while they are the file's current version (off by default)")
	f.StringVar(&cacheSize, "cache-size", "", "bytes --cache-dir may hold (e.g. 100G; default: nine tenths of its file system)")
	f.BoolVar(&cacheDirect, "cache-direct-io", false, "let the block cache answer O_DIRECT reads and keep small O_DIRECT writes (by default O_DIRECT reads and writes always go to the storage targets)")
	f.StringVar(&ioUring, "io-uring", "on", "on: serve the kernel over FUSE-over-io_uring where it has it (Linux 6.14+), each request on its caller's CPU, turning the fuse module's enable_uring on (root), else over /dev/fuse; off: over /dev/fuse (docs/architecture.md, \"Kernel transport\")")
	cmd.MarkFlagRequired("secret-file")
	addPprofFlag(cmd)
	addMetricsFlag(cmd)
	rootCmd.AddCommand(cmd)
}

// stopOnSignals unmounts on SIGTERM or SIGINT. A busy mount stays mounted
// and served, and a second signal aborts it; a mount detached already
// (`tandem down --force`, `umount -l`) is aborted at the first. Aborting
// fails the operations under way, and ends the process even where one of
// its own requests to the mount is out (internal/fuse/abort.go).
func stopOnSignals(srv *fuse.Mounted, mnt string, logger *log.Logger) {
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	<-signals
	logger.Printf("unmounting %s", mnt)
	err := srv.Unmount()
	if err == nil {
		return // Wait returns, and the process ends
	}
	if srv.Attached() {
		logger.Printf("unmount: %v (is the mount busy? a second signal aborts it, failing the operations under way)", err)
		<-signals
	}
	logger.Printf("aborting the FUSE connection of %s", mnt)
	if err := srv.Abort(); err != nil {
		logger.Printf("abort: %v", err)
	}
	// Wait returns once the kernel has ended the connection; should it
	// not, the process ends anyway.
	time.Sleep(5 * time.Second)
	logger.Printf("the FUSE server did not stop after the abort; exiting")
	os.Exit(1)
}

// warmConns is how many connections a mount opens to each storage server
// once it is up: enough for the first write-behind requests in parallel.
const warmConns = 4

// giveUpSetting maps --give-up to client.Config.GiveUp, where 0 means
// the default and a negative value forever.
func giveUpSetting(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}

// diskCacheSetting is the size of the disk cache in dir (--cache-dir):
// sizeText (--cache-size), or nine tenths of dir's file system when it is
// empty or 0.
func diskCacheSetting(dir, sizeText string) (int64, error) {
	if dir == "" {
		if sizeText != "" {
			return 0, fmt.Errorf("--cache-size %s sizes the disk cache, which needs --cache-dir (the memory block cache is sized by --mem-cache-size)", sizeText)
		}
		return 0, nil
	}
	if sizeText == "" {
		sizeText = "0"
	}
	n, err := parseSize(sizeText)
	if err != nil {
		return 0, fmt.Errorf("--cache-size %q: %v", sizeText, err)
	}
	if n > 0 {
		return int64(n), nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, fmt.Errorf("--cache-dir: %w", err)
	}
	total, _, err := storage.OSFS{}.Statfs(dir)
	if err != nil {
		return 0, fmt.Errorf("--cache-dir %s: %w", dir, err)
	}
	return int64(total / 10 * 9), nil
}

// blockCacheSetting maps --mem-cache-size to client.Config.BlockCacheBytes,
// where 0 means the default and a negative value none.
func blockCacheSetting(s string) (int64, error) {
	n, err := parseSize(s)
	if err != nil {
		return 0, fmt.Errorf("--mem-cache-size: %w", err)
	}
	if n > 1<<40 {
		return 0, fmt.Errorf("--mem-cache-size %s is more than 1 TiB of memory", s)
	}
	if n == 0 {
		return -1, nil
	}
	return int64(n), nil
}
