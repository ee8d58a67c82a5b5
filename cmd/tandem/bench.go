package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"tandemfs/internal/bench"
	"tandemfs/internal/rpc"
)

func init() { rootCmd.AddCommand(newBenchCmd()) }

// benchUsage marks a mistake in the command line: exit status 2, so that a
// script can tell it from a failed measurement (1).
func benchUsage(err error) error { return &exitError{code: 2, err: err} }

// newBenchCmd builds the command tree afresh each time, so tests can run
// it with their own flags without inheriting another run's.
func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Run the white papers' IOzone and mdtest benchmarks on any directory",
		Long: `Run the Dell white papers' benchmark methods on any directory (a TandemFS
mount, a local disk, another file system's mount), from this host or from
agents on several client hosts:

  seq      iozone -i0 -i1 -c -e -w -r 1M -s SIZE -t THREADS    (MB/s)
  rand     iozone -i2 -w -c -O -I -r 4K -s SIZE -t THREADS     (IOPS)
  meta     mdtest -F -L -u -y -z D -b B -I N [-w S -e S]       (ops/s)
  compare  the same suite on several directories, side by side
  nfs      an NFSv3 server: random 4 KiB reads and stable writes, creates
  agent    serve a driver's workers on a client host

Exit status: 0 when everything was measured, 1 when a run failed (the
others are still reported), 2 on a usage error.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return benchUsage(err) })
	cmd.AddCommand(newBenchTestCmd(bench.TestSeq), newBenchTestCmd(bench.TestRand),
		newBenchTestCmd(bench.TestMeta), newBenchCompareCmd(), newBenchAgentCmd(), newBenchNFSCmd())
	return cmd
}

func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return benchUsage(fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath()))
	}
	return nil
}

// benchFlags are the flag values of every bench command but agent.
type benchFlags struct {
	threads, agents, report, label string
	secretFile                     string
	json, keep, dropCaches         bool
	timeout                        time.Duration
	seed                           uint64

	seqSize, seqRecord   string
	randSize, randRecord string
	duration             time.Duration
	ops                  uint64
	direct               bool

	files, items, branch, depth int
	fileSizes                   string
	fsync                       bool
}

func (f *benchFlags) addCommon(fs *pflag.FlagSet) {
	fs.StringVar(&f.threads, "threads", "1,2", "thread counts to sweep, total over all agents (e.g. 1,2,4,8)")
	fs.StringVar(&f.agents, "agents", "", "run the workers on these agents (host:port,host:port), each in the same directory path")
	fs.StringVar(&f.secretFile, "secret-file", "", "secret shared with the agents (mode 0600; e.g. the cluster secret)")
	fs.BoolVar(&f.json, "json", false, "print the results as JSON (parameters, figures, equivalent commands) instead of a table")
	fs.StringVar(&f.report, "report", "", "also write an HTML report with charts to `FILE.html` (and the charts as FILE-*.svg/png)")
	fs.BoolVar(&f.keep, "keep", false, "keep the benchmark files instead of removing them")
	fs.BoolVar(&f.dropCaches, "drop-caches", true, "drop the page cache before read phases (needs root; with agents, on every client)")
	fs.DurationVar(&f.timeout, "timeout", time.Hour, "give up on an agent that takes longer than this for one phase")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the random offsets")
}

// addSeq, addRand and addMeta take a prefix for compare, which has the
// flags of every test at once and must tell seq's --size from rand's.
func (f *benchFlags) addSeq(fs *pflag.FlagSet, prefix string) {
	fs.StringVar(&f.seqSize, prefix+"size", "2G", "total data over all threads (iozone -s × -t), split evenly")
	fs.StringVar(&f.seqRecord, prefix+"record", "1M", "record size (iozone -r)")
}

func (f *benchFlags) addRand(fs *pflag.FlagSet, prefix string) {
	fs.StringVar(&f.randSize, prefix+"size", "1G", "file size per thread (iozone -s)")
	fs.StringVar(&f.randRecord, prefix+"record", "4K", "record size (iozone -r)")
	fs.DurationVar(&f.duration, "duration", 15*time.Second, "length of the random write phase and of the read phase")
	fs.Uint64Var(&f.ops, "ops", 0, "operations per thread and phase instead of --duration")
	fs.BoolVar(&f.direct, "direct", true, "use O_DIRECT (iozone -I); falls back to buffered with a note if refused")
}

func (f *benchFlags) addMeta(fs *pflag.FlagSet, fileSizes string) {
	fs.IntVar(&f.files, "files", 8192, "total files over all threads, fixed over a sweep (sets -b and -I unless --branch is given)")
	fs.IntVar(&f.items, "items", 1024, "files per leaf directory (mdtest -I), at most")
	fs.IntVar(&f.branch, "branch", 0, "directories per tree level (mdtest -b); 0 derives it from --files")
	fs.IntVar(&f.depth, "depth", 1, "tree depth (mdtest -z)")
	fs.StringVar(&f.fileSizes, "file-size", fileSizes, "bytes written and read per file (mdtest -w/-e); a list runs each, e.g. 0,3K")
	fs.BoolVar(&f.fsync, "fsync", true, "fsync each file after writing it (mdtest -y)")
}

func newBenchTestCmd(test string) *cobra.Command {
	f := &benchFlags{}
	cmd := &cobra.Command{
		Use:   test + " DIR",
		Short: benchShort[test],
		Long:  benchShort[test] + ".\n\n" + benchLong[test],
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return benchUsage(fmt.Errorf("%s needs exactly one directory (got %d arguments)", test, len(args)))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			label := cmp.Or(f.label, args[0])
			return runBench(cmd, f, []string{test}, []bench.System{{Label: label, Dir: args[0]}})
		},
	}
	f.addCommon(cmd.Flags())
	cmd.Flags().StringVar(&f.label, "label", "", "name of the system in the table and charts (default DIR)")
	switch test {
	case bench.TestSeq:
		f.addSeq(cmd.Flags(), "")
	case bench.TestRand:
		f.addRand(cmd.Flags(), "")
	case bench.TestMeta:
		f.addMeta(cmd.Flags(), "0")
	}
	return cmd
}

var benchShort = map[string]string{
	bench.TestSeq:  "Sequential N-to-N write and read throughput, like iozone -i0 -i1 -c -e -r 1M",
	bench.TestRand: "Random 4 KiB write and read IOPS with O_DIRECT, like iozone -i2 -I -O -r 4K",
	bench.TestMeta: "File create, stat, read and remove rates, like mdtest -F -L -u -y",
}

var benchLong = map[string]string{
	bench.TestSeq: `Each thread writes its own file in --record pieces, then fsyncs and closes
