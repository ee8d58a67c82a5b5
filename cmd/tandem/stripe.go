package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"tandemfs/internal/ec"
	"tandemfs/internal/fuse"
)

// Striping is read and set through virtual extended attributes that the
// TandemFS client serves, so these commands need only a path on a mount
// (as lfs and beegfs-ctl use ioctls).
// (The attribute names and the layout's JSON are the FUSE adapter's.)

func getLayout(path string) (*fuse.Layout, error) {
	buf := make([]byte, 64<<10)
	n, err := syscall.Getxattr(path, fuse.XattrLayout, buf)
	if err != nil {
		if errors.Is(err, syscall.ENODATA) || errors.Is(err, syscall.ENOTSUP) {
			return nil, fmt.Errorf("%s is not on a TandemFS mount", path)
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var l fuse.Layout
	if err := json.Unmarshal(buf[:n], &l); err != nil {
		return nil, fmt.Errorf("%s: bad layout from the client: %w", path, err)
	}
	return &l, nil
}

func init() {
	stripe := &cobra.Command{Use: "stripe", Short: "Show or set striping (chunk size, stripe count) of files and directories"}

	var chunk, ecText, domain string
	var count, replicas uint32
	set := &cobra.Command{
		Use:   "set [--chunk-size SIZE] [--count N] [--replicas R | --ec K+M [--failure-domain server]] DIR",
		Short: "Set the pattern new files in DIR (and new subdirectories) inherit",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var req struct {
				ChunkSize     uint32 `json:"chunk_size,omitempty"`
				Count         uint32 `json:"count,omitempty"`
				Replicas      uint32 `json:"replicas,omitempty"`
				EC            string `json:"ec,omitempty"`
				FailureDomain string `json:"failure_domain,omitempty"`
			}
			var scheme ec.Scheme
			if cmd.Flags().Changed("ec") {
				var err error
				if scheme, err = ec.Parse(ecText); err != nil {
					return fmt.Errorf("--ec: %w", err)
				}
				if cmd.Flags().Changed("replicas") || cmd.Flags().Changed("count") {
					return errors.New("--ec codes each file over K+M targets of its own: give it without --replicas and --count")
				}
				req.EC = scheme.String()
				req.FailureDomain = domain
			} else if cmd.Flags().Changed("failure-domain") {
				return errors.New("--failure-domain goes with --ec")
			}
			if domain != "server" && domain != "rack" {
				return fmt.Errorf("--failure-domain %q: give server or rack", domain)
			}
			if cmd.Flags().Changed("chunk-size") {
				cs, err := parseSize(chunk)
				if err != nil {
					return fmt.Errorf("--chunk-size: %w", err)
				}
				if cs == 0 || cs > 1<<31 {
					return fmt.Errorf("--chunk-size %s is out of range", chunk)
				}
				req.ChunkSize = uint32(cs)
			}
			if cmd.Flags().Changed("count") {
				if count == 0 {
					return errors.New("--count must be at least 1")
				}
				req.Count = count
			}
			if cmd.Flags().Changed("replicas") {
				if replicas < 1 || replicas > 3 {
					return fmt.Errorf("--replicas %d: give 1, 2 or 3 copies", replicas)
				}
				req.Replicas = replicas
			}
			if req.ChunkSize == 0 && req.Count == 0 && req.Replicas == 0 && req.EC == "" {
				return errors.New("nothing to set: give --chunk-size, --count, --replicas or --ec")
			}
			if fi, err := os.Stat(args[0]); err != nil {
				return err
			} else if !fi.IsDir() {
				return fmt.Errorf("%s is not a directory (patterns are set on directories)", args[0])
			}
			// Only a TandemFS client answers for its layout attribute;
			// elsewhere the pattern would land as a plain attribute.
			before, err := getLayout(args[0])
			if err != nil {
				return err
			}
			if req.EC != "" {
				if err := ecPlaceable(scheme, domain, before); err != nil {
					return fmt.Errorf("%s: %w", args[0], err)
				}
			}
			b, _ := json.Marshal(req)
			if err := syscall.Setxattr(args[0], fuse.XattrStripe, b, 0); err != nil {
				if errors.Is(err, syscall.EINVAL) {
					return fmt.Errorf("%s: invalid pattern (chunk size must be a power of two from 64K to 4M; erasure coding needs a server with targets per shard)", args[0])
				}
				return fmt.Errorf("%s: %w", args[0], err)
			}
			l, err := getLayout(args[0])
			if err != nil {
				return err
			}
			if short := newFilesShort(l); short != "" && (req.Count > 0 || req.Replicas > 0) {
				fmt.Fprintf(os.Stderr, "%s: %s\n", args[0], short)
			}
			return nil
		},
	}
	set.Flags().StringVar(&chunk, "chunk-size", "", "chunk size, a power of two from 64K to 4M (e.g. 512K, 2M)")
	set.Flags().Uint32Var(&count, "count", 0, "number of targets a file is striped over")
	set.Flags().Uint32Var(&replicas, "replicas", 0, "copies of each chunk, on different servers: 1, 2 or 3 (default 2 when the cluster has 2 servers or more); turns erasure coding off for new files")
	set.Flags().StringVar(&ecText, "ec", "", "erasure code new files: K data and M parity shards per stripe (K 2-16, M 1-4; e.g. 4+2, 8+2, 8+3), each shard on a server of its own")
	set.Flags().StringVar(&domain, "failure-domain", "server", "what the shards of a stripe are spread over: server or rack")

	var asJSON bool
	get := &cobra.Command{
		Use:   "get [--json] PATH",
		Short: "Show the pattern of a directory, or the pattern and targets of a file",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := getLayout(args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(os.Stdout).Encode(l)
			}
			fmt.Printf("path:       %s\n", args[0])
			fmt.Printf("chunk size: %s\n", humanBytes(uint64(l.ChunkSize)))
			fmt.Printf("count:      %d\n", l.Count)
			if l.Inline {
				fmt.Println("data:       inline in the metadata (small file)")
			} else if len(l.Targets) > 0 {
				ts := make([]string, len(l.Targets))
				for i, t := range l.Targets {
					ts[i] = fmt.Sprint(t)
				}
				fmt.Printf("targets:    %s\n", strings.Join(ts, ", "))
			}
			if l.Replicas > 0 {
				fmt.Printf("replicas:   %d\n", l.Replicas)
			}
			if l.EC != nil {
				fmt.Printf("erasure coding: %d+%d, one shard per %s\n", l.EC.Data, l.EC.Parity, l.EC.FailureDomain)
				for _, sh := range l.EC.Shards {
					rack := ""
					if sh.Rack != "" {
						rack = ", rack " + sh.Rack
					}
					fmt.Printf("shard %-3d %-6s target %d on server %d (%s%s)\n", sh.Shard, sh.Kind, sh.Target, sh.Server, sh.Addr, rack)
				}
			}
			if short := newFilesShort(l); short != "" {
				fmt.Printf("note:       %s\n", short)
			}
			for _, c := range l.Copies {
				ms := make([]string, len(c.Targets))
				for i, t := range c.Targets {
					ms[i] = fmt.Sprintf("%d (%s)", t, c.States[i])
				}
				fmt.Printf("chain %-4d  %s\n", c.Chain, strings.Join(ms, ", "))
			}
			return nil
		},
	}
	get.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	stripe.AddCommand(set, get)
	rootCmd.AddCommand(stripe)
}

