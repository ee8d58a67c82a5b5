package bench

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// PhaseEvent describes a phase to an Observer.
type PhaseEvent struct {
	Job     Job
	Phase   string
	Timed   bool
	Expect  Expect   // how much work the phase will do, as far as known
	Counter *Counter // live when the workers run in this process
	Start   time.Time
}

// Expect is a phase's whole amount of work, in whichever measure applies.
type Expect struct {
	Ops, Bytes uint64
	Duration   time.Duration
}

func expect(s Spec, phase string) Expect {
	n := uint64(s.Workers)
	switch {
	case s.Test == TestSeq && (phase == "write" || phase == "read"):
		return Expect{Bytes: n * s.FileSize}
	case s.Test == TestRand && phase == PhasePrepare:
		return Expect{Bytes: n * s.FileSize}
	case s.Test == TestRand && (phase == "write" || phase == "read"):
		return Expect{Ops: n * s.Ops, Duration: s.Duration}
	case s.Test == TestMeta && phase != PhasePrepare && phase != PhaseCleanup:
		return Expect{Ops: n * uint64(s.FilesPerWorker())}
	}
	return Expect{}
}

// Fraction estimates how much of the phase is done, or -1 if unknown
// (phases run by remote agents report only when they end).
func (ev PhaseEvent) Fraction(now time.Time) float64 {
	ops, bytes := ev.Counter.Load()
	e := ev.Expect
	switch {
	case e.Bytes > 0 && bytes > 0:
		return min(1, float64(bytes)/float64(e.Bytes))
	case e.Ops > 0 && ops > 0:
		return min(1, float64(ops)/float64(e.Ops))
	case e.Duration > 0:
		return min(1, now.Sub(ev.Start).Seconds()/e.Duration.Seconds())
	}
	return -1
}

// Observer hears when phases start and end; Execute calls it from one
// goroutine.
type Observer interface {
	PhaseStart(ev PhaseEvent)
	PhaseEnd(ev PhaseEvent, err error)
}

// IsTerminal tells whether f is a terminal, where a redrawn progress line
// makes sense; in a log file it would be noise.
func IsTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// Progress shows running phases: a bar redrawn in place on a terminal,
// otherwise a log line when a timed phase ends and every LogEvery while it runs.
type Progress struct {
	W        io.Writer
	Terminal bool
	LogEvery time.Duration

	mu   sync.Mutex
	stop chan struct{}
	done chan struct{}
}

// NewProgress returns the progress display suited to f.
func NewProgress(f *os.File) *Progress {
	return &Progress{W: f, Terminal: IsTerminal(f), LogEvery: 10 * time.Second}
}

// PhaseStart implements Observer.
func (p *Progress) PhaseStart(ev PhaseEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stop, p.done = make(chan struct{}), make(chan struct{})
	every := p.LogEvery
	if p.Terminal {
		every = 200 * time.Millisecond
	}
	go p.tick(ev, every, p.stop, p.done)
}

func (p *Progress) tick(ev PhaseEvent, every time.Duration, stop, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			if p.Terminal {
				fmt.Fprintf(p.W, "\r\033[K%s", progressLine(ev, now))
			} else {
				fmt.Fprintf(p.W, "bench: %s\n", progressLine(ev, now))
			}
		}
	}
}

// PhaseEnd implements Observer.
func (p *Progress) PhaseEnd(ev PhaseEvent, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	close(p.stop)
	<-p.done
	if p.Terminal {
		fmt.Fprint(p.W, "\r\033[K")
	}
	if err == nil && ev.Timed && !p.Terminal {
		fmt.Fprintf(p.W, "bench: %s done in %.1fs\n", phaseName(ev), time.Since(ev.Start).Seconds())
	}
}

func phaseName(ev PhaseEvent) string {
	return fmt.Sprintf("%s %s %d threads %s", ev.Job.System.Label, ev.Job.Group(), ev.Job.Spec.Workers, ev.Phase)
}

// progressLine is e.g. "[=====>    ] 52%  local seq 2 threads write  1.1 GB  3.2s".
func progressLine(ev PhaseEvent, now time.Time) string {
	var b strings.Builder
	if f := ev.Fraction(now); f >= 0 {
		const width = 20
		n := int(f * width)
		fmt.Fprintf(&b, "[%s%s] %3.0f%%  ", strings.Repeat("=", n), strings.Repeat(" ", width-n), f*100)
	}
	b.WriteString(phaseName(ev))
	ops, bytes := ev.Counter.Load()
	switch {
	case bytes > 0:
		fmt.Fprintf(&b, "  %.1f MB", float64(bytes)/1e6)
	case ops > 0:
		fmt.Fprintf(&b, "  %d ops", ops)
	}
	fmt.Fprintf(&b, "  %.1fs", now.Sub(ev.Start).Seconds())
	return b.String()
}
