package bench

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Executor runs phases on the workers of a spec: all of them in this
// process (Local) or spread over agents on client hosts (Cluster).
type Executor interface {
	// RunPhase returns when every worker has finished the phase, which
	// makes it a barrier between phases.
	RunPhase(ctx context.Context, s Spec, phase string, c *Counter) ([]WorkerResult, error)
	// DropCaches drops the page cache on every host and returns a note
	// for each host where that was not possible.
	DropCaches(ctx context.Context) []string
	// Agents lists the agents' addresses, none for a local executor.
	Agents() []string
}

// Local runs every worker as a goroutine of this process.
type Local struct{}

// RunPhase implements Executor.
func (Local) RunPhase(ctx context.Context, s Spec, phase string, c *Counter) ([]WorkerResult, error) {
	return runWorkers(ctx, &s, phase, 0, s.Workers, c)
}

// DropCaches implements Executor.
func (Local) DropCaches(context.Context) []string {
	if note := DropCaches(); note != "" {
		return []string{note}
	}
	return nil
}

// Agents implements Executor.
func (Local) Agents() []string { return nil }

// Options are the choices that do not change what a run measures.
type Options struct {
	DropCaches bool     // before read phases; the papers do, as root only
	Keep       bool     // leave the files for inspection
	Observer   Observer // may be nil
}

// Execute runs a job phase by phase and returns its figures. A failure is
// recorded in Run.Error with the phase, the worker and the file system's
// own error (operation and path); the scratch files are removed anyway.
func Execute(ctx context.Context, ex Executor, job Job, opt Options) Run {
	run := Run{
		System: job.System.Label, Dir: job.System.Dir, Test: job.Spec.Test, Variant: job.Variant,
		Threads: job.Spec.Workers, Agents: ex.Agents(), Params: job.Spec,
	}
	spec := job.Spec
	phases := phasesOf(spec.Test)
	err := runPhases(ctx, ex, &spec, phases[:len(phases)-1], opt, &run)
	if !opt.Keep {
		// Clean up even after Ctrl-C: the files could fill the file system.
		cctx := context.WithoutCancel(ctx)
		if _, cerr := runPhase(cctx, ex, spec, phases[len(phases)-1], opt, job); cerr != nil {
			run.Notes = append(run.Notes, fmt.Sprintf("cleanup of %s: %v", spec.Root, cerr))
		}
	}
	if err != nil {
		run.Error = err.Error()
	}
	run.Params = spec
	run.Command = Equivalent(spec, len(run.Agents))
	return run
}

func runPhases(ctx context.Context, ex Executor, spec *Spec, phases []phase, opt Options, run *Run) error {
	job := Job{System: System{Label: run.System, Dir: run.Dir}, Variant: run.Variant, Spec: *spec}
	for _, p := range phases {
		if p.dropCaches && opt.DropCaches {
			run.Notes = appendNew(run.Notes, ex.DropCaches(ctx)...)
		}
		rs, err := runPhase(ctx, ex, *spec, p, opt, job)
		if err != nil {
			return err
		}
		if p.timed {
			run.Phases = append(run.Phases, summarize(p.name, p.unit, rs))
		}
		if spec.Test == TestRand && p.name == PhasePrepare && spec.Direct && anyBuffered(rs) {
			spec.Direct = false
			run.Notes = append(run.Notes, "the file system refused O_DIRECT (EINVAL): random I/O ran "+
				"buffered, through the page cache, unlike iozone -I")
		}
	}
	return nil
}

func runPhase(ctx context.Context, ex Executor, spec Spec, p phase, opt Options, job Job) ([]WorkerResult, error) {
	job.Spec = spec
	ev := PhaseEvent{Job: job, Phase: p.name, Timed: p.timed, Expect: expect(spec, p.name), Counter: &Counter{}, Start: time.Now()}
	if opt.Observer != nil {
		opt.Observer.PhaseStart(ev)
	}
	rs, err := ex.RunPhase(ctx, spec, p.name, ev.Counter)
	if err != nil {
		err = fmt.Errorf("%s %s: %w", job.Group(), p.name, err)
	}
	if opt.Observer != nil {
		opt.Observer.PhaseEnd(ev, err)
	}
	return rs, err
}

func anyBuffered(rs []WorkerResult) bool {
	return slices.ContainsFunc(rs, func(r WorkerResult) bool { return r.Buffered })
}

// appendNew adds the notes not already there: a sweep drops caches
// before every read and would otherwise repeat the same note.
func appendNew(notes []string, more ...string) []string {
	for _, n := range more {
		if !slices.Contains(notes, n) {
			notes = append(notes, n)
		}
	}
	return notes
}
