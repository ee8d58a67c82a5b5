// Package ec is the arithmetic of erasure-coded files: which stripe, shard
// and offset a byte of a file lives at, how long each shard of a stripe
// is, and the Reed-Solomon coding of a stripe's shards
// (github.com/klauspost/reedsolomon, SIMD; no Galois arithmetic here).
//
// A file coded K+M is cut into stripes of K cells of the file's chunk
// size: stripe s holds the file's bytes [s·K·cell, (s+1)·K·cell), data
// shard j of it the j'th cell, and M parity shards are computed from the
// K data shards. Each shard of the file lives on its own target (on its
// own server or rack), so any M of them may be lost.
package ec

import (
	"fmt"
	"strconv"
	"strings"
)

// Limits of a scheme: up to 16 data shards (RAID6 8+2 and HDFS's 6+3
// fit; wider stripes make small files and rebuilds costly) and up to 4
// parity shards.
const (
	MinData   = 2
	MaxData   = 16
	MinParity = 1
	MaxParity = 4
)

// Scheme is K data and M parity shards per stripe.
type Scheme struct {
	Data   int
	Parity int
}

// Shards is K+M.
func (s Scheme) Shards() int { return s.Data + s.Parity }

func (s Scheme) String() string { return fmt.Sprintf("%d+%d", s.Data, s.Parity) }

// IsZero reports whether s is no scheme (a replicated file).
func (s Scheme) IsZero() bool { return s.Data == 0 && s.Parity == 0 }

// Check says what is wrong with s, naming the limit it breaks.
func (s Scheme) Check() error {
	switch {
	case s.Data < MinData || s.Data > MaxData:
		if s.Data == 1 {
			return fmt.Errorf("erasure coding %s: one data shard is %d copies; use --replicas %d", s, s.Parity+1, s.Parity+1)
		}
		return fmt.Errorf("erasure coding %s: the data shards (K) must be %d to %d", s, MinData, MaxData)
	case s.Parity < MinParity || s.Parity > MaxParity:
		if s.Parity == 0 {
			return fmt.Errorf("erasure coding %s: no parity shard would survive no failure; M must be %d to %d", s, MinParity, MaxParity)
		}
		return fmt.Errorf("erasure coding %s: the parity shards (M) must be %d to %d", s, MinParity, MaxParity)
	}
	return nil
}

// Parse reads "K+M", as in `tandem stripe set --ec 8+2`.
func Parse(text string) (Scheme, error) {
	k, m, ok := strings.Cut(strings.TrimSpace(text), "+")
	kn, err1 := strconv.Atoi(k)
	mn, err2 := strconv.Atoi(m)
	if !ok || err1 != nil || err2 != nil {
		return Scheme{}, fmt.Errorf("erasure coding %q: want K+M, data and parity shards, such as 4+2 or 8+2", text)
	}
	s := Scheme{Data: kn, Parity: mn}
	return s, s.Check()
}
