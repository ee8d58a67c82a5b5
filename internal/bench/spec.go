// Package bench runs the storage benchmarks of the Dell HPC storage white
// papers on any directory: IOzone's sequential N-to-N throughput test
// (-i0 -i1 -c -e), IOzone's random 4 KiB O_DIRECT IOPS test (-i2 -I -O) and
// mdtest's file-only metadata test (-F -L -u -y). It runs them with local
// workers or spreads the workers over agents on several client hosts, and
// reports the figures as a table, as JSON and as an HTML page of charts.
package bench

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// The tests, named as on the command line.
const (
	TestSeq  = "seq"
	TestRand = "rand"
	TestMeta = "meta"
)

// Tests lists every test in the order the suite runs them.
var Tests = []string{TestSeq, TestRand, TestMeta}

// ScratchPrefix starts the name of every directory a run creates. Workers
// and agents refuse any other root, so a mistyped or hostile request can
// never make them remove files outside a benchmark's own scratch space.
const ScratchPrefix = ".tandem-bench."

// Spec is one run of one test at one worker count: everything a worker
// needs, and what the driver sends to its agents.
type Spec struct {
	Test    string `json:"test"`
	Root    string `json:"root"`    // scratch directory, the same path on every host
	Workers int    `json:"workers"` // total over all hosts
	// FileSize is the bytes of each worker's file (seq, rand) or of each
	// metadata file (meta, mdtest -w/-e).
	FileSize uint64        `json:"file_size"`
	Record   uint64        `json:"record,omitempty"`      // seq, rand: bytes per I/O
	Duration time.Duration `json:"duration_ns,omitempty"` // rand: time per phase, unless Ops is set
	Ops      uint64        `json:"ops,omitempty"`         // rand: operations per worker and phase
	Direct   bool          `json:"direct,omitempty"`      // rand: O_DIRECT
	Branch   int           `json:"branch,omitempty"`      // meta: mdtest -b
	Depth    int           `json:"depth,omitempty"`       // meta: mdtest -z
	Items    int           `json:"items,omitempty"`       // meta: mdtest -I, files per leaf directory
	Fsync    bool          `json:"fsync,omitempty"`       // meta: mdtest -y
	Seed     uint64        `json:"seed,omitempty"`        // rand: offsets are reproducible
}

// MaxWorkers bounds the threads of one run (the papers went to 2048), so
// that a request cannot make an agent start millions of goroutines.
const MaxWorkers = 1 << 16

// ErrUsage marks errors in the parameters a person gave, as opposed to
// errors from the file system or the network.
var ErrUsage = errors.New("usage")

func usageErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrUsage}, args...)...)
}

// Validate checks a spec before any file is touched; agents call it on
// every request because the spec comes from the network.
func (s *Spec) Validate() error {
	if !filepath.IsAbs(s.Root) || !strings.HasPrefix(filepath.Base(s.Root), ScratchPrefix) {
		return usageErr("scratch root %q is not an absolute path named %s*", s.Root, ScratchPrefix)
	}
	if s.Workers < 1 || s.Workers > MaxWorkers {
		return usageErr("%d workers: need 1 to %d", s.Workers, MaxWorkers)
	}
	switch s.Test {
	case TestSeq:
		return validateRecords(s.FileSize, s.Record)
	case TestRand:
		if s.Ops == 0 && s.Duration <= 0 {
			return usageErr("random test needs a duration or an operation count")
		}
		return validateRecords(s.FileSize, s.Record)
	case TestMeta:
		return s.validateMeta()
	}
	return usageErr("unknown test %q (want one of %s)", s.Test, strings.Join(Tests, ", "))
}

func validateRecords(size, record uint64) error {
	if record == 0 {
		return usageErr("record size must be positive")
	}
	if size == 0 || size%record != 0 {
		return usageErr("file size %s is not a positive whole number of %s records",
			FormatSize(size), FormatSize(record))
	}
	return nil
}

// maxLeaves bounds -b^-z so a typo cannot ask for billions of directories.
const maxLeaves = 1 << 20

func (s *Spec) validateMeta() error {
	if s.Items < 1 {
		return usageErr("items per directory must be at least 1")
	}
	if s.Depth < 0 || (s.Depth > 0 && s.Branch < 1) {
		return usageErr("tree of depth %d and branching %d has no leaf directory", s.Depth, s.Branch)
	}
	if leaves := s.leafCount(); leaves < 0 || leaves > maxLeaves {
		return usageErr("tree of depth %d and branching %d has more than %d leaf directories",
			s.Depth, s.Branch, maxLeaves)
	}
	return nil
}

// leafCount is Branch^Depth, or -1 when that overflows maxLeaves.
func (s *Spec) leafCount() int {
	n := 1
	for range s.Depth {
		n *= s.Branch
		if n > maxLeaves {
			return -1
		}
	}
	return n
}

// FilesPerWorker is how many files each meta worker creates.
func (s *Spec) FilesPerWorker() int { return s.leafCount() * s.Items }

// FormatSize writes bytes in the binary units the flags accept (3K, 1M, 2G).
func FormatSize(n uint64) string {
	units := []struct {
		suffix string
		size   uint64
	}{{"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}}
	for _, u := range units {
		if n >= u.size && n%u.size == 0 {
			return fmt.Sprintf("%d%s", n/u.size, u.suffix)
		}
	}
	return fmt.Sprint(n)
}
