package bench

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"
)

// WorkerResult is what one worker did in one phase.
type WorkerResult struct {
	Worker  int           `json:"worker"`
	Ops     uint64        `json:"ops"`
	Bytes   uint64        `json:"bytes"`
	Elapsed time.Duration `json:"elapsed_ns"`
	// Buffered is set by the random test's layout when the file system
	// refused O_DIRECT, so the timed phases fall back to buffered I/O.
	Buffered bool `json:"buffered,omitempty"`
}

// Units of the reported rates.
const (
	UnitMBps = "MB/s" // 10^6 bytes per second, as IOzone and the papers report
	UnitOps  = "ops/s"
)

// PhaseResult is one timed phase summed over all workers on all hosts.
type PhaseResult struct {
	Name    string  `json:"name"`
	Unit    string  `json:"unit"`
	Workers int     `json:"workers"`
	Ops     uint64  `json:"ops"`
	Bytes   uint64  `json:"bytes"`
	Seconds float64 `json:"seconds"` // the slowest worker's time
	Rate    Rate    `json:"rate"`
}

// Rate is a throughput or operation rate. A phase that did work in less
// time than the clock can measure has rate +Inf; JSON cannot hold an
// infinity, so it is written as the string "+Inf".
type Rate float64

// MarshalJSON writes +Inf as a string and every other rate as a number.
func (r Rate) MarshalJSON() ([]byte, error) {
	if math.IsInf(float64(r), 1) {
		return []byte(`"+Inf"`), nil
	}
	return json.Marshal(float64(r))
}

// UnmarshalJSON reads what MarshalJSON writes.
func (r *Rate) UnmarshalJSON(b []byte) error {
	if string(b) == `"+Inf"` {
		*r = Rate(math.Inf(1))
		return nil
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("rate %s: %w", b, err)
	}
	*r = Rate(f)
	return nil
}

// String formats a rate for tables: whole numbers once they are large.
func (r Rate) String() string {
	f := float64(r)
	switch {
	case math.IsInf(f, 1):
		return "+Inf"
	case f >= 100:
		return strconv.FormatFloat(f, 'f', 0, 64)
	default:
		return strconv.FormatFloat(f, 'f', 1, 64)
	}
}

// rateOf divides without ever dividing by zero: no work is a rate of 0,
// work in no measurable time is +Inf.
func rateOf(amount, seconds float64) Rate {
	switch {
	case amount == 0:
		return 0
	case seconds <= 0:
		return Rate(math.Inf(1))
	}
	return Rate(amount / seconds)
}

// summarize adds up the workers of a phase. Like mdtest (ops between the
// barriers before and after a phase) and the suite's fio runs (total over
// the slowest job's runtime), the rate is the total work divided by the
// slowest worker's time, not the sum of per-worker rates.
func summarize(name, unit string, rs []WorkerResult) PhaseResult {
	p := PhaseResult{Name: name, Unit: unit, Workers: len(rs)}
	var slowest time.Duration
	for _, r := range rs {
		p.Ops += r.Ops
		p.Bytes += r.Bytes
		slowest = max(slowest, r.Elapsed)
	}
	p.Seconds = slowest.Seconds()
	amount := float64(p.Ops)
	if unit == UnitMBps {
		amount = float64(p.Bytes) / 1e6
	}
	p.Rate = rateOf(amount, p.Seconds)
	return p
}

// Run is the outcome of one Job.
type Run struct {
	System  string        `json:"system"`
	Dir     string        `json:"dir"`
	Test    string        `json:"test"`
	Variant string        `json:"variant,omitempty"`
	Threads int           `json:"threads"`
	Agents  []string      `json:"agents,omitempty"`
	Params  Spec          `json:"params"`
	Command string        `json:"equivalent_command"`
	Phases  []PhaseResult `json:"phases"`
	Notes   []string      `json:"notes,omitempty"`
	Error   string        `json:"error,omitempty"`
}

// Group names the test and variant as Job.Group does.
func (r Run) Group() string {
	if r.Variant == "" {
		return r.Test
	}
	return r.Test + " " + r.Variant
}

// Phase finds a phase's result by name.
func (r Run) Phase(name string) (PhaseResult, bool) {
	for _, p := range r.Phases {
		if p.Name == name {
			return p, true
		}
	}
	return PhaseResult{}, false
}

// ReportVersion changes when the JSON report changes incompatibly.
const ReportVersion = 1

// Report is a whole session, as --json writes it.
type Report struct {
	Version  int       `json:"version"`
	Host     string    `json:"host"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Runs     []Run     `json:"runs"`
}

// Systems lists the labels in the order they were run.
func (r Report) Systems() []string {
	var labels []string
	seen := map[string]bool{}
	for _, run := range r.Runs {
		if !seen[run.System] {
			seen[run.System] = true
			labels = append(labels, run.System)
		}
	}
	return labels
}

// Failed counts the runs that ended in an error.
func (r Report) Failed() int {
	n := 0
	for _, run := range r.Runs {
		if run.Error != "" {
			n++
		}
	}
	return n
}
