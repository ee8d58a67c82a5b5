package bench

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestARateNeverDividesByZero(t *testing.T) {
	cases := []struct {
		amount, seconds float64
		want            float64
	}{
		{100, 2, 50},
		{100, 0, math.Inf(1)}, // work done faster than the clock ticks
		{0, 0, 0},             // no work at all
		{0, 3, 0},
	}
	for _, c := range cases {
		if got := rateOf(c.amount, c.seconds); float64(got) != c.want {
			t.Errorf("rateOf(%v, %v) = %v, want %v", c.amount, c.seconds, got, c.want)
		}
	}
}

func TestAPhaseRateIsTheTotalOverTheSlowestWorker(t *testing.T) {
	rs := []WorkerResult{
		{Ops: 100, Bytes: 1e6, Elapsed: time.Second},
		{Ops: 300, Bytes: 3e6, Elapsed: 2 * time.Second},
	}
	if p := summarize("stat", UnitOps, rs); p.Ops != 400 || p.Seconds != 2 || p.Rate != 200 {
		t.Errorf("ops: %+v, want 400 ops in 2 s = 200 ops/s", p)
	}
	if p := summarize("write", UnitMBps, rs); p.Bytes != 4e6 || p.Rate != 2 {
		t.Errorf("MB/s: %+v, want 4 MB in 2 s = 2 MB/s", p)
	}
	if p := summarize("stat", UnitOps, []WorkerResult{{Ops: 5}}); !math.IsInf(float64(p.Rate), 1) {
		t.Errorf("5 ops in no time: rate %v, want +Inf", p.Rate)
	}
}

func TestAnInfiniteRateSurvivesJSONAsTheStringInf(t *testing.T) {
	in := []Rate{Rate(math.Inf(1)), 12.5}
	b, err := json.Marshal(in)
	if err != nil || string(b) != `["+Inf",12.5]` {
		t.Fatalf("Marshal = %s, %v", b, err)
	}
	var out []Rate
	if err := json.Unmarshal(b, &out); err != nil || !math.IsInf(float64(out[0]), 1) || out[1] != 12.5 {
		t.Errorf("Unmarshal = %v, %v", out, err)
	}
	if in[0].String() != "+Inf" || Rate(1234.56).String() != "1235" || Rate(3.14159).String() != "3.1" {
		t.Errorf("String: %s %s %s", in[0], Rate(1234.56), Rate(3.14159))
	}
}

func TestBadParametersAreUsageErrors(t *testing.T) {
	base := func() Config { return smallConfig("/tmp", 1, 2) }
	cases := map[string]struct {
		change func(*Config)
		want   string
	}{
		"unknown test":     {func(c *Config) { c.Tests = []string{"seq", "iops"} }, `unknown test "iops"`},
		"no test":          {func(c *Config) { c.Tests = nil }, "no test selected"},
		"zero threads":     {func(c *Config) { c.Threads = []int{1, 0} }, "thread count 0"},
		"no threads":       {func(c *Config) { c.Threads = nil }, "no thread count"},
		"size not divided": {func(c *Config) { c.Threads = []int{3} }, "--size 4M cannot be split into 3 files"},
		"partial record":   {func(c *Config) { c.Seq.Record = 3 << 20 }, "whole 3M records"},
		"rand partial":     {func(c *Config) { c.Rand.Size = 5000 }, "not a positive whole number of 4K records"},
		"rand no stop":     {func(c *Config) { c.Rand.Ops = 0 }, "duration or an operation count"},
		"files uneven":     {func(c *Config) { c.Meta.Files = 41 }, "--files 41 cannot be split evenly over 1 workers in directories of at most 10 files (--items): give a value such as 60"},
		"no files":         {func(c *Config) { c.Meta.Files = 0 }, "--files 0 cannot be split evenly over 1 workers in directories of at most 10 files (--items): give a value such as 2"},
		"depth no branch":  {func(c *Config) { c.Meta.Depth = 2 }, "--depth 2 needs an explicit --branch"},
		"huge tree":        {func(c *Config) { c.Meta.Branch, c.Meta.Depth = 1000, 3 }, "more than"},
		"twice a label":    {func(c *Config) { c.Systems = append(c.Systems, c.Systems[0]) }, `label "tmp" is used twice`},
		"empty label":      {func(c *Config) { c.Systems[0].Label = "" }, "needs both a label and a directory"},
	}
	for name, tc := range cases {
		c := base()
		tc.change(&c)
		_, err := c.Jobs()
		if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want a usage error with %q", name, err, tc.want)
		}
	}
}

