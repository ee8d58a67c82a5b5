package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"tandemfs/internal/client"
	"tandemfs/internal/ec"
	"tandemfs/internal/proto"
)

// `tandem ec`: erasure-coded files (docs/architecture.md, "Erasure coding").

func init() {
	ecCmd := &cobra.Command{Use: "ec", Short: "Erasure-coded files: repair"}
	var cf connectFlags
	var verify bool
	repair := &cobra.Command{
		Use:   "repair [--verify] [--data DIR | --meta ADDR --secret-file F] PATH...",
		Short: "Rebuild the missing shards of erasure-coded files under PATH (a file or a directory on a mount)",
		Long: `Check every stripe of each erasure-coded file under the paths, and rebuild
the shards that were not written (their target did not answer when the stripe
was written), that are absent or short on their target (a replaced disk), and,
with --verify, that disagree with the other shards of their stripe (every shard
is read and parity checked; with one parity shard a disagreement is found but
not placed, so it is reported and nothing is rewritten). Rebuilt shards go back
to their own targets. Files
that are copied, not coded, are passed over. Shards whose target does not answer
are counted and left for a later run.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return onFiles(cf, args, func(c *client.Client, files []ecFile) error {
				return repairFiles(c, files, verify, os.Stdout)
			})
		},
	}
	repair.Flags().BoolVar(&verify, "verify", false, "also read every shard and check parity")
	cf.add(repair)
	ecCmd.AddCommand(repair, convertCommand())
	rootCmd.AddCommand(ecCmd)
}

// convertCommand is `tandem ec convert`.
func convertCommand() *cobra.Command {
	var cf connectFlags
	var ecText, domain string
	var replicas uint32
	cmd := &cobra.Command{
		Use:   "convert (--ec K+M [--failure-domain server|rack] | --replicas N) [--data DIR | --meta ADDR --secret-file F] PATH...",
		Short: "Convert files under PATH between copies and erasure coding, online",
		Long: `Rewrite each regular file under the paths (a file, or a directory walked
whole) in a new layout: erasure coded K+M (--ec), or N copies (--replicas).
The new layout is written beside the old one and swapped in with one metadata
command, so that a reader sees the old layout or the new one, never a mix; the
old layout's chunks are deleted once no client holds the file open. A file open
for writing anywhere is refused with the reason; a writer that comes along
during a conversion aborts it, and the conversion starts again (three times at
most). A file small enough to be kept inline in the metadata stays there: its
conversion changes the layout it takes if it grows out of it.
The directory's pattern for new files is not changed: "tandem stripe set" does that.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			want, err := convertPattern(cmd, ecText, domain, replicas)
			if err != nil {
				return err
			}
			return onFiles(cf, args, func(c *client.Client, files []ecFile) error {
				return convertFiles(c, files, want, os.Stdout)
			})
		},
	}
	cmd.Flags().StringVar(&ecText, "ec", "", "erasure code the files K+M (e.g. 4+2, 8+2)")
	cmd.Flags().StringVar(&domain, "failure-domain", "server", "with --ec: each shard on a server (or a rack) of its own")
	cmd.Flags().Uint32Var(&replicas, "replicas", 0, "keep N copies of the files (1, 2 or 3)")
	cf.add(cmd)
	return cmd
}

// convertPattern is the layout the flags ask for.
func convertPattern(cmd *cobra.Command, ecText, domain string, replicas uint32) (proto.Stripe, error) {
	var want proto.Stripe
	switch {
	case cmd.Flags().Changed("ec") && cmd.Flags().Changed("replicas"):
		return want, errors.New("give --ec or --replicas, not both")
	case cmd.Flags().Changed("ec"):
		scheme, err := ec.Parse(ecText)
		if err != nil {
			return want, fmt.Errorf("--ec: %w", err)
		}
		want.EC = proto.ECPattern{Data: uint8(scheme.Data), Parity: uint8(scheme.Parity)}
		switch domain {
		case "server":
		case "rack":
			want.EC.Domain = proto.DomainRack
		default:
			return want, fmt.Errorf("--failure-domain %q: give server or rack", domain)
		}
	case cmd.Flags().Changed("failure-domain"):
		return want, errors.New("--failure-domain goes with --ec")
	case cmd.Flags().Changed("replicas"):
		if replicas < 1 || replicas > 3 {
			return want, fmt.Errorf("--replicas %d: give 1, 2 or 3 copies", replicas)
		}
		want.Replicas = replicas
	default:
		return want, errors.New("give the layout to convert to: --ec K+M or --replicas N")
	}
	return want, nil
}

