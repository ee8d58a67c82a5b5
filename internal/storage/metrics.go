package storage

import (
	"strconv"

	"tandemfs/internal/metrics"
	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
)

var (
	// servedMetrics records the requests this server answers: clients'
	// and, forwarded along chains, other heads'.
	servedMetrics = metrics.Served("storage", proto.OpName)
	// peerCallMetrics records calls to other storage servers (forwarded
	// writes, resync copies, repairs).
	peerCallMetrics = metrics.Called("storage", proto.OpName)
	metaCallMetrics = metrics.Called("meta", proto.OpName)

	// checksumErrors counts blocks found bad on read or scrub: each one
	// is a disk returning wrong data.
	checksumErrors = metrics.Counter("tandem_storage_checksum_errors_total",
		"Blocks whose contents did not match their checksum when read or scrubbed.")
	// resyncCopiedBytes counts what this server, as a chain head, copied
	// to returning or replacement members.
	resyncCopiedBytes = metrics.Counter("tandem_storage_resync_copied_bytes_total",
		"Bytes copied to chain members that were resyncing.")
	// The flushes behind large client writes (flushbehind.go): how many,
	// how long they took, how many failed.
	flushBehindFlushes = metrics.Counter("tandem_storage_flush_behind_total",
		"Flushes of a target's file system behind large client writes (syncfs), ended or failed.")
	flushBehindSeconds = metrics.Counter("tandem_storage_flush_behind_seconds_total",
		"Seconds spent in flushes behind large client writes.")
	flushBehindErrors = metrics.Counter("tandem_storage_flush_behind_errors_total",
		"Flushes behind large client writes that failed.")
)

// metaClient is an RPC client for a metadata service at addr.
func metaClient(addr string, secret rpc.Secret) *rpc.Client {
	c := rpc.NewClient(addr, secret)
	c.Observer = metaCallMetrics
	return c
}

// ExportMetrics adds this server's per-target gauges to the process's
// metrics: each target's file system size and free bytes, labelled with
// the target's ID and directory, so a filling disk can raise an alert.
func (s *Service) ExportMetrics() {
	capacity := func(name, help string, pick func(total, free uint64) uint64) {
		metrics.GaugesFunc(name, help, []string{"target", "dir"}, func(emit func(float64, ...string)) {
			for _, t := range s.Targets() {
				if total, free, err := t.Capacity(); err == nil {
					emit(float64(pick(total, free)), strconv.FormatUint(uint64(t.ID()), 10), t.Dir())
				}
			}
		})
	}
	capacity("tandem_storage_target_size_bytes", "Size of the file system holding the target.",
		func(total, _ uint64) uint64 { return total })
	capacity("tandem_storage_target_free_bytes", "Bytes free for the target on its file system.",
		func(_, free uint64) uint64 { return free })
}
