package metrics

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// scrape fetches /metrics from a Listen address and returns its lines.
func scrape(t *testing.T, addr string) []string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(string(b), "\n")
}

// has reports whether lines hold exactly the sample line want.
func has(lines []string, want string) bool {
	for _, l := range lines {
		if l == want {
			return true
		}
	}
	return false
}

// runs numbers the runs of a test in this process: metrics live in one
// registry for the process's life, so a test run again (go test -count)
// names its own.
var runs int

func unique(name string) string {
	runs++
	return fmt.Sprintf("%s%d", name, runs)
}

func testOpName(op uint16) string {
	if op == 7 {
		return "seven"
	}
	return "unknown"
}

// What an Observer records is on /metrics: per service and op, the count
// and time (histogram), the errors and the bytes each way; op codes
// without a name share the label "unknown".
func TestObservedRPCsAreServedOnMetrics(t *testing.T) {
	addr, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	svc := unique("spec")
	o := Served(svc, testOpName)
	start := time.Now()
	o.Observe(7, start, 100, 1000, false)
	o.Observe(7, start, 50, 500, true)
	o.Observe(4000, start, 1, 2, true)
	c := Called(svc, testOpName)
	c.Observe(7, start, 3, 4, false)

	lines := scrape(t, addr.String())
	for _, want := range []string{
		fmt.Sprintf(`tandem_rpc_served_seconds_count{op="seven",service="%s"} 2`, svc),
		fmt.Sprintf(`tandem_rpc_served_errors_total{op="seven",service="%s"} 1`, svc),
		fmt.Sprintf(`tandem_rpc_served_sent_bytes_total{op="seven",service="%s"} 150`, svc),
		fmt.Sprintf(`tandem_rpc_served_received_bytes_total{op="seven",service="%s"} 1500`, svc),
		fmt.Sprintf(`tandem_rpc_served_errors_total{op="unknown",service="%s"} 1`, svc),
		fmt.Sprintf(`tandem_rpc_called_seconds_count{op="seven",service="%s"} 1`, svc),
		fmt.Sprintf(`tandem_rpc_called_sent_bytes_total{op="seven",service="%s"} 3`, svc),
	} {
		if !has(lines, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if !has(lines, "# TYPE go_goroutines gauge") || !has(lines, "# TYPE process_cpu_seconds_total counter") {
		t.Errorf("/metrics lacks the Go runtime's and the process's metrics")
	}
}

// A gauge or counter read at scrape time shows its function's value now;
// adding a name again keeps the first function.
func TestFuncsAreReadAtEveryScrape(t *testing.T) {
	addr, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	v := 1.0
	gauge, counter := unique("tandem_spec_gauge"), unique("tandem_spec")+"_total"
	Func(gauge, "a gauge of the test", func() float64 { return v })
	Func(gauge, "a second one of the same name", func() float64 { return -1 })
	CounterFunc(counter, "a counter of the test", func() float64 { return 2 * v })
	if l := scrape(t, addr.String()); !has(l, gauge+" 1") || !has(l, counter+" 2") {
		t.Errorf("first scrape lacks the values 1 and 2")
	}
	v = 5
	if l := scrape(t, addr.String()); !has(l, gauge+" 5") || !has(l, counter+" 10") {
		t.Errorf("second scrape lacks the values 5 and 10")
	}
}

func TestListenOnABadAddressNamesIt(t *testing.T) {
	_, err := Listen("127.0.0.1:99999")
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:99999") {
		t.Fatalf("got %v, want an error naming the address", err)
	}
}

// Labelled gauges come out one sample per emitted label set.
func TestGaugesFuncEmitsOneSamplePerLabelSet(t *testing.T) {
	addr, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	GaugesFunc("tandem_spec_free_bytes", "free bytes of the test's disks", []string{"disk"}, func(emit func(float64, ...string)) {
		emit(10, "a")
		emit(20, "b")
	})
	l := scrape(t, addr.String())
	if !has(l, `tandem_spec_free_bytes{disk="a"} 10`) || !has(l, `tandem_spec_free_bytes{disk="b"} 20`) {
		t.Errorf("/metrics lacks a sample per disk")
	}
}

// BenchmarkObserve is what every RPC pays on each side for its metrics.
func BenchmarkObserve(b *testing.B) {
	o := Served("bench", testOpName)
	start := time.Now()
	for b.Loop() {
		o.Observe(7, start, 4200, 100, false)
	}
}