// newFilesShort says what new files in a directory get when the cluster
// has fewer chains, or fewer copies, than its pattern asks for; "" when
// they get what it asks. A pattern without a replication factor asks for
// the default, which is what the cluster has.
func newFilesShort(l *fuse.Layout) string {
	if l.NewFileCount == 0 {
		return "" // a file, or a cluster without targets yet
	}
	if l.NewFileCount >= l.Count && (l.Replicas == 0 || l.NewFileReplicas >= l.Replicas) {
		return ""
	}
	return fmt.Sprintf("the pattern asks for %d stripes, but new files get %d stripes of %d copies: the cluster has no more chains of that many copies (until more targets join)",
		l.Count, l.NewFileCount, l.NewFileReplicas)
}

// ecPlaceable says why a directory's cluster cannot place scheme's shards
// one per failure domain, before the pattern is set.
func ecPlaceable(scheme ec.Scheme, domain string, dir *fuse.Layout) error {
	if domain == "rack" {
		if dir.Racks < scheme.Shards() {
			return fmt.Errorf("--ec %s --failure-domain rack puts each of its %d shards in a rack of its own; the cluster has %d racks with targets (tandem storage --rack; a server without a label is a rack of its own)",
				scheme, scheme.Shards(), dir.Racks)
		}
		return nil
	}
	if dir.Servers < scheme.Shards() {
		return fmt.Errorf("--ec %s puts each of its %d shards on a server of its own; the cluster has %d servers with targets", scheme, scheme.Shards(), dir.Servers)
	}
	return nil
}
