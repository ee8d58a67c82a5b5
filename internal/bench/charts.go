package bench

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"slices"
	"strings"
	"sync"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	_ "gonum.org/v1/plot/vg/vgimg" // registers PNG output
	_ "gonum.org/v1/plot/vg/vgsvg" // registers SVG output
)

// Chart is one figure, like the papers': a test's figures against the
// thread count, or bars when only one thread count was run.
type Chart struct {
	Name  string // file name part, e.g. "meta-3K"
	Title string
	SVG   []byte
	PNG   []byte
}

// sansSerif sets gonum's package-wide default font once, before any plot.
var sansSerif sync.Once

// Charts draws one chart per test variant in the report.
func Charts(rep Report) ([]Chart, error) {
	sansSerif.Do(func() { plot.DefaultFont = font.Font{Typeface: "Liberation", Variant: "Sans"} })
	var charts []Chart
	for _, group := range groups(rep) {
		runs := runsOf(rep, group)
		p, err := drawGroup(group, runs)
		if err != nil {
			return nil, fmt.Errorf("chart %s: %w", group, err)
		}
		c := Chart{Name: strings.ReplaceAll(group, " ", "-"), Title: p.Title.Text}
		if c.SVG, err = render(p, "svg"); err == nil {
			c.PNG, err = render(p, "png")
		}
		if err != nil {
			return nil, fmt.Errorf("chart %s: %w", group, err)
		}
		charts = append(charts, c)
	}
	return charts, nil
}

func groups(rep Report) []string {
	var gs []string
	for _, r := range rep.Runs {
		if !slices.Contains(gs, r.Group()) {
			gs = append(gs, r.Group())
		}
	}
	return gs
}

func runsOf(rep Report, group string) []Run {
	var rs []Run
	for _, r := range rep.Runs {
		if r.Group() == group {
			rs = append(rs, r)
		}
	}
	return rs
}

func render(p *plot.Plot, format string) ([]byte, error) {
	w, err := p.WriterTo(7*vg.Inch, 4.5*vg.Inch, format)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	_, err = w.WriteTo(&buf)
	return buf.Bytes(), err
}

func chartTitle(group string) string {
	test, variant, _ := strings.Cut(group, " ")
	switch test {
	case TestSeq:
		return "Sequential N-to-N throughput (IOzone -i0 -i1 -c -e)"
	case TestRand:
		return "Random I/O N-to-N (IOzone -i2 -O -I)"
	}
	if variant == "empty" {
		return "Metadata, empty files (mdtest -F -L -u)"
	}
	return fmt.Sprintf("Metadata, %s files (mdtest -F -L -u -w -e)", variant)
}

func drawGroup(group string, runs []Run) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = chartTitle(group)
	p.Legend.Top = true
	p.Y.Label.Text = phasesOf(runs[0].Test)[1].unit
	if len(threadCounts(runs)) > 1 {
		return p, drawLines(p, runs)
	}
	return p, drawBars(p, runs)
}

func threadCounts(runs []Run) []int {
	var ts []int
	for _, r := range runs {
		if !slices.Contains(ts, r.Threads) {
			ts = append(ts, r.Threads)
		}
	}
	slices.Sort(ts)
	return ts
}

func timedPhases(test string) []string {
	var names []string
	for _, p := range phasesOf(test) {
		if p.timed {
			names = append(names, p.name)
		}
	}
	return names
}

// plottable leaves out what a chart cannot show: infinite rates, and
// zero on a log scale.
func plottable(r Rate, logScale bool) bool {
	f := float64(r)
	return !math.IsInf(f, 0) && !math.IsNaN(f) && (!logScale || f > 0)
}

// drawLines puts one line per system and phase against the thread count.
// Metadata rates span orders of magnitude (stat against create), so they
// get a log scale, as in the papers' mdtest figures.
func drawLines(p *plot.Plot, runs []Run) error {
	p.X.Label.Text = "threads (total over all clients)"
	logScale := runs[0].Test == TestMeta
	if logScale {
		p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	}
	var series []any
	for _, sys := range systemsOf(runs) {
		for _, phase := range timedPhases(runs[0].Test) {
			xys := points(runs, sys, phase, logScale)
			if len(xys) > 0 {
				series = append(series, fmt.Sprintf("%s %s", sys, phase), xys)
			}
		}
	}
	if len(series) == 0 {
		return fmt.Errorf("no figure to draw")
	}
	if err := plotutil.AddLinePoints(p, series...); err != nil {
		return err
	}
	threadAxis(p, threadCounts(runs))
	headroom(p, logScale)
	return nil
}

// threadAxis ticks the x axis at the thread counts run, on a log scale
// once they span a wide range (1 to 64, as in the papers' sweeps).
func threadAxis(p *plot.Plot, threads []int) {
	ticks := make([]plot.Tick, len(threads))
	for i, t := range threads {
		ticks[i] = plot.Tick{Value: float64(t), Label: fmt.Sprint(t)}
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	if threads[len(threads)-1] >= 8*threads[0] {
		p.X.Scale = plot.LogScale{}
	}
}

// headroom makes space above the lines for the legend, and starts a
// linear axis at zero so that ratios between lines read true.
func headroom(p *plot.Plot, logScale bool) {
	if logScale {
		p.Y.Max *= 10
		return
	}
	p.Y.Min = 0
	p.Y.Max *= 1.35
}

func points(runs []Run, system, phase string, logScale bool) plotter.XYs {
	var xys plotter.XYs
	for _, r := range runs {
		res, ok := r.Phase(phase)
		if r.System == system && ok && plottable(res.Rate, logScale) {
			xys = append(xys, plotter.XY{X: float64(r.Threads), Y: float64(res.Rate)})
		}
	}
	return xys
}

func systemsOf(runs []Run) []string {
	var ss []string
	for _, r := range runs {
		if !slices.Contains(ss, r.System) {
			ss = append(ss, r.System)
		}
	}
	return ss
}

// drawBars shows a single thread count: one group of bars per phase, one
// bar per system.
func drawBars(p *plot.Plot, runs []Run) error {
	phases := timedPhases(runs[0].Test)
	systems := systemsOf(runs)
	p.X.Label.Text = fmt.Sprintf("%d threads", runs[0].Threads)
	width := vg.Points(float64(300/len(phases)) / float64(len(systems)+1))
	for i, sys := range systems {
		vals := make(plotter.Values, len(phases))
		for j, phase := range phases {
			vals[j] = barValue(runs, sys, phase)
		}
		bars, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return err
		}
		bars.Color = plotutil.Color(i)
		bars.LineStyle.Color = color.Black
		bars.Offset = vg.Length(float64(i)-float64(len(systems)-1)/2) * width
		p.Add(bars)
		p.Legend.Add(sys, bars)
	}
	p.NominalX(phases...)
	// Half a slot of margin on each side keeps the outer bars inside.
	p.X.Min, p.X.Max = -0.5, float64(len(phases))-0.5
	headroom(p, false)
	return nil
}

func barValue(runs []Run, system, phase string) float64 {
	for _, r := range runs {
		if res, ok := r.Phase(phase); ok && r.System == system && plottable(res.Rate, false) {
			return float64(res.Rate)
		}
	}
	return 0
}
