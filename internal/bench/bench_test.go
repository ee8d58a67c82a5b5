package bench

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// smallConfig is a whole suite small enough for a unit test.
func smallConfig(dir string, threads ...int) Config {
	return Config{
		Tests:   Tests,
		Systems: []System{{Label: "tmp", Dir: dir}},
		Threads: threads,
		Seq:     SeqParams{Size: 4 << 20, Record: 64 << 10},
		Rand:    RandParams{Size: 256 << 10, Record: 4 << 10, Ops: 50, Direct: true},
		Meta:    MetaParams{Files: 40, Items: 10, Depth: 1, FileSizes: []uint64{0, 3 << 10}, Fsync: true},
		RunID:   "test",
		Seed:    1,
	}
}

func mustJobs(t *testing.T, c Config) []Job {
	t.Helper()
	jobs, err := c.Jobs()
	if err != nil {
		t.Fatalf("Jobs: %v", err)
	}
	return jobs
}

func runAll(t *testing.T, ex Executor, c Config) []Run {
	t.Helper()
	var runs []Run
	for _, j := range mustJobs(t, c) {
		r := Execute(context.Background(), ex, j, Options{})
		if r.Error != "" {
			t.Fatalf("%s t%d: %s", r.Group(), r.Threads, r.Error)
		}
		runs = append(runs, r)
	}
	return runs
}

func phaseOf(t *testing.T, r Run, name string) PhaseResult {
	t.Helper()
	p, ok := r.Phase(name)
	if !ok {
		t.Fatalf("%s has no %s phase: %+v", r.Group(), name, r.Phases)
	}
	return p
}

func TestSeqWritesAndReadsExactlyTheTotalSizeSplitOverTheWorkers(t *testing.T) {
	dir := t.TempDir()
	c := smallConfig(dir, 1, 4)
	c.Tests = []string{TestSeq}
	for _, r := range runAll(t, Local{}, c) {
		if r.Params.FileSize*uint64(r.Threads) != c.Seq.Size {
			t.Errorf("t%d: %d bytes per file, want the %d total split %d ways", r.Threads, r.Params.FileSize, c.Seq.Size, r.Threads)
		}
		for _, name := range []string{"write", "read"} {
			p := phaseOf(t, r, name)
			if p.Bytes != c.Seq.Size || p.Ops != c.Seq.Size/c.Seq.Record || p.Workers != r.Threads {
				t.Errorf("t%d %s: %d bytes in %d ops by %d workers, want %d bytes in %d records by %d",
					r.Threads, name, p.Bytes, p.Ops, p.Workers, c.Seq.Size, c.Seq.Size/c.Seq.Record, r.Threads)
			}
			if want := float64(p.Bytes) / 1e6 / p.Seconds; p.Unit != UnitMBps || float64(p.Rate) != want {
				t.Errorf("t%d %s: rate %v %s, want %v MB/s", r.Threads, name, p.Rate, p.Unit, want)
			}
		}
	}
	assertEmpty(t, dir)
}

// assertEmpty checks that the runs removed everything they created.
func assertEmpty(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) > 0 {
		t.Errorf("%s after the runs: %v %v, want it empty", dir, entries, err)
	}
}

func TestMetaCreatesWorkersTimesItemsFilesInEveryPhase(t *testing.T) {
	dir := t.TempDir()
	c := smallConfig(dir, 1, 2)
	c.Tests = []string{TestMeta}
	for _, r := range runAll(t, Local{}, c) {
		files := uint64(c.Meta.Files) // fixed total, as in the papers
		if got := uint64(r.Threads * r.Params.FilesPerWorker()); got != files {
			t.Errorf("%s t%d: %d workers × %d files = %d, want %d", r.Group(), r.Threads, r.Threads, r.Params.FilesPerWorker(), got, files)
		}
		for _, name := range []string{"create", "stat", "read", "remove"} {
			if p := phaseOf(t, r, name); p.Ops != files || p.Unit != UnitOps {
				t.Errorf("%s t%d %s: %d %s, want %d ops/s over %d files", r.Group(), r.Threads, name, p.Ops, p.Unit, files, files)
			}
		}
		wantBytes := files * r.Params.FileSize
		if c, rd := phaseOf(t, r, "create"), phaseOf(t, r, "read"); c.Bytes != wantBytes || rd.Bytes != wantBytes {
			t.Errorf("%s t%d: wrote %d and read %d bytes, want %d", r.Group(), r.Threads, c.Bytes, rd.Bytes, wantBytes)
		}
	}
	assertEmpty(t, dir)
}

func TestMetaWithExplicitBranchBuildsBranchToTheDepthLeaves(t *testing.T) {
	c := smallConfig(t.TempDir(), 3)
	c.Tests = []string{TestMeta}
	c.Meta = MetaParams{Items: 2, Branch: 3, Depth: 2, FileSizes: []uint64{0}}
	r := runAll(t, Local{}, c)[0]
	if got, want := phaseOf(t, r, "create").Ops, uint64(3*3*3*2); got != want {
		t.Errorf("3 workers × 3² leaves × 2 files: created %d, want %d", got, want)
	}
	if !strings.Contains(r.Command, "-z 2 -b 3 -I 2") {
		t.Errorf("command %q does not carry -z 2 -b 3 -I 2", r.Command)
	}
}

