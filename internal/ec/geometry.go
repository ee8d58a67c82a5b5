package ec

// Geometry is a scheme with its cell size: where each byte of a file
// lives.
type Geometry struct {
	Scheme
	Cell uint64 // bytes of the file per data shard of a stripe (the chunk size)
}

// StripeBytes is the file bytes one stripe holds, K cells.
func (g Geometry) StripeBytes() uint64 { return uint64(g.Data) * g.Cell }

// Stripe is the stripe holding file offset off.
func (g Geometry) Stripe(off uint64) uint64 { return off / g.StripeBytes() }

// StripeStart is the file offset of stripe s's first byte.
func (g Geometry) StripeStart(s uint64) uint64 { return s * g.StripeBytes() }

// ShardLen is how many bytes shard j of a stripe holds when the stripe
// has length bytes of the file (from its start; at most StripeBytes):
// a data shard its cell's bytes below length, a parity shard as many as
// the longest data shard. Past its length a shard reads as zeros, so a
// file smaller than a cell costs its size once plus once per parity
// shard, not a whole stripe.
func (g Geometry) ShardLen(j int, length uint64) uint64 {
	if j >= g.Data {
		return min(length, g.Cell)
	}
	start := uint64(j) * g.Cell
	if length <= start {
		return 0
	}
	return min(length-start, g.Cell)
}

// Piece is the part of a file range that falls into one data cell.
type Piece struct {
	Stripe uint64
	Shard  int    // data shard, 0..K-1
	Off    uint64 // offset inside the shard
	Pos    uint64 // offset inside the range
	N      uint64
}

// Split cuts the file range [off, off+n) into the data cells it covers,
// in file order.
func (g Geometry) Split(off, n uint64) []Piece {
	var out []Piece
	for pos := uint64(0); pos < n; {
		at := off + pos
		s := g.Stripe(at)
		within := at - g.StripeStart(s)
		j := within / g.Cell
		inCell := within % g.Cell
		take := min(g.Cell-inCell, n-pos)
		out = append(out, Piece{Stripe: s, Shard: int(j), Off: inCell, Pos: pos, N: take})
		pos += take
	}
	return out
}
