package client

import (
	"tandemfs/internal/metrics"
	"tandemfs/internal/proto"
)

// The calls this client makes, as the mount's users feel them.
var (
	metaCallMetrics    = metrics.Called("meta", proto.OpName)
	storageCallMetrics = metrics.Called("storage", proto.OpName)
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
	metrics.CounterFunc("tandem_client_meta_calls_total", "Calls to the metadata service (watches aside).",
		func() float64 { return float64(c.MetaCalls()) })
}
