package bench

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// System is one directory under test and the name it has in tables and charts.
type System struct {
	Label string `json:"label"`
	Dir   string `json:"dir"`
}

// SeqParams mirror iozone -i0 -i1 -r Record -s Size/threads -t threads.
type SeqParams struct {
	Size   uint64 // total over all workers, as the papers keep it fixed
	Record uint64
}

// RandParams mirror iozone -i2 -I -O -r Record -s Size.
type RandParams struct {
	Size     uint64 // per worker file
	Record   uint64
	Duration time.Duration
	Ops      uint64 // per worker; overrides Duration when set
	Direct   bool
}

// MetaParams mirror mdtest -F -L -u -z Depth -b Branch -I Items [-y] [-w/-e size].
type MetaParams struct {
	// Files is the total file count kept fixed over a thread sweep, as in
	// the PixStor and BeeGFS papers: -b shrinks when threads grow. It is
	// used when Branch is zero.
	Files     int
	Items     int
	Branch    int
	Depth     int
	FileSizes []uint64 // one run per size; 0 is mdtest's empty files
	Fsync     bool
}

// Config is a whole benchmark session: tests × systems × thread counts.
type Config struct {
	Tests   []string
	Systems []System
	Threads []int
	Seq     SeqParams
	Rand    RandParams
	Meta    MetaParams
	RunID   string // names the scratch directories of this session
	Seed    uint64
}

// Job is one run: one test variant on one system at one worker count.
type Job struct {
	System  System
	Variant string // "empty" or "3K" for meta, "" otherwise
	Spec    Spec
}

// Group names the test and variant, as table rows and chart titles show them.
func (j Job) Group() string {
	if j.Variant == "" {
		return j.Spec.Test
	}
	return j.Spec.Test + " " + j.Variant
}

// Jobs checks the configuration and lists its runs: system by system (so
// that a comparison runs one directory after the other), then test,
// variant and thread count.
func (c Config) Jobs() ([]Job, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	var jobs []Job
	for _, sys := range c.Systems {
		for _, test := range c.Tests {
			for _, size := range c.variantSizes(test) {
				for _, threads := range c.Threads {
					j, err := c.job(sys, test, size, threads)
					if err != nil {
						return nil, err
					}
					jobs = append(jobs, j)
				}
			}
		}
	}
	return jobs, nil
}

// variantSizes lists the metadata file sizes; the I/O tests have a single
// variant, whose size comes from their own parameters.
func (c Config) variantSizes(test string) []uint64 {
	if test == TestMeta {
		return c.Meta.FileSizes
	}
	return []uint64{0}
}

func (c Config) check() error {
	if len(c.Tests) == 0 {
		return usageErr("no test selected (want some of %s)", strings.Join(Tests, ", "))
	}
	for _, t := range c.Tests {
		if !slices.Contains(Tests, t) {
			return usageErr("unknown test %q (want some of %s)", t, strings.Join(Tests, ", "))
		}
	}
	if len(c.Meta.FileSizes) == 0 && slices.Contains(c.Tests, TestMeta) {
		return usageErr("no metadata file size given")
	}
	if len(c.Threads) == 0 {
		return usageErr("no thread count given")
	}
	for _, n := range c.Threads {
		if n < 1 {
			return usageErr("thread count %d: must be at least 1", n)
		}
	}
	return c.checkSystems()
}

func (c Config) checkSystems() error {
	if len(c.Systems) == 0 {
		return usageErr("no directory to test")
	}
	seen := map[string]bool{}
	for _, s := range c.Systems {
		if s.Label == "" || s.Dir == "" {
			return usageErr("system %q=%q needs both a label and a directory", s.Label, s.Dir)
		}
		if seen[s.Label] {
			return usageErr("label %q is used twice", s.Label)
		}
		seen[s.Label] = true
	}
	return nil
}

