package bench

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func sampleReport() Report {
	run := func(sys string, threads int, write, read Rate) Run {
		return Run{System: sys, Dir: "/d/" + sys, Test: TestSeq, Threads: threads, Command: "iozone …",
			Phases: []PhaseResult{{Name: "write", Unit: UnitMBps, Rate: write}, {Name: "read", Unit: UnitMBps, Rate: read}}}
	}
	failed := Run{System: "b", Test: TestMeta, Variant: "empty", Threads: 1, Error: "meta empty stat: worker 0: lstat /x: no such file or directory"}
	return Report{Runs: []Run{
		run("a", 1, 100, 200), run("a", 2, 150, 300),
		run("b", 1, 50, Rate(math.Inf(1))), run("b", 2, 300, 600), failed,
	}}
}

func TestTheTableShowsEachSystemAndItsRatioToTheFirst(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteTable(&buf, sampleReport()); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		`b/a`,
		`seq\s+write\s+MB/s\s+1\s+100\s+50.0\s+0.50x`,
		`seq\s+read\s+MB/s\s+1\s+200\s+\+Inf\s+-`, // no ratio to infinity
		`seq\s+write\s+MB/s\s+2\s+150\s+300\s+2.00x`,
		`meta empty\s+stat\s+ops/s\s+1\s+-\s+error\s+-`, // a did not run it, b failed
		`b meta empty t1: meta empty stat: worker 0: lstat /x`,
		`\+Inf: the phase did its work in less time than the clock resolves`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestTheHTMLReportIsSelfContainedWithChartsBesideIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "report.html")
	files, err := WriteHTML(path, sampleReport())
	if err != nil {
		t.Fatal(err)
	}
	page, _ := os.ReadFile(path)
	html := string(page)
	if strings.Count(html, "<svg") != 2 || strings.Contains(html, "<?xml") {
		t.Errorf("want the seq and meta charts inline as SVG, found %d", strings.Count(html, "<svg"))
	}
	// Nothing to fetch: no scripts, stylesheets or images from elsewhere.
	if m := regexp.MustCompile(`<script|<link|src=|href=|url\(|@import`).FindString(html); m != "" {
		t.Errorf("the page loads %q", m)
	}
	for _, ext := range []string{".svg", ".png"} {
		name := filepath.Join(filepath.Dir(path), "report-seq"+ext)
		if fi, err := os.Stat(name); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", name, err)
		}
	}
	if len(files) != 5 {
		t.Errorf("files written: %v, want the page and two charts in two formats", files)
	}
}

func TestTheProgressLineShowsHowFarAPhaseIs(t *testing.T) {
	ev := PhaseEvent{Job: Job{System: System{Label: "tmp"}, Spec: Spec{Test: TestSeq, Workers: 2}},
		Phase: "write", Expect: Expect{Bytes: 1000}, Counter: &Counter{}}
	ev.Counter.add(1, 250)
	line := progressLine(ev, ev.Start)
	if !regexp.MustCompile(`^\[=+ +\] +25%`).MatchString(line) || !strings.Contains(line, "tmp seq 2 threads write") {
		t.Errorf("progress line %q", line)
	}
}
