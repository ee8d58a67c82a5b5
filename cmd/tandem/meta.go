package main

import (
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"tandemfs/internal/meta"
	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
)

func init() {
	var (
		dir, listen, raftListen, id, secretFile string
		inline                                  uint32
		noInline                                bool
		chunk                                   string
		count                                   uint32
		syncEvery                               time.Duration
	)
	cmd := &cobra.Command{
		Use:   "meta",
		Short: "Run the metadata service (namespace, layouts, cluster map) in the foreground",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			secret, err := rpc.ReadSecretFile(secretFile)
			if err != nil {
				return err
			}
			chunkSize, err := parseSize(chunk)
			if err != nil {
				return fmt.Errorf("--chunk-size: %w", err)
			}
			logger := log.New(os.Stderr, "meta: ", log.LstdFlags|log.Lmicroseconds)
			if syncEvery == 0 {
				syncEvery = -1 // fsync every commit
			}
			svc, err := meta.Start(meta.Config{
				SyncEvery: syncEvery,
				Dir:       dir, Listen: listen, RaftListen: raftListen, ID: id, Secret: secret,
				InlineLimit: inline, NoInline: noInline,
				DefaultStripe: proto.Stripe{ChunkSize: uint32(chunkSize), Count: count},
				Logf:          logger.Printf, LogOutput: os.Stderr,
			})
			if err != nil {
				return err
			}
			logger.Printf("serving on %s (raft %s, data %s)", svc.Addr(), raftListen, dir)
			waitForSignal()
			logger.Printf("shutting down")
			svc.Close()
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "data", "", "directory for the metadata store and Raft log (required)")
	f.StringVar(&listen, "listen", "127.0.0.1:7100", "address for clients and storage servers")
	f.StringVar(&raftListen, "raft-listen", "127.0.0.1:7101", "address for Raft peers")
	f.StringVar(&id, "id", "meta1", "replica ID")
	f.StringVar(&secretFile, "secret-file", "", "cluster secret file (required)")
	f.Uint32Var(&inline, "inline-max", 4096, "files up to this size live inline in the metadata (new file systems only)")
	f.BoolVar(&noInline, "no-inline", false, "store every file on targets (new file systems only)")
	f.StringVar(&chunk, "chunk-size", "1M", "default chunk size (new file systems only)")
	f.Uint32Var(&count, "stripe-count", 4, "default stripe count (new file systems only)")
	f.DurationVar(&syncEvery, "sync-every", 100*time.Millisecond,
		"fsync the metadata log this often (changes survive a process crash at once, a power failure after this delay or an application's fsync); 0 fsyncs every change")
	cmd.MarkFlagRequired("data")
	cmd.MarkFlagRequired("secret-file")
	addPprofFlag(cmd)
	rootCmd.AddCommand(cmd)
}

// waitForSignal blocks until SIGINT or SIGTERM.
func waitForSignal() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	<-ch
	signal.Stop(ch)
}
