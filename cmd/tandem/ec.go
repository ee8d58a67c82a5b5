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
			files, err := regularFiles(args)
			if err != nil {
				return err
			}
			return repairFiles(c, files, verify, os.Stdout)
		},
	}
	repair.Flags().BoolVar(&verify, "verify", false, "also read every shard and check parity")
	cf.add(repair)
	ecCmd.AddCommand(repair)
	rootCmd.AddCommand(ecCmd)
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
