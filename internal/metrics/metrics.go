// Package metrics exports what a TandemFS process does as Prometheus
// metrics: the requests its RPC server served and the calls its RPC
// clients made (per service and operation: count, latency, errors,
// bytes), and the counters and gauges its packages add (checksum
// failures, resync copies, failovers and fencing, Raft state, chains,
// block cache). One registry per process, served on /metrics by Listen,
// with the Go runtime's and the process's metrics beside them.
//
// Everything here is process-wide, as Prometheus expects of an exporter:
// a test that runs several services in one process sees their sums.
package metrics

import (
	"fmt"
	"net"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

var registry = prometheus.NewRegistry()

func init() {
	registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		served.seconds, served.errors, served.received, served.sent,
		called.seconds, called.errors, called.received, called.sent,
	)
}

// Counter adds a counter of events (e.g. checksum failures) to the
// process's metrics. Call it once per name, from a package variable.
func Counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	registry.MustRegister(c)
	return c
}

// CounterVec adds a family of counters told apart by the given labels
// (e.g. fence agent runs by agent and result). Like Counter, once per
// name.
func CounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	registry.MustRegister(c)
	return c
}

// Func adds a gauge whose value f returns at every scrape (e.g. whether
// this metadata service leads). A name added twice keeps the first f:
// gauges belong to the process's one service of their kind.
func Func(name, help string, f func() float64) {
	addFunc(name, func() prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	})
}

// CounterFunc adds a counter read from f at every scrape, for counts a
// package already keeps (e.g. block cache hits). Like Func, the first f
// of a name stays.
func CounterFunc(name, help string, f func() float64) {
	addFunc(name, func() prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f)
	})
}

var (
	funcsMu sync.Mutex
	funcs   = map[string]bool{} // names added by addFunc
)

// addFunc registers the collector newCollector makes unless name was
// added before.
func addFunc(name string, newCollector func() prometheus.Collector) {
	funcsMu.Lock()
	defer funcsMu.Unlock()
	if funcs[name] {
		return
	}
	registry.MustRegister(newCollector()) // panics only on an invalid name: a programming error
	funcs[name] = true
}

// Handler serves the registry in Prometheus's text format.
func Handler() http.Handler {
	return promhttp.HandlerFor(registry, promhttp.HandlerOpts{})
}

// Listen serves /metrics on addr in the background and returns the
// address taken (addr may name port 0).
func Listen(addr string) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", Handler())
	go http.Serve(ln, mux)
	return ln.Addr(), nil
}

// GaugesFunc adds a family of gauges with the given label names whose
// samples f emits at every scrape, one emit per label set (e.g. each
// target's free bytes). Like Func, the first f of a name stays.
func GaugesFunc(name, help string, labels []string, f func(emit func(value float64, labelValues ...string))) {
	addFunc(name, func() prometheus.Collector {
		return &gaugesFunc{desc: prometheus.NewDesc(name, help, labels, nil), f: f}
	})
}

type gaugesFunc struct {
	desc *prometheus.Desc
	f    func(emit func(value float64, labelValues ...string))
}

func (g *gaugesFunc) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

func (g *gaugesFunc) Collect(ch chan<- prometheus.Metric) {
	g.f(func(v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, v, lv...)
	})
}
