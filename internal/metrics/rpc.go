package metrics

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// RPC operation codes below this get their label values resolved once and
// kept in an array, so observing a request costs a few atomic adds and no
// map lookup; TandemFS's codes are all far below it.
const cachedOps = 256

// rpcSet is one side of the RPC metrics: requests served or calls made.
type rpcSet struct {
	seconds  *prometheus.HistogramVec
	errors   *prometheus.CounterVec
	received *prometheus.CounterVec
	sent     *prometheus.CounterVec
}

func newRPCSet(prefix, what string) *rpcSet {
	labels := []string{"service", "op"}
	bytes := func(dir string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prefix + "_" + dir + "_bytes_total",
			Help: "Bytes " + dir + " in " + what + ", frames included.",
		}, labels)
	}
	return &rpcSet{
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: prefix + "_seconds",
			Help: "Time taken by " + what + ".",
			// 25 µs (a cached answer on loopback) to 6.5 s (a call
			// waiting out a failover).
			Buckets: prometheus.ExponentialBuckets(25e-6, 2, 19),
		}, labels),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prefix + "_errors_total",
			Help: "Failed " + what + " (error replies and transport failures).",
		}, labels),
		received: bytes("received"),
		sent:     bytes("sent"),
	}
}

var (
	served = newRPCSet("tandem_rpc_served", "requests served by this process")
	called = newRPCSet("tandem_rpc_called", "calls this process made to other services")
)

// opMetrics are one (service, op) pair's children of an rpcSet.
type opMetrics struct {
	seconds                prometheus.Observer
	errors, received, sent prometheus.Counter
}

// Observer records RPCs of one service, on one side (see Served, Called).
type Observer struct {
	set     *rpcSet
	service string
	opName  func(uint16) string
	ops     [cachedOps]atomic.Pointer[opMetrics]
}

// Served returns the Observer of requests this process serves as service
// (e.g. "meta", "storage"); opName names operation codes.
func Served(service string, opName func(uint16) string) *Observer {
	return &Observer{set: served, service: service, opName: opName}
}

// Called returns the Observer of calls this process makes to service.
func Called(service string, opName func(uint16) string) *Observer {
	return &Observer{set: called, service: service, opName: opName}
}

// Observe records one RPC of operation op that began at start, sent and
// received the given bytes, and failed if failed is set.
func (o *Observer) Observe(op uint16, start time.Time, sent, received int, failed bool) {
	m := o.metricsOf(op)
	m.seconds.Observe(time.Since(start).Seconds())
	m.sent.Add(float64(sent))
	m.received.Add(float64(received))
	if failed {
		m.errors.Inc()
	}
}

func (o *Observer) metricsOf(op uint16) *opMetrics {
	if op < cachedOps {
		if m := o.ops[op].Load(); m != nil {
			return m
		}
	}
	name := o.opName(op)
	m := &opMetrics{
		seconds:  o.set.seconds.WithLabelValues(o.service, name),
		errors:   o.set.errors.WithLabelValues(o.service, name),
		received: o.set.received.WithLabelValues(o.service, name),
		sent:     o.set.sent.WithLabelValues(o.service, name),
	}
	if op < cachedOps {
		o.ops[op].Store(m)
	}
	return m
}
