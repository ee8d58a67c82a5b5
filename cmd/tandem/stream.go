package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"tandemfs/internal/stream"
)

func init() { rootCmd.AddCommand(newStreamCmd()) }

// usageError marks err as the caller's mistake: exit status 2, as for cmp
// and diff, so that scripts can tell "the data is bad" (1) from "the check
// could not be run" (2).
func usageError(err error) error { return &exitError{code: 2, err: err} }

// newStreamCmd builds the command tree afresh each time, so tests can run it
// with their own flags without inheriting another run's.
func newStreamCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "stream",
		Short: "Generate and check self-verifying data streams (genstream/checkstream)",
		Long: `Generate and check self-verifying data streams, to prove that no data is lost
while a server fails over: copy a generated stream into the file system (or
out of it) with dd while a server fails, then check the copy.

  tandem stream gen --size 10G -o /mnt/tandem/stream.10G
  dd if=/mnt/tandem/stream.10G of=/tmp/copy bs=1M     # fail a server meanwhile
  tandem stream check /tmp/copy

Every 4 KiB block names its stream and offset, so the check needs only the
copy. Exit status of check: 0 if the copy is exactly the stream, 1 if any
data is wrong, 2 if the check could not be run.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError(fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath()))
			}
			return cmd.Help()
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(err) })
	cmd.AddCommand(newStreamGenCmd(), newStreamCheckCmd())
	return cmd
}

func newStreamGenCmd() *cobra.Command {
	var sizeFlag, seedFlag, output string
	var fsync bool
	cmd := &cobra.Command{
		Use:   "gen --size SIZE [-o FILE] [--seed N]",
		Short: "Write a deterministic, self-describing stream",
		Long: `Write a deterministic stream of --size bytes to FILE or to standard output.
Each 4 KiB block starts with a text header naming the stream's seed, the
block's offset and the stream's length, followed by pseudo-random data
derived from them. The seed defaults to one derived from the output's name
and the size, so the same command writes the same bytes; it is printed on
standard error. Sizes take binary units: 4096, 64k, 10G, 1TiB.

Exit status: 0 on success, 1 if writing failed, 2 on a usage error.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError(fmt.Errorf("gen takes no arguments (got %q); use -o FILE to name the output", args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("size") {
				return usageError(errors.New("gen needs --size, e.g. --size 10G"))
			}
			size, err := stream.ParseSize(sizeFlag)
			if err != nil {
				return usageError(err)
			}
			name := output
			if output == "" {
				name = "-"
			}
			seed := stream.DefaultSeed(filepath.Base(name), size)
			if cmd.Flags().Changed("seed") {
				if seed, err = stream.ParseSeed(seedFlag); err != nil {
					return usageError(err)
				}
			}
			return runGen(cmd.OutOrStdout(), cmd.ErrOrStderr(), name, stream.NewGenerator(seed, size), fsync)
		},
	}
	f := cmd.Flags()
	f.StringVar(&sizeFlag, "size", "", "stream length: bytes, or with a binary unit k, m, g, t (required)")
	f.StringVar(&seedFlag, "seed", "", "stream seed, decimal or 0x-hex (default: derived from the output name and size)")
	f.StringVarP(&output, "output", "o", "", "file to write (default: standard output)")
	f.BoolVar(&fsync, "fsync", false, "fsync the output file before exiting, so that success means the data is stable")
	return cmd
}

func runGen(stdout, stderr io.Writer, name string, g *stream.Generator, fsync bool) error {
	fmt.Fprintf(stderr, "tandem stream gen: seed %v, %d bytes (%s) to %s\n", g.Seed(), g.Size(), stream.FormatSize(g.Size()), name)
	start := time.Now()
	var err error
	if name == "-" {
		if f, ok := stdout.(*os.File); ok {
			stream.GrowPipe(f)
		}
		_, err = g.WriteTo(stdout)
	} else {
		err = writeFile(name, g, fsync)
	}
	if err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	fmt.Fprintf(stderr, "tandem stream gen: wrote %d bytes in %.3f seconds (%.0f MiB/s)\n",
		g.Size(), secs, float64(g.Size())/(1<<20)/max(secs, 1e-9))
	return nil
}

func writeFile(name string, g *stream.Generator, fsync bool) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if _, err := g.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	if fsync {
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

func newStreamCheckCmd() *cobra.Command {
	var sizeFlag, seedFlag string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "check [FILE|-] [--size SIZE] [--seed N] [--json]",
		Short: "Check a copy of a stream and summarise what is wrong with it",
		Long: `Read a copy of a stream from FILE (or standard input, given "-" or nothing)
and report, like checkstream, the valid extents, zero-filled ranges (holes
left by lost writes), corrupt ranges and why, blocks that landed at the
wrong offset or came from another stream, and a missing or extra tail.

The seed and length come from the first valid header; --seed and --size
make them expectations instead (--size also decides what is missing or
extra). --json prints the report as JSON for scripts.

Exit status: 0 if the copy is exactly the stream, 1 if any data is wrong,
2 if the check could not be run (usage, or the copy could not be read).`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageError(fmt.Errorf("check takes one file at most (got %d)", len(args)))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			var opts stream.CheckOptions
			var err error
			if cmd.Flags().Changed("size") {
				if opts.Size, err = stream.ParseSize(sizeFlag); err != nil {
					return usageError(err)
				}
				opts.SizeKnown = true
			}
			if cmd.Flags().Changed("seed") {
				if opts.Seed, err = stream.ParseSeed(seedFlag); err != nil {
					return usageError(err)
				}
				opts.SeedKnown = true
			}
			name := "-"
			if len(args) == 1 {
				name = args[0]
			}
			in := cmd.InOrStdin()
			if f, ok := in.(*os.File); ok && name == "-" {
				stream.GrowPipe(f)
			}
			if name != "-" {
				f, err := os.Open(name)
				if err != nil {
					return usageError(err)
				}
				defer f.Close()
				in = f
			}
			return runCheck(cmd.OutOrStdout(), in, name, opts, asJSON)
		},
	}
	f := cmd.Flags()
	f.StringVar(&sizeFlag, "size", "", "expected length (default: as recorded in the stream)")
	f.StringVar(&seedFlag, "seed", "", "expected seed, decimal or 0x-hex (default: as found in the stream)")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

func runCheck(stdout io.Writer, in io.Reader, name string, opts stream.CheckOptions, asJSON bool) error {
	c := stream.NewChecker(opts)
	// Read in large chunks ourselves: io.Copy from an *os.File would use
	// its 32 KiB default buffer.
	buf := make([]byte, 1<<20)
	var readErr error
	var offset int64
	for {
		n, err := in.Read(buf)
		c.Write(buf[:n])
		offset += int64(n)
		if err == io.EOF {
			break
		}
		if err != nil {
			readErr = fmt.Errorf("reading %s at offset %d: %w", name, offset, err)
			break
		}
	}
	r := c.Report()
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			File string `json:"file"`
			*stream.Report
		}{name, r}); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(stdout, "tandem stream check: %s\n", name)
		if err := r.WriteText(stdout); err != nil {
			return err
		}
	}
	switch {
	case readErr != nil:
		// The report covers what could be read; the rest is unknown.
		return &exitError{code: 2, err: readErr}
	case !r.OK:
		return &exitError{code: 1, err: fmt.Errorf("%s: %d errors", name, r.Errors)}
	}
	return nil
}
