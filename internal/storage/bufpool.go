package storage

import (
	"math/bits"
	"sync"
)

// Scratch buffers are pooled by power-of-two size class so that a request
// never allocates a big buffer in the steady state, and a small request
// does not pin a big one.
const (
	minClassShift = 12 // 4 KiB
	maxClassShift = 23 // 8 MiB: a 4 MiB request plus its boundary blocks
)

var bufPools [maxClassShift - minClassShift + 1]sync.Pool

// getBuf returns a buffer of length n. Pass it back with putBuf.
func getBuf(n int) *[]byte {
	c := sizeClass(n)
	if c < 0 {
		b := make([]byte, n)
		return &b
	}
	if v := bufPools[c].Get(); v != nil {
		bp := v.(*[]byte)
		*bp = (*bp)[:n]
		return bp
	}
	b := make([]byte, n, 1<<(c+minClassShift))
	return &b
}

func putBuf(bp *[]byte) {
	c := sizeClass(cap(*bp))
	if c < 0 || cap(*bp) != 1<<(c+minClassShift) {
		return
	}
	bufPools[c].Put(bp)
}

// sizeClass is the index of the smallest class holding n bytes, or -1.
func sizeClass(n int) int {
	if n <= 1<<minClassShift {
		return 0
	}
	s := bits.Len(uint(n - 1))
	if s > maxClassShift {
		return -1
	}
	return s - minClassShift
}
