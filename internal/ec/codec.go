package ec

import (
	"errors"
	"fmt"
	"sync"

	"github.com/klauspost/reedsolomon"
)

// Codec computes and checks parity, and rebuilds lost shards, for one
// scheme. It is safe for concurrent use.
type Codec struct {
	scheme Scheme
	enc    reedsolomon.Encoder
}

var codecs sync.Map // Scheme -> *Codec

// CodecFor returns the codec of scheme s (built once per scheme: the
// encoding matrices are reused).
func CodecFor(s Scheme) (*Codec, error) {
	if c, ok := codecs.Load(s); ok {
		return c.(*Codec), nil
	}
	if err := s.Check(); err != nil {
		return nil, err
	}
	enc, err := reedsolomon.New(s.Data, s.Parity)
	if err != nil {
		return nil, fmt.Errorf("erasure coding %s: %w", s, err)
	}
	c, _ := codecs.LoadOrStore(s, &Codec{scheme: s, enc: enc})
	return c.(*Codec), nil
}

// Scheme is the codec's scheme.
func (c *Codec) Scheme() Scheme { return c.scheme }

// ErrTooFewShards: fewer than K shards of a stripe are readable, so it
// cannot be rebuilt.
var ErrTooFewShards = errors.New("too few shards of the stripe are readable to rebuild it")

// Encode returns the M parity shards, n bytes each, of the K data shards
// in data; a data shard shorter than n (the end of a file) counts as
// padded with zeros.
func (c *Codec) Encode(data [][]byte, n int) ([][]byte, error) {
	if len(data) != c.scheme.Data {
		return nil, fmt.Errorf("erasure coding %s: %d data shards given", c.scheme, len(data))
	}
	shards := make([][]byte, c.scheme.Shards())
	for j, d := range data {
		if len(d) > n {
			return nil, fmt.Errorf("erasure coding %s: data shard %d is %d bytes, more than %d", c.scheme, j, len(d), n)
		}
		shards[j] = padded(d, n)
	}
	for j := c.scheme.Data; j < len(shards); j++ {
		shards[j] = make([]byte, n)
	}
	if n == 0 {
		return shards[c.scheme.Data:], nil
	}
	if err := c.enc.Encode(shards); err != nil {
		return nil, fmt.Errorf("erasure coding %s: %w", c.scheme, err)
	}
	return shards[c.scheme.Data:], nil
}

// ReconstructData fills in the missing (nil) data shards of shards (K+M
// of them, every present one n bytes; a shorter one counts as padded
// with zeros) from any K present ones. The shards passed are pieces at
// the same offset of each shard: a piece of a stripe rebuilds alone.
func (c *Codec) ReconstructData(shards [][]byte, n int) error {
	if len(shards) != c.scheme.Shards() {
		return fmt.Errorf("erasure coding %s: %d shards given", c.scheme, len(shards))
	}
	present := 0
	for j, s := range shards {
		if s != nil {
			shards[j] = padded(s, n)
			present++
		}
	}
	if present < c.scheme.Data {
		return fmt.Errorf("erasure coding %s: %d of %d shards readable: %w", c.scheme, present, len(shards), ErrTooFewShards)
	}
	if n == 0 {
		for j := 0; j < c.scheme.Data; j++ {
			if shards[j] == nil {
				shards[j] = []byte{}
			}
		}
		return nil
	}
	for j := range shards {
		if shards[j] == nil {
			shards[j] = make([]byte, 0, n)
		}
	}
	if err := c.enc.ReconstructData(shards); err != nil {
		return fmt.Errorf("erasure coding %s: %w", c.scheme, err)
	}
	return nil
}

// Verify reports whether the parity shards agree with the data shards
// (all K+M present, n bytes each, shorter ones padded with zeros).
func (c *Codec) Verify(shards [][]byte, n int) (bool, error) {
	if len(shards) != c.scheme.Shards() {
		return false, fmt.Errorf("erasure coding %s: %d shards given", c.scheme, len(shards))
	}
	full := make([][]byte, len(shards))
	for j, s := range shards {
		if s == nil {
			return false, fmt.Errorf("erasure coding %s: shard %d missing", c.scheme, j)
		}
		full[j] = padded(s, n)
	}
	if n == 0 {
		return true, nil
	}
	return c.enc.Verify(full)
}

// padded is b extended with zeros to n bytes (b itself when it is n).
func padded(b []byte, n int) []byte {
	if len(b) == n {
		return b
	}
	p := make([]byte, n)
	copy(p, b)
	return p
}