func TestRandDoesTheRequestedOperationsPerWorker(t *testing.T) {
	dir := t.TempDir()
	c := smallConfig(dir, 3)
	c.Tests = []string{TestRand}
	r := runAll(t, Local{}, c)[0]
	for _, name := range []string{"write", "read"} {
		p := phaseOf(t, r, name)
		if p.Ops != 3*c.Rand.Ops || p.Bytes != p.Ops*c.Rand.Record || p.Unit != UnitOps {
			t.Errorf("%s: %d ops, %d bytes, %s; want %d ops of %d bytes in ops/s", name, p.Ops, p.Bytes, p.Unit, 3*c.Rand.Ops, c.Rand.Record)
		}
	}
	if !r.Params.Direct && !hasNote(r, "O_DIRECT") {
		t.Errorf("ran buffered without saying so: notes %q", r.Notes)
	}
	assertEmpty(t, dir)
}

func TestRandStopsAfterTheDuration(t *testing.T) {
	c := smallConfig(t.TempDir(), 2)
	c.Tests = []string{TestRand}
	c.Rand.Ops, c.Rand.Duration = 0, 200*time.Millisecond
	r := runAll(t, Local{}, c)[0]
	p := phaseOf(t, r, "write")
	if p.Seconds < 0.2 || p.Seconds > 5 || p.Ops == 0 {
		t.Errorf("200ms write phase took %.3fs for %d ops", p.Seconds, p.Ops)
	}
}

func hasNote(r Run, s string) bool {
	for _, n := range r.Notes {
		if strings.Contains(n, s) {
			return true
		}
	}
	return false
}

func TestTheRandomTestFallsBackToBufferedIOWithANote(t *testing.T) {
	ok, err := directWorks(filepath.Join(t.TempDir(), "absent"), 4096)
	if err == nil || ok {
		t.Errorf("probing a missing file: ok=%v err=%v, want the open error", ok, err)
	}
	// A 1000-byte record cannot be aligned, so O_DIRECT fails with EINVAL
	// on every file system that supports it, and the run must go buffered.
	c := smallConfig(t.TempDir(), 1)
	c.Tests = []string{TestRand}
	c.Rand.Record, c.Rand.Size = 1000, 100000
	r := runAll(t, Local{}, c)[0]
	if r.Params.Direct || !hasNote(r, "refused O_DIRECT") || strings.Contains(r.Command, " -I ") {
		t.Errorf("unaligned records: direct=%v notes=%q command=%q, want buffered, a note, no -I",
			r.Params.Direct, r.Notes, r.Command)
	}
}

func TestKeepLeavesTheFilesForInspection(t *testing.T) {
	dir := t.TempDir()
	c := smallConfig(dir, 2)
	c.Tests = []string{TestSeq}
	j := mustJobs(t, c)[0]
	if r := Execute(context.Background(), Local{}, j, Options{Keep: true}); r.Error != "" {
		t.Fatal(r.Error)
	}
	for w := range 2 {
		fi, err := os.Stat(ioPath(&j.Spec, w))
		if err != nil || uint64(fi.Size()) != j.Spec.FileSize {
			t.Errorf("worker %d's file: %v, %v; want %d bytes", w, fi, err, j.Spec.FileSize)
		}
	}
}

// removeAfter is an observer that removes the scratch directory once a
// given phase has ended, as if someone deleted it under a running test.
type removeAfter struct{ phase string }

func (removeAfter) PhaseStart(PhaseEvent) {}

func (o removeAfter) PhaseEnd(ev PhaseEvent, _ error) {
	if ev.Phase == o.phase {
		os.RemoveAll(ev.Job.Spec.Root)
	}
}

func TestAFileSystemErrorNamesThePhaseTheOperationAndThePath(t *testing.T) {
	c := smallConfig(t.TempDir(), 2)
	c.Tests = []string{TestMeta}
	j := mustJobs(t, c)[0]
	r := Execute(context.Background(), Local{}, j, Options{Observer: removeAfter{"create"}})
	for _, want := range []string{"meta empty stat", "lstat " + j.Spec.Root + "/mdtest_tree.", "no such file or directory"} {
		if !strings.Contains(r.Error, want) {
			t.Errorf("error %q does not contain %q", r.Error, want)
		}
	}
	if _, ok := r.Phase("create"); !ok || len(r.Phases) != 1 {
		t.Errorf("phases %+v: want the create figure kept and nothing after it", r.Phases)
	}
}

func TestMetaOnAReadOnlyDirectoryReportsTheFailedMkdir(t *testing.T) {
	dir := readOnlyDir(t)
	c := smallConfig(dir, 1)
	c.Tests = []string{TestMeta}
	j := mustJobs(t, c)[0]
	r := Execute(context.Background(), Local{}, j, Options{})
	if !strings.Contains(r.Error, "meta empty prepare: worker 0: mkdir "+dir) ||
		!(strings.Contains(r.Error, "read-only") || strings.Contains(r.Error, "permission denied")) {
		t.Errorf("error %q: want the mkdir of a path under %s refused", r.Error, dir)
	}
	if len(r.Phases) != 0 {
		t.Errorf("phases %+v measured on a read-only directory", r.Phases)
	}
}

func TestACancelledRunStopsAndStillCleansUp(t *testing.T) {
	dir := t.TempDir()
	c := smallConfig(dir, 2)
	c.Tests = []string{TestRand}
	c.Rand.Ops, c.Rand.Duration = 0, time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	r := Execute(ctx, Local{}, mustJobs(t, c)[0], Options{})
	if !errors.Is(ctx.Err(), context.Canceled) || !strings.Contains(r.Error, "context canceled") {
		t.Errorf("error %q, want the cancellation", r.Error)
	}
	assertEmpty(t, dir)
}
