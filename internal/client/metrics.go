package client

import (
	"tandemfs/internal/metrics"
	"tandemfs/internal/proto"
)

// The calls this client makes, as the mount's users feel them.
var (
	metaCallMetrics    = metrics.Called("meta", proto.OpName)
	storageCallMetrics = metrics.Called("storage", proto.OpName)
	// sentReadMismatches counts pieces sent by a storage server whose
	// bytes did not match their checksum entries here, and were read
	// again (see readSent).
	sentReadMismatches = metrics.Counter("tandem_client_sent_read_mismatches_total",
		"Pieces a storage server sent with sendfile whose bytes did not match their checksums, read again.")
	ecDegradedReads = metrics.Counter("tandem_client_ec_degraded_reads_total",
		"Pieces of erasure-coded files rebuilt from other shards because their own shard was missing, unreachable, slow or bad.")
	ecHedgedReads = metrics.Counter("tandem_client_ec_hedged_reads_total",
		"Shard reads of erasure-coded files that had not answered after the hedge delay, raced by a rebuild from other shards.")
	ecHedgeWins = metrics.Counter("tandem_client_ec_hedge_wins_total",
		"Hedged shard reads where the rebuild from other shards answered first.")
)

// ExportMetrics adds this client's own counts to the process's metrics:
// its block cache, and its calls to the metadata service.
func (c *Client) ExportMetrics() {
	metrics.CounterFunc("tandem_client_block_cache_hits_total", "Reads answered from the client's block cache.",
		func() float64 { return float64(c.BlockCacheStats().Hits) })
	metrics.CounterFunc("tandem_client_block_cache_misses_total", "Reads the block cache could not answer.",
		func() float64 { return float64(c.BlockCacheStats().Misses) })
	metrics.Func("tandem_client_block_cache_bytes", "Bytes the block cache holds.",
		func() float64 { return float64(c.BlockCacheStats().Bytes) })
	metrics.CounterFunc("tandem_client_disk_cache_hits_total", "Reads answered from the client's disk cache (--cache-dir).",
		func() float64 { return float64(c.DiskCacheStats().Hits) })
	metrics.CounterFunc("tandem_client_disk_cache_misses_total", "Reads the disk cache could not answer.",
		func() float64 { return float64(c.DiskCacheStats().Misses) })
	metrics.Func("tandem_client_disk_cache_bytes", "Bytes of blocks the disk cache holds.",
		func() float64 { return float64(c.DiskCacheStats().Used) })
	metrics.CounterFunc("tandem_client_meta_calls_total", "Calls to the metadata service (watches aside).",
		func() float64 { return float64(c.MetaCalls()) })
}
