package stream

import (
	"io"
	"testing"
)

// The requirement is 1 GB/s for each of gen and check on a 2-core machine;
// these benchmarks measure the single-core cost without pipes or disks.

func BenchmarkGenerate(b *testing.B) {
	buf := make([]byte, copyBufferSize)
	g := NewGenerator(1, 1<<62)
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		if _, err := io.ReadFull(g, buf); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCheck(b *testing.B) {
	const size = 64 << 20
	data := make([]byte, size)
	if _, err := io.ReadFull(NewGenerator(1, size), data); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(size)
	for b.Loop() {
		c := NewChecker(CheckOptions{})
		for p := data; len(p) > 0; p = p[copyBufferSize:] {
			c.Write(p[:copyBufferSize])
		}
		if r := c.Report(); !r.OK {
			b.Fatal("clean stream reported as damaged")
		}
	}
}

// BenchmarkCheckGarbage measures the slow path: every block compared byte by
// byte, as when a copy is shifted or overwritten.
func BenchmarkCheckGarbage(b *testing.B) {
	const size = 8 << 20
	data := make([]byte, size)
	if _, err := io.ReadFull(NewGenerator(1, size), data); err != nil {
		b.Fatal(err)
	}
	copy(data[BlockSize:], data[BlockSize+1:]) // shift all but the first block by a byte
	b.SetBytes(size)
	for b.Loop() {
		c := NewChecker(CheckOptions{})
		c.Write(data)
		c.Report()
	}
}
