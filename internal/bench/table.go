package bench

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
)

// metricKey is one row of the results table.
type metricKey struct {
	Group, Phase, Unit string
	Threads            int
}

// cell is one system's figure for a row; ok is false when the run failed
// before measuring it. A system with no cell in a row did not run that test.
type cell struct {
	rate Rate
	ok   bool
}

// tabulate arranges a report by row and system, rows in the order runs
// first produced them.
func tabulate(rep Report) ([]metricKey, map[metricKey]map[string]cell) {
	var keys []metricKey
	cells := map[metricKey]map[string]cell{}
	for _, run := range rep.Runs {
		for _, p := range phasesOf(run.Test) {
			if !p.timed {
				continue
			}
			k := metricKey{run.Group(), p.name, p.unit, run.Threads}
			if cells[k] == nil {
				keys = append(keys, k)
				cells[k] = map[string]cell{}
			}
			res, ok := run.Phase(p.name)
			cells[k][run.System] = cell{res.Rate, ok}
		}
	}
	return keys, cells
}

// WriteTable prints the figures with one column per system and, when
// there are several, the ratio of each to the first.
func WriteTable(w io.Writer, rep Report) error {
	systems := rep.Systems()
	keys, cells := tabulate(rep)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	hdr := []string{"TEST", "PHASE", "UNIT", "THREADS"}
	hdr = append(hdr, systems...)
	for _, s := range systems[min(1, len(systems)):] {
		hdr = append(hdr, s+"/"+systems[0])
	}
	fmt.Fprintln(tw, strings.Join(hdr, "\t")+"\t")
	for _, k := range keys {
		row := []string{k.Group, k.Phase, k.Unit, fmt.Sprint(k.Threads)}
		for _, s := range systems {
			row = append(row, cellText(cells[k], s))
		}
		for _, s := range systems[min(1, len(systems)):] {
			row = append(row, ratio(cells[k][s], cells[k][systems[0]]))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeFootnotes(w, rep)
}

func cellText(row map[string]cell, system string) string {
	c, ran := row[system]
	switch {
	case !ran:
		return "-"
	case !c.ok:
		return "error"
	}
	return c.rate.String()
}

// ratio is "-" when it means nothing: a missing figure, a zero base or an
// infinite rate.
func ratio(c, base cell) string {
	r := float64(c.rate) / float64(base.rate)
	if !c.ok || !base.ok || base.rate == 0 || math.IsInf(r, 0) || math.IsNaN(r) {
		return "-"
	}
	return fmt.Sprintf("%.2fx", r)
}

// writeFootnotes lists the equivalent commands, the notes and the errors.
func writeFootnotes(w io.Writer, rep Report) error {
	var b strings.Builder
	seen := map[string]bool{}
	for _, run := range rep.Runs {
		key := fmt.Sprintf("%s t%d", run.Group(), run.Threads)
		if !seen[key] && run.Command != "" {
			seen[key] = true
			fmt.Fprintf(&b, "  %-14s %s\n", key+":", run.Command)
		}
	}
	if b.Len() > 0 {
		fmt.Fprintf(w, "\nEquivalent commands:\n%s", b.String())
	}
	listRuns(w, rep, "Notes", func(r Run) []string { return r.Notes })
	listRuns(w, rep, "Errors", func(r Run) []string {
		if r.Error == "" {
			return nil
		}
		return []string{r.Error}
	})
	if rep.hasInf() {
		fmt.Fprintln(w, "\n+Inf: the phase did its work in less time than the clock resolves.")
	}
	return nil
}

func listRuns(w io.Writer, rep Report, title string, items func(Run) []string) {
	printed := map[string]bool{}
	for _, run := range rep.Runs {
		for _, it := range items(run) {
			line := fmt.Sprintf("  %s %s t%d: %s", run.System, run.Group(), run.Threads, it)
			if len(printed) == 0 {
				fmt.Fprintf(w, "\n%s:\n", title)
			}
			if !printed[line] {
				printed[line] = true
				fmt.Fprintln(w, line)
			}
		}
	}
}

func (r Report) hasInf() bool {
	for _, run := range r.Runs {
		for _, p := range run.Phases {
			if math.IsInf(float64(p.Rate), 1) {
				return true
			}
		}
	}
	return false
}