func (c Config) job(sys System, test string, metaSize uint64, threads int) (Job, error) {
	dir, err := filepath.Abs(sys.Dir)
	if err != nil {
		return Job{}, err
	}
	j := Job{System: sys, Spec: Spec{Test: test, Workers: threads, Seed: c.Seed}}
	switch test {
	case TestSeq:
		j.Spec, err = c.seqSpec(j.Spec)
	case TestRand:
		j.Spec = c.randSpec(j.Spec)
	case TestMeta:
		j.Variant = metaVariant(metaSize)
		j.Spec, err = c.metaSpec(j.Spec, metaSize)
	}
	name := fmt.Sprintf("%s%s.%s.t%d", ScratchPrefix, c.RunID, strings.ReplaceAll(j.Group(), " ", "-"), threads)
	j.Spec.Root = filepath.Join(dir, name)
	if err == nil {
		err = j.Spec.Validate()
	}
	return j, err
}

func metaVariant(size uint64) string {
	if size == 0 {
		return "empty"
	}
	return FormatSize(size)
}

// seqSpec splits the fixed total over the workers, as iozone -s does per
// thread in the papers (number of clients × file size = total).
func (c Config) seqSpec(s Spec) (Spec, error) {
	p := c.Seq
	if p.Record == 0 {
		return s, usageErr("--record must be positive")
	}
	per := p.Size / uint64(s.Workers)
	if p.Size == 0 || p.Size%uint64(s.Workers) != 0 || per%p.Record != 0 {
		return s, usageErr("--size %s cannot be split into %d files of whole %s records",
			FormatSize(p.Size), s.Workers, FormatSize(p.Record))
	}
	s.FileSize, s.Record = per, p.Record
	return s, nil
}

func (c Config) randSpec(s Spec) Spec {
	p := c.Rand
	s.FileSize, s.Record, s.Direct = p.Size, p.Record, p.Direct
	s.Duration, s.Ops = p.Duration, p.Ops
	if p.Ops > 0 {
		s.Duration = 0
	}
	return s
}

func (c Config) metaSpec(s Spec, size uint64) (Spec, error) {
	p := c.Meta
	s.FileSize, s.Fsync, s.Depth, s.Items, s.Branch = size, p.Fsync, p.Depth, p.Items, p.Branch
	if p.Branch == 0 {
		if err := fixedTotalTree(&s, p.Files, c.Threads); err != nil {
			return s, err
		}
	}
	return s, nil
}

// fixedTotalTree chooses -b and -I so that the workers together create
// exactly files files in a tree of depth 1, the way the suite and the
// papers keep the total fixed: I = min(items, files/N), B = files/(N·I).
// A total that does not split gets an error naming one that does for
// every worker count of the sweep.
func fixedTotalTree(s *Spec, files int, sweep []int) error {
	if s.Depth != 1 {
		return usageErr("--depth %d needs an explicit --branch (--files only sizes depth-1 trees)", s.Depth)
	}
	n := s.Workers
	if !splits(files, n, s.Items) {
		return usageErr("--files %d cannot be split evenly over %d workers in directories of at most %d files (--items): give a value such as %d",
			files, n, s.Items, validFiles(append([]int{n}, sweep...), s.Items, max(files, 1)))
	}
	per := files / n
	s.Items = min(s.Items, per)
	s.Branch = per / s.Items
	return nil
}

// splits says whether n workers can share files evenly, each filling
// whole directories of at most items files.
func splits(files, n, items int) bool {
	if files < n || files%n != 0 {
		return false
	}
	per := files / n
	return per%min(items, per) == 0
}

// validFiles is the smallest total at or above files that splits for
// every worker count in counts; it looks a few million values far, which
// a sweep of many odd thread counts may exceed (then it gives the first
// total that splits for the first count).
func validFiles(counts []int, items, files int) int {
	for f := files; f < files+1<<22; f++ {
		ok := true
		for _, n := range counts {
			ok = ok && splits(f, n, items)
		}
		if ok {
			return f
		}
	}
	return validFiles(counts[:1], items, files)
}
