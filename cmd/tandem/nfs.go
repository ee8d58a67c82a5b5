package main

import (
	"context"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"tandemfs/internal/client"
	"tandemfs/internal/nfs"
	"tandemfs/internal/nfsha"
	"tandemfs/internal/rpc"
)

func init() {
	var metaAddr, secretFile, listen, exportsFile, headID, headAddr, iface, memCacheSize string
	var exportLines, services []string
	var giveUp, lease, pollNext time.Duration
	var prefix int
	cmd := &cobra.Command{
		Use:   "nfs --meta ADDR --secret-file FILE --listen ADDR (--export 'PATH CLIENT(OPTIONS)' ... | --exports FILE)",
		Short: "Serve TandemFS over NFSv3 (MOUNT and NFS on one TCP port)",
		Long: `Run an NFS gateway in the foreground until SIGTERM or SIGINT.

The gateway is a TandemFS client: it talks to the metadata service and the
storage targets directly. MOUNT and NFS version 3 share one TCP port, so
clients need no portmapper (libnfs: nfs://HOST/PATH?version=3&nfsport=P&mountport=P);
the programs are also registered with rpcbind if one runs on this host.

Exports are lines in /etc/exports form, paths in the TandemFS namespace:
  / 10.0.0.0/8(rw,root_squash) 192.168.1.5(ro)
  /scratch *(rw,all_squash,anonuid=1000,anongid=1000)
Options: rw, ro (default), root_squash (default), no_root_squash, all_squash,
anonuid=N, anongid=N (default 65534), secure (source port below 1024),
insecure (default), sync (always). async is refused.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			exports, err := nfsExports(exportLines, exportsFile)
			if err != nil {
				return &exitError{2, err}
			}
			secret, err := rpc.ReadSecretFile(secretFile)
			if err != nil {
				return err
			}
			logger := log.New(os.Stderr, "nfs: ", log.LstdFlags|log.Lmicroseconds)
			if len(services) > 0 && headID == "" {
				return &exitError{2, fmt.Errorf("nfs: --service needs --head (this head's ID, unique among the heads)")}
			}
			if len(services) == 0 && headID != "" {
				return &exitError{2, fmt.Errorf("nfs: --head needs at least one --service address to hold")}
			}
			cacheBytes, err := blockCacheSetting(memCacheSize)
			if err != nil {
				return &exitError{2, fmt.Errorf("nfs: %w", err)}
			}
			// The gateway is its clients' server: what they wrote is
			// read back from its memory, as from a server's page cache.
			c, err := client.New(client.Config{MetaAddr: metaAddr, Secret: secret, Logf: logger.Printf, GiveUp: giveUpSetting(giveUp),
				BlockCacheBytes: cacheBytes, CacheWrites: true, PrefaultBlockCache: true})
			if err != nil {
				return err
			}
			defer c.Close()
			c.ExportMetrics() // its block cache and metadata calls, beside the gateway's own
			if pollNext < 0 {
				return &exitError{2, fmt.Errorf("nfs: --poll-next %v: want 0 (off) or a positive duration such as 200us", pollNext)}
			}
			srv, err := nfs.New(nfs.Config{Client: c, Secret: secret, Exports: exports, Logf: logger.Printf, PollNext: pollNext})
			if err != nil {
				return &exitError{2, err}
			}
			if len(services) > 0 {
				return runHead(c, srv, logger, haSettings{head: headID, headAddr: headAddr, services: services,
					iface: iface, prefix: prefix, lease: lease})
			}
			l, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("nfs: listen on %s: %w", listen, err)
			}
			port := l.Addr().(*net.TCPAddr).Port
			if err := nfs.RegisterWithRpcbind(port); err != nil {
				logger.Printf("not registered with rpcbind (%v); clients give the port: nfsport=%d,mountport=%d", err, port, port)
			} else {
				defer nfs.UnregisterFromRpcbind()
				logger.Printf("registered NFS 3 and MOUNT 3 on port %d with rpcbind", port)
			}
			for _, e := range exports {
				logger.Printf("exporting %s", e.Path)
			}
			logger.Printf("serving NFSv3 on %s (metadata service %s)", l.Addr(), metaAddr)
			go func() {
				signals := make(chan os.Signal, 1)
				signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
				<-signals
				logger.Printf("stopping: flushing the files held open")
				srv.Close()
			}()
			return srv.Serve(l)
		},
	}
	f := cmd.Flags()
	f.StringVar(&metaAddr, "meta", "127.0.0.1:7100", "metadata service address, or the addresses of all replicas (comma-separated)")
	f.StringVar(&secretFile, "secret-file", "", "cluster secret file (required)")
	f.StringVar(&listen, "listen", ":2049", "TCP address to serve MOUNT and NFS on")
	f.StringArrayVar(&exportLines, "export", nil, "an export, as a line of /etc/exports: 'PATH CLIENT(OPTIONS) ...' (repeatable)")
	f.StringVar(&exportsFile, "exports", "", "a file of exports, in /etc/exports form")
	f.StringVar(&headID, "head", "", "this head's ID, for a highly available gateway: the heads of one gateway hold its --service addresses by leases from the metadata service, one head per address")
	f.StringArrayVar(&services, "service", nil, "a service address (IP:PORT) the head serves while it holds its lease (repeatable; with --head)")
	f.StringVar(&iface, "interface", "", "the interface the service addresses are added to and announced on with gratuitous ARP (\"\": they are local already)")
	f.IntVar(&prefix, "prefix", 0, "the prefix length of the service addresses on --interface (default: a host address)")
	f.DurationVar(&lease, "lease", nfsha.DefaultLease, "how long a lease lasts; a failed head's addresses move after at most this and a poll")
	f.StringVar(&headAddr, "head-addr", "", "how an administrator reaches this head, for tandem status (default: the host name)")
	f.DurationVar(&pollNext, "poll-next", 200*time.Microsecond,
		"after a reply, poll for the next request this long before letting the CPU idle (lower latency for clients that call in a row, at the cost of that CPU time); 0 turns it off")
	f.StringVar(&memCacheSize, "mem-cache-size", "512M", "memory for the block cache, which keeps what clients write and read back (as a server's page cache does), taken at start; 0 turns it off")
	f.DurationVar(&giveUp, "give-up", 0, "how long a request waits for an unreachable service before failing with EIO; 0 waits forever (clients of a hard mount retry anyway)")
	cmd.MarkFlagRequired("secret-file")
	addPprofFlag(cmd)
	addMetricsFlag(cmd)
	rootCmd.AddCommand(cmd)
}

// nfsExports gathers the exports of --export and --exports.
func nfsExports(lines []string, file string) ([]nfs.Export, error) {
	var exports []nfs.Export
	if file != "" {
		fromFile, err := nfs.ParseExports(file)
		if err != nil {
			return nil, err
		}
		exports = fromFile
	}
	for _, line := range lines {
		e, err := nfs.ParseExport(line)
		if err != nil {
			return nil, fmt.Errorf("--export: %w", err)
		}
		exports = append(exports, e)
	}
	if len(exports) == 0 {
		return nil, fmt.Errorf("nfs: nothing to export: give --export 'PATH CLIENT(OPTIONS)' or --exports FILE")
	}
	return exports, nil
}

// haSettings are the flags of a highly available head.
type haSettings struct {
	head, headAddr string
	services       []string
	iface          string
	prefix         int
	lease          time.Duration
}

// runHead serves the service addresses this head holds leases on, until
// SIGTERM or SIGINT, and then gives the leases back.
func runHead(c *client.Client, srv *nfs.Server, logger *log.Logger, ha haSettings) error {
	if ha.headAddr == "" {
		ha.headAddr, _ = os.Hostname()
	}
	var svcs []nfsha.Service
	for _, a := range ha.services {
		if host, _, err := net.SplitHostPort(a); err != nil || net.ParseIP(host) == nil {
			return &exitError{2, fmt.Errorf("nfs: --service %q: want IP:PORT (the address moves between heads; a host name cannot)", a)}
		}
		svcs = append(svcs, nfsha.Service{Address: a, Interface: ha.iface, Prefix: ha.prefix})
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	logger.Printf("head %s: asking for %v (lease %v)", ha.head, ha.services, ha.lease)
	err := nfsha.Run(ctx, nfsha.Config{Head: ha.head, HeadAddr: ha.headAddr, Client: c, Services: svcs, Lease: ha.lease,
		Logf: logger.Printf,
		Serve: func(svc nfsha.Service, l net.Listener, valid func() bool, connected func()) nfsha.Serving {
			return srv.ServeAddress(l, valid, connected)
		}})
	logger.Printf("stopping: flushing the files held open")
	srv.Close()
	return err
}
