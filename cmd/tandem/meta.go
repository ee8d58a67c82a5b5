package main

import (
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"tandemfs/internal/fence"
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
		syncEvery, failureTimeout, pollNext     time.Duration
		ecRebuildAfter, sessionTimeout          time.Duration
		peers                                   []string
		fenceFile                               string
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
			peerList, err := parsePeers(peers)
			if err != nil {
				return err
			}
			if syncEvery == 0 {
				syncEvery = -1 // fsync every commit
			}
			if pollNext < 0 {
				return fmt.Errorf("--poll-next %v: want 0 (off) or a positive duration such as 200us", pollNext)
			}
			var fences *fence.Config
			if fenceFile != "" {
				if fences, err = fence.Load(fenceFile); err != nil {
					return err
				}
			}
			if failureTimeout != 0 && failureTimeout < time.Second {
				return fmt.Errorf("--failure-timeout %v: at least 1s (heartbeats go every 500ms)", failureTimeout)
			}
			if cmd.Flags().Changed("inline-max") && inline == 0 {
				noInline = true // as it says: no file is small enough
			}
			svc, err := meta.Start(meta.Config{
				SyncEvery: syncEvery, PollNext: pollNext, Peers: peerList, Fence: fences, FailureTimeout: failureTimeout, ECRebuildAfter: ecRebuildAfter, SessionTimeout: sessionTimeout,
				Dir: dir, Listen: listen, RaftListen: raftListen, ID: id, Secret: secret,
				InlineLimit: inline, NoInline: noInline,
				DefaultStripe: proto.Stripe{ChunkSize: uint32(chunkSize), Count: count},
				Logf:          logger.Printf, LogOutput: os.Stderr,
			})
			if err != nil {
				return err
			}
			svc.ExportMetrics()
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
	f.Uint32Var(&inline, "inline-max", 4096, "files up to this size live inline in the metadata, at most 65536; 0 keeps every file on targets, as --no-inline (new file systems only)")
	f.BoolVar(&noInline, "no-inline", false, "store every file on targets (new file systems only)")
	f.StringVar(&chunk, "chunk-size", "1M", "default chunk size (new file systems only)")
	f.Uint32Var(&count, "stripe-count", 4, "default stripe count (new file systems only)")
	f.StringArrayVar(&peers, "peer", nil, "a metadata replica as ID=ADDR,RAFTADDR; repeat for every replica, this one included (3 replicas survive one failure)")
	f.DurationVar(&syncEvery, "sync-every", 100*time.Millisecond,
		"fsync the metadata log this often (changes survive a process crash at once, a power failure after this delay or an application's fsync); 0 fsyncs every change")
	f.DurationVar(&pollNext, "poll-next", 200*time.Microsecond,
		"after a reply, poll for the next request this long before letting the CPU idle (lower latency for clients that call in a row, at the cost of that CPU time); 0 turns it off")
	f.StringVar(&fenceFile, "fence-config", "", "JSON file naming the fence agents to run against a failed storage server (see docs/ha.md)")
	f.DurationVar(&failureTimeout, "failure-timeout", 3*time.Second, "a storage server silent this long on the public network is failed over")
	f.DurationVar(&sessionTimeout, "session-timeout", 60*time.Second, "a client silent this long is gone: its locks and orphaned files go, and files it held open are no longer; a new leader judges none of that before this long")
	f.DurationVar(&ecRebuildAfter, "ec-rebuild-after", 10*time.Minute, "a storage server silent this long is retired for erasure coding: its shards are rebuilt on other targets (negative: never)")
	cmd.MarkFlagRequired("data")
	cmd.MarkFlagRequired("secret-file")
	addPprofFlag(cmd)
	addMetricsFlag(cmd)
	rootCmd.AddCommand(cmd)
}

// waitForSignal blocks until SIGINT or SIGTERM.
func waitForSignal() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	<-ch
	signal.Stop(ch)
}

// parsePeers reads --peer values of the form ID=ADDR,RAFTADDR.
func parsePeers(vals []string) ([]meta.Peer, error) {
	var out []meta.Peer
	for _, v := range vals {
		id, addrs, ok := strings.Cut(v, "=")
		addr, raftAddr, ok2 := strings.Cut(addrs, ",")
		if !ok || !ok2 || id == "" || addr == "" || raftAddr == "" {
			return nil, fmt.Errorf("--peer %q: want ID=ADDR,RAFTADDR, e.g. meta2=10.0.0.2:7100,10.0.0.2:7101", v)
		}
		out = append(out, meta.Peer{ID: id, Addr: addr, RaftAddr: raftAddr})
	}
	if n := len(out); n == 2 || n%2 == 0 && n > 0 {
		return nil, fmt.Errorf("%d metadata replicas: use an odd number (1, 3, 5) so that a majority survives a failure", n)
	}
	return out, nil
}