// convertFiles converts each file, with a progress line per file
// (percent of the bytes, rate, time left) and a summary.
func convertFiles(c *client.Client, files []ecFile, want proto.Stripe, w io.Writer) error {
	start := time.Now()
	var copied uint64
	converted, inline, skipped := 0, 0, 0
	var errs []error
	for i, f := range files {
		var last time.Time
		n, err := c.Convert(f.ino, want, func(done, size uint64) {
			if time.Since(last) < time.Second && done < size {
				return
			}
			last = time.Now()
			elapsed := time.Since(start).Seconds()
			rate := float64(copied+done) / max(elapsed, 0.001)
			left := time.Duration(float64(size-done) / max(rate, 1) * float64(time.Second))
			fmt.Fprintf(w, "%3d%%  %s  %s of %s  %s/s  %s left in this file\n", done*100/max(size, 1), f.path,
				humanBytes(done), humanBytes(size), humanBytes(uint64(rate)), left.Round(time.Second))
		})
		switch {
		case errors.Is(err, syscall.EALREADY):
			skipped++
			continue
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", f.path, err))
			continue
		}
		converted++
		kept := ""
		if n.Inline {
			inline++
			kept = ", kept inline in the metadata: the layout for its growth"
		} else {
			copied += n.Size
		}
		fmt.Fprintf(w, "done  %s (%d of %d files%s)\n", f.path, i+1, len(files), kept)
	}
	fmt.Fprintf(w, "\nconverted %d files (%s copied, %d kept inline) in %s; %d already in that layout\n", converted, humanBytes(copied),
		inline, time.Since(start).Round(time.Millisecond), skipped)
	return errors.Join(errs...)
}

// onFiles runs fn with a client of the cluster cf names and the regular
// files under paths.
func onFiles(cf connectFlags, paths []string, fn func(c *client.Client, files []ecFile) error) error {
	addr, secret, err := cf.resolve()
	if err != nil {
		return cf.explain(err)
	}
	c, err := client.New(client.Config{MetaAddr: addr, Secret: secret, GiveUp: 30 * time.Second,
		Logf: func(string, ...any) {}})
	if err != nil {
		return err
	}
	defer c.Close()
	files, err := regularFiles(paths)
	if err != nil {
		return err
	}
	return fn(c, files)
}

// ecFile is a regular file found under the paths, by inode number.
type ecFile struct {
	path string
	ino  uint64
}

// regularFiles lists the regular files under paths (each a file or a
// directory walked whole).
func regularFiles(paths []string) ([]ecFile, error) {
	var out []ecFile
	for _, p := range paths {
		err := filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.Type().IsRegular() {
				return nil
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			out = append(out, ecFile{path, fi.Sys().(*syscall.Stat_t).Ino})
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// repairFiles repairs each coded file, with a progress line per file
// (percent of files, rebuilt bytes and rate, time left) and a total.
func repairFiles(c *client.Client, files []ecFile, verify bool, w io.Writer) error {
	var total client.ECRepairStats
	start := time.Now()
	coded := 0
	var errs []error
	for i, f := range files {
		st, err := c.RepairEC(f.ino, verify)
		if errors.Is(err, syscall.EINVAL) {
			continue // copied, not coded
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f.path, err))
			continue
		}
		coded++
		total.Stripes += st.Stripes
		total.Missing += st.Missing
		total.Mismatched += st.Mismatched
		total.Rebuilt += st.Rebuilt
		total.RebuiltBytes += st.RebuiltBytes
		total.Unreachable += st.Unreachable
		total.StripesSkipped += st.StripesSkipped
		if st.UnrecoverableErr != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f.path, st.UnrecoverableErr))
		}
		done := i + 1
		elapsed := time.Since(start)
		left := time.Duration(float64(elapsed) / float64(done) * float64(len(files)-done))
		fmt.Fprintf(w, "%3d%%  %s: %d stripes, %d shards rebuilt (%s)  %s/s  %s left\n",
			done*100/len(files), f.path, st.Stripes, st.Rebuilt, humanBytes(st.RebuiltBytes),
			humanBytes(uint64(float64(total.RebuiltBytes)/max(elapsed.Seconds(), 0.001))), left.Round(time.Second))
	}
	fmt.Fprintf(w, "\nFILES  STRIPES  MISSING  MISMATCHED  REBUILT  BYTES       UNREACHABLE  REWRITTEN MEANWHILE\n")
	fmt.Fprintf(w, "%-6d %-8d %-8d %-11d %-8d %-11s %-12d %d\n", coded, total.Stripes, total.Missing, total.Mismatched,
		total.Rebuilt, humanBytes(total.RebuiltBytes), total.Unreachable, total.StripesSkipped)
	if total.Unreachable > 0 {
		errs = append(errs, fmt.Errorf("%d shards are on targets that do not answer: run again when they are back", total.Unreachable))
	}
	return errors.Join(errs...)
}