func TestTheFixedTotalShrinksTheBranchingAsThreadsGrow(t *testing.T) {
	c := Config{Tests: []string{TestMeta}, Systems: []System{{"x", "/tmp"}}, Threads: []int{1, 2, 8, 16},
		Meta: MetaParams{Files: 8192, Items: 1024, Depth: 1, FileSizes: []uint64{0}}, RunID: "r"}
	want := map[int][2]int{1: {8, 1024}, 2: {4, 1024}, 8: {1, 1024}, 16: {1, 512}} // threads: -b, -I
	for _, j := range mustJobs(t, c) {
		s := j.Spec
		if w := want[s.Workers]; s.Branch != w[0] || s.Items != w[1] || s.Workers*s.FilesPerWorker() != 8192 {
			t.Errorf("%d threads: -b %d -I %d, want -b %d -I %d and 8192 files in all", s.Workers, s.Branch, s.Items, w[0], w[1])
		}
	}
}

func TestJobsRunOneSystemAfterTheOtherInTheirOwnScratchDirectories(t *testing.T) {
	c := smallConfig("/tmp/a", 1, 2)
	c.Systems = append(c.Systems, System{"b", "/tmp/b"})
	jobs := mustJobs(t, c)
	// 2 systems × (seq + rand + 2 meta variants) × 2 thread counts
	if len(jobs) != 16 || jobs[7].System.Label != "tmp" || jobs[8].System.Label != "b" {
		t.Fatalf("%d jobs, want 16, the first 8 on tmp", len(jobs))
	}
	roots := map[string]bool{}
	for _, j := range jobs {
		if roots[j.Spec.Root] || !strings.HasPrefix(j.Spec.Root, "/tmp/") || !strings.Contains(j.Spec.Root, "/"+ScratchPrefix+"test.") {
			t.Errorf("root %s: want a fresh %s directory under the system's", j.Spec.Root, ScratchPrefix)
		}
		roots[j.Spec.Root] = true
	}
}

func TestEquivalentCommandsAreThePapers(t *testing.T) {
	seq := Spec{Test: TestSeq, Root: "/mnt/t/.tandem-bench.x", Workers: 64, FileSize: 4 << 30, Record: 1 << 20}
	meta := Spec{Test: TestMeta, Root: "/mnt/t/.tandem-bench.x", Workers: 32, Depth: 1, Branch: 320, Items: 3000,
		Fsync: true, FileSize: 3 << 10}
	rnd := Spec{Test: TestRand, Root: "/mnt/t/.tandem-bench.x", Workers: 8, FileSize: 4 << 30, Record: 4 << 10,
		Direct: true, Duration: time.Minute}
	cases := map[string]string{
		Equivalent(seq, 2):  "cd /mnt/t && iozone -i0 -i1 -c -e -w -+n -r 1m -s 4g -t 64 -+m clientlist",
		Equivalent(meta, 0): "mpirun -np 32 mdtest -i 1 -F -L -u -z 1 -b 320 -I 3000 -y -w 3072 -e 3072 -d /mnt/t",
	}
	for got, want := range cases {
		if got != want {
			t.Errorf("got  %s\nwant %s", got, want)
		}
	}
	if got := Equivalent(rnd, 0); !strings.Contains(got, "iozone -i2 -w -c -O -I -+n -r 4k -s 4g -t 8") {
		t.Errorf("random: %s", got)
	}
}
