package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Phase names shared by the tests.
const (
	PhasePrepare = "prepare" // untimed: scratch directory, files to overwrite, trees
	PhaseCleanup = "cleanup" // untimed: each worker removes what it made
)

// work is one worker's share of a phase; runWorkers times it.
type work func(ctx context.Context, s *Spec, worker int, c *Counter) (WorkerResult, error)

type phase struct {
	name  string
	timed bool
	// dropCaches before a read phase, so that it reads from the storage
	// rather than from the page cache the write phase just filled.
	dropCaches bool
	unit       string
	work       work
}

// phasesOf lists a test's phases in order; the last is always cleanup.
func phasesOf(test string) []phase {
	switch test {
	case TestSeq:
		return []phase{
			{name: PhasePrepare, work: mkRoot},
			{name: "write", timed: true, unit: UnitMBps, work: seqWrite},
			{name: "read", timed: true, dropCaches: true, unit: UnitMBps, work: seqRead},
			{name: PhaseCleanup, work: removeIO},
		}
	case TestRand:
		return []phase{
			{name: PhasePrepare, work: randLayout},
			{name: "write", timed: true, unit: UnitOps, work: randWrite},
			{name: "read", timed: true, dropCaches: true, unit: UnitOps, work: randRead},
			{name: PhaseCleanup, work: removeIO},
		}
	case TestMeta:
		return []phase{
			{name: PhasePrepare, work: metaTree},
			{name: "create", timed: true, unit: UnitOps, work: metaCreate},
			{name: "stat", timed: true, unit: UnitOps, work: metaStat},
			{name: "read", timed: true, unit: UnitOps, work: metaRead},
			{name: "remove", timed: true, unit: UnitOps, work: metaRemove},
			{name: PhaseCleanup, work: removeMeta},
		}
	}
	return nil
}

func lookupPhase(test, name string) (phase, error) {
	for _, p := range phasesOf(test) {
		if p.name == name {
			return p, nil
		}
	}
	return phase{}, usageErr("test %q has no phase %q", test, name)
}

// Counter is the live progress of a phase, updated by every worker.
type Counter struct{ ops, bytes atomic.Uint64 }

func (c *Counter) add(ops, bytes uint64) {
	if c != nil {
		c.ops.Add(ops)
		c.bytes.Add(bytes)
	}
}

// Load returns the operations and bytes done so far.
func (c *Counter) Load() (ops, bytes uint64) { return c.ops.Load(), c.bytes.Load() }

// runWorkers runs workers first … first+count-1 of a phase at once: they
// wait at a gate until all are started, like ranks after an MPI barrier.
// The first worker to fail stops the others.
func runWorkers(ctx context.Context, s *Spec, name string, first, count int, c *Counter) ([]WorkerResult, error) {
	p, err := lookupPhase(s.Test, name)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make([]WorkerResult, count)
	errs := make([]error, count)
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for i := range count {
		wg.Go(func() {
			<-gate
			start := time.Now()
			r, err := p.work(ctx, s, first+i, c)
			r.Worker, r.Elapsed = first+i, time.Since(start)
			results[i] = r
			if err != nil {
				errs[i] = fmt.Errorf("worker %d: %w", first+i, err)
				cancel()
			}
		})
	}
	close(gate)
	wg.Wait()
	if name == PhaseCleanup {
		errs = append(errs, removeRoot(s.Root))
	}
	return results, firstCause(errs)
}

// firstCause picks the error that made the others stop, rather than one
// of the "context canceled" errors it caused.
func firstCause(errs []error) error {
	var canceled error
	for _, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, context.Canceled):
			canceled = cmp.Or(canceled, err)
		default:
			return err
		}
	}
	return canceled
}

func mkRoot(_ context.Context, s *Spec, _ int, _ *Counter) (WorkerResult, error) {
	return WorkerResult{}, os.MkdirAll(s.Root, 0o755)
}

// removeRoot removes the scratch directory once it is empty. Agents
// sharing a file system all try; only the last one finds it empty, and a
// root that is already gone is no failure.
func removeRoot(root string) error {
	err := os.Remove(root)
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
		return nil
	}
	return err
}