it (all timed), then reads it back after the page cache is dropped. The
--size total is split over the threads, as the papers keep it fixed.`,
	bench.TestRand: `Each thread's --size file is laid out first (untimed), then each thread
writes, and after a cache drop reads, --record pieces at random aligned
offsets for --duration (or --ops operations), with O_DIRECT.`,
	bench.TestMeta: `Each thread gets its own tree (-u) of --depth levels of --branch
directories and creates --items files in each leaf (-L), then stats, reads
and removes them, with a barrier between phases. Rates are the total
operations over the slowest thread's time, as mdtest reports them.`,
}

func newBenchCompareCmd() *cobra.Command {
	f := &benchFlags{}
	var labels []string
	var tests string
	cmd := &cobra.Command{
		Use:   "compare --label NAME=DIR [--label NAME=DIR ...]",
		Short: "Run the same suite on several directories and compare them",
		Long: `Run the same tests (--tests) on each --label NAME=DIR, one directory after
the other, and print one table with each system's figures and their ratios
to the first label. Sizes of the seq and rand tests are set with --seq-size,
--seq-record, --rand-size and --rand-record.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			systems, err := parseLabels(labels)
			if err != nil {
				return benchUsage(err)
			}
			return runBench(cmd, f, splitList(tests), systems)
		},
	}
	cmd.Flags().StringArrayVar(&labels, "label", nil, "a system to test, as NAME=DIR (repeat for each; the first is the reference)")
	cmd.Flags().StringVar(&tests, "tests", "seq,rand,meta", "tests to run, from seq, rand, meta")
	f.addCommon(cmd.Flags())
	f.addSeq(cmd.Flags(), "seq-")
	f.addRand(cmd.Flags(), "rand-")
	// The suite compares both of the papers' metadata tests by default.
	f.addMeta(cmd.Flags(), "0,3K")
	return cmd
}

func parseLabels(labels []string) ([]bench.System, error) {
	if len(labels) == 0 {
		return nil, errors.New("compare needs at least one --label NAME=DIR")
	}
	var systems []bench.System
	for _, l := range labels {
		name, dir, ok := strings.Cut(l, "=")
		if !ok || strings.TrimSpace(name) == "" || dir == "" {
			return nil, fmt.Errorf("--label %q: want NAME=DIR, e.g. --label tandem=/mnt/tandem", l)
		}
		systems = append(systems, bench.System{Label: strings.TrimSpace(name), Dir: dir})
	}
	return systems, nil
}

func splitList(s string) []string {
	var items []string
	for _, it := range strings.Split(s, ",") {
		if it = strings.TrimSpace(it); it != "" {
			items = append(items, it)
		}
	}
	return items
}

// config turns the flag values into a bench.Config; every error is a usage error.
func (f *benchFlags) config(tests []string, systems []bench.System) (bench.Config, error) {
	c := bench.Config{Tests: tests, Systems: systems, Seed: f.seed, RunID: runID()}
	var err error
	if c.Threads, err = parseInts("--threads", f.threads); err != nil {
		return c, err
	}
	// Only the tests run have their flags: seq has no --rand-size.
	if slices.Contains(tests, bench.TestSeq) {
		c.Seq, err = f.seqParams()
	}
	if err == nil && slices.Contains(tests, bench.TestRand) {
		c.Rand, err = f.randParams()
	}
	if err == nil && slices.Contains(tests, bench.TestMeta) {
		c.Meta, err = f.metaParams()
	}
	return c, err
}

// sizeFlag parses a size flag and names it in the error.
func sizeFlag(name, value string) (uint64, error) {
	n, err := parseSize(value)
	if err != nil {
		return 0, fmt.Errorf("--%s: %w", name, err)
	}
	return n, nil
}

func (f *benchFlags) seqParams() (bench.SeqParams, error) {
	var p bench.SeqParams
	var err error
	if p.Size, err = sizeFlag("size", f.seqSize); err == nil {
		p.Record, err = sizeFlag("record", f.seqRecord)
	}
	return p, err
}

func (f *benchFlags) randParams() (bench.RandParams, error) {
	p := bench.RandParams{Duration: f.duration, Ops: f.ops, Direct: f.direct}
	var err error
	if p.Size, err = sizeFlag("size", f.randSize); err == nil {
		p.Record, err = sizeFlag("record", f.randRecord)
	}
	return p, err
}

func (f *benchFlags) metaParams() (bench.MetaParams, error) {
	p := bench.MetaParams{Files: f.files, Items: f.items, Branch: f.branch, Depth: f.depth, Fsync: f.fsync}
	for _, s := range splitList(f.fileSizes) {
		n, err := sizeFlag("file-size", s)
		if err != nil {
			return p, err
		}
		p.FileSizes = append(p.FileSizes, n)
	}
	return p, nil
}

func parseInts(flag, list string) ([]int, error) {
	var ns []int
	for _, s := range splitList(list) {
		n, err := strconv.Atoi(s)
		if err != nil {
			return nil, fmt.Errorf("%s %q: %q is not a whole number", flag, list, s)
		}
		ns = append(ns, n)
	}
	return ns, nil
}

// runID names this session's scratch directories, so that sessions on the
// same directory, or leftovers of a killed one, never collide.
func runID() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// runBench plans every run, runs them one after the other, and reports.
func runBench(cmd *cobra.Command, f *benchFlags, tests []string, systems []bench.System) error {
	cfg, err := f.config(tests, systems)
	if err != nil {
		return benchUsage(err)
	}
	jobs, err := cfg.Jobs()
	if err != nil {
		return benchUsage(err)
	}
	if err := checkDirs(systems, f.agents != ""); err != nil {
		return benchUsage(err)
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ex, closeEx, err := executor(ctx, f)
	if err != nil {
		return err
	}
	defer closeEx()
	rep := runJobs(ctx, ex, jobs, f, cmd.ErrOrStderr())
	return output(cmd.OutOrStdout(), cmd.ErrOrStderr(), rep, f)
}

// checkDirs catches a mistyped directory before anything runs. With
// agents the directories are theirs to find, and may not exist here.
func checkDirs(systems []bench.System, agents bool) error {
	if agents {
		return nil
	}
	for _, s := range systems {
		fi, err := os.Stat(s.Dir)
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("directory %s does not exist: give a directory on the file system to measure", s.Dir)
		}
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", s.Dir)
		}
	}
	return nil
}

func executor(ctx context.Context, f *benchFlags) (bench.Executor, func(), error) {
	addrs := splitList(f.agents)
	if len(addrs) == 0 {
		return bench.Local{}, func() {}, nil
	}
	if f.secretFile == "" {
		return nil, nil, benchUsage(errors.New("--agents needs --secret-file (the agents' secret; the cluster secret will do)"))
	}
	secret, err := rpc.ReadSecretFile(f.secretFile)
	if err != nil {
		return nil, nil, err
	}
	c, err := bench.Dial(ctx, addrs, secret)
	if err != nil {
		return nil, nil, err
	}
	c.PhaseTimeout = f.timeout
	return c, func() { c.Close() }, nil
}

func runJobs(ctx context.Context, ex bench.Executor, jobs []bench.Job, f *benchFlags, stderr io.Writer) bench.Report {
	host, _ := os.Hostname()
	rep := bench.Report{Version: bench.ReportVersion, Host: host, Started: time.Now()}
	opt := bench.Options{DropCaches: f.dropCaches, Keep: f.keep, Observer: progressFor(stderr)}
	for _, j := range jobs {
		if ctx.Err() != nil {
			break
		}
		rep.Runs = append(rep.Runs, bench.Execute(ctx, ex, j, opt))
	}
	rep.Finished = time.Now()
	return rep
}

// progressFor redraws a progress bar on a terminal and logs occasionally
// otherwise; a writer that is not a file (a test's buffer) gets the log.
func progressFor(w io.Writer) bench.Observer {
	if f, ok := w.(*os.File); ok {
		return bench.NewProgress(f)
	}
	return &bench.Progress{W: w, LogEvery: 10 * time.Second}
}

func output(stdout, stderr io.Writer, rep bench.Report, f *benchFlags) error {
	var err error
	if f.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = bench.WriteTable(stdout, rep)
	}
	if err == nil && f.report != "" {
		var files []string
		files, err = bench.WriteHTML(f.report, rep)
		fmt.Fprintf(stderr, "bench: wrote %s\n", strings.Join(files, " "))
	}
	if err != nil {
		return err
	}
	if n := rep.Failed(); n > 0 {
		return &exitError{code: 1, err: fmt.Errorf("%d of %d runs failed", n, len(rep.Runs))}
	}
	if len(rep.Runs) == 0 {
		return errors.New("interrupted before any run")
	}
	return nil
}

func newBenchAgentCmd() *cobra.Command {
	var listen, secretFile string
	cmd := &cobra.Command{
		Use:   "agent --listen ADDR",
		Short: "Run a driver's benchmark workers on this client host",
		Long: `Serve bench drivers on ADDR: a driver started elsewhere with
--agents host:port,... hands this host its share of the threads, starts
every phase on all agents together and adds up their results, the role
IOzone's -+m client list and an MPI hostfile play in the white papers.
The directory under test must have the same path here as on the driver's
command line. The agent only creates and removes files under directories
named .tandem-bench.*. It runs until interrupted.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if secretFile == "" {
				return benchUsage(errors.New("--secret-file is required: drivers must prove they hold it"))
			}
			secret, err := rpc.ReadSecretFile(secretFile)
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			logger := log.New(cmd.ErrOrStderr(), "bench agent: ", log.LstdFlags)
			logger.Printf("listening on %s", ln.Addr())
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return (&bench.Agent{Secret: secret, Log: logger}).Serve(ctx, ln)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", ":7420", "TCP address to listen on")
	cmd.Flags().StringVar(&secretFile, "secret-file", "", "secret drivers must hold (mode 0600; e.g. the cluster secret)")
	return cmd
}
