package hamatrix

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// line is the scenario's result in one line, for the test log.
func (r *result) line() string {
	parts := []string{
		"checkstream " + orDash(r.check),
		"detect+failover " + r.detectText(),
		"longest stall " + r.stallText(),
		"service moved " + yesNo(r.moved),
		"resync " + durText(r.resync),
		"metadata leader on " + orDash(r.leader),
	}
	if len(r.notes) > 0 {
		parts = append(parts, strings.Join(r.notes, "; "))
	}
	if r.failed {
		parts = append(parts, "TEST FAILED")
	}
	return strings.Join(parts, " | ")
}

func (r *result) detectText() string {
	exp := "expected"
	if !r.sc.failover {
		exp = "none expected"
	}
	return fmt.Sprintf("%s (%s)", durText(r.detect), exp)
}

func (r *result) stallText() string {
	if !r.measured {
		return "–"
	}
	return fmt.Sprintf("%s (%s)", durText(r.stall), r.stallOf)
}

func durText(d time.Duration) string {
	if d < 0 {
		return "none"
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

// writeReport writes the results as a markdown table to $HA_MATRIX_REPORT,
// if set (relative to the repository root).
func writeReport(t *testing.T, results []*result, disk *diskBench) {
	path := os.Getenv("HA_MATRIX_REPORT")
	if path == "" || len(results) == 0 {
		return
	}
	if !filepath.IsAbs(path) {
		path = filepath.Join(repoRoot(t), path)
	}
	var b strings.Builder
	mode := os.Getenv("HA_MATRIX")
	if mode == "" {
		mode = "short"
	}
	fmt.Fprintf(&b, "# HA failure matrix: results\n\n")
	fmt.Fprintf(&b, "Written by tests/hamatrix (HA_MATRIX=%s, streams of %s, failures held %v) at commit %s\non %s, %d cores, %s.\n",
		mode, sizes().write, hold, commit(t), time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), runtime.Version())
	fmt.Fprintf(&b, "Each scenario on a fresh cluster in network namespaces (srv1, srv2: metadata replica +\n")
	fmt.Fprintf(&b, "storage server with 2 targets; third: metadata replica; cli: FUSE mount), failure injected\n")
	fmt.Fprintf(&b, "%.1f s into a load of 2 genstream writers and 1 reader (which checks each copy as it reads it);\n", injectAfter.Seconds())
	fmt.Fprintf(&b, "stall = longest 4 KiB write+fsync\n")
	fmt.Fprintf(&b, "or open+read on the mount, probed every %v; times from `tandem status --json --watch %v`\n", probeEvery, pollEvery)
	fmt.Fprintf(&b, "on cli.\n\n")
	b.WriteString("| # | scenario | data check (checkstream) | time to detect + fail over | longest client stall | service moved | resync after heal | notes |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		notes := append([]string(nil), r.notes...)
		if r.leader != "" {
			notes = append(notes, "metadata leader on "+r.leader)
		}
		if r.failed {
			notes = append([]string{"**TEST FAILED**"}, notes...)
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s | %s | %s |\n", r.sc.num, cell(r.sc.name), cell(orDash(r.check)),
			cell(r.detectText()), cell(r.stallText()), yesNo(r.moved), durText(r.resync), cell(strings.Join(notes, "; ")))
	}
	if d := disk.text(); d != "" {
		fmt.Fprintf(&b, "\n%s %s\n", d, resyncsAgainst(results, disk.half()))
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Errorf("writing the report: %v", err)
		return
	}
	t.Logf("report written to %s", path)
}

// resyncsAgainst says which scenarios' resyncs copied at half the disk's
// bandwidth or more.
func resyncsAgainst(results []*result, half float64) string {
	if half <= 0 {
		return ""
	}
	var met, short []string
	for _, r := range results {
		if r.resyncRate <= 0 {
			continue
		}
		s := fmt.Sprintf("%d (%.0f MB/s)", r.sc.num, r.resyncRate)
		if r.resyncRate >= half {
			met = append(met, s)
		} else {
			short = append(short, s)
		}
	}
	if len(met)+len(short) == 0 {
		return "No scenario copied anything."
	}
	text := fmt.Sprintf("Resyncs at or above it: %d of %d", len(met), len(met)+len(short))
	if len(met) > 0 {
		text += ", scenarios " + strings.Join(met, ", ")
	}
	if len(short) > 0 {
		text += "; below it: " + strings.Join(short, ", ")
	}
	return text + "."
}

// commit names the commit the tested binary was built from, with
// "+changes" if the work tree differs from it.
func commit(t *testing.T) string {
	if os.Getenv("TANDEM_BIN") != "" {
		return "(unknown: $TANDEM_BIN)"
	}
	root := repoRoot(t)
	out, err := exec.Command("git", "-C", root, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "(unknown)"
	}
	id := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
		id += "+changes"
	}
	return id
}

// cell makes text safe inside a markdown table cell.
func cell(s string) string {
	return strings.NewReplacer("|", "\\|", "\n", " ").Replace(s)
}
