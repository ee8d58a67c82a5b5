package storage

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// The benchmarks use a 256 MiB working set of 4 MiB chunks on the test's
// temporary directory, through the page cache as the server does.
const (
	benchChunk  = 4 << 20
	benchChunks = 64
)

func fillBench(b *testing.B, tg *Target) {
	p := pattern(1, 1<<20)
	for c := range uint64(benchChunks) {
		for off := int64(0); off < benchChunk; off += 1 << 20 {
			if err := tg.Write(1, c, off, p); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func BenchmarkSeqWrite1MiB(b *testing.B) {
	tg := openTestTarget(b, Options{})
	p := pattern(1, 1<<20)
	b.SetBytes(1 << 20)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		pos := int64(i) % (benchChunks * 4)
		if err := tg.Write(1, uint64(pos/4), (pos%4)<<20, p); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSeqRead1MiB(b *testing.B) {
	tg := openTestTarget(b, Options{})
	fillBench(b, tg)
	p := make([]byte, 1<<20)
	b.SetBytes(1 << 20)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		pos := int64(i) % (benchChunks * 4)
		if n, err := tg.Read(1, uint64(pos/4), p, (pos%4)<<20); err != nil || n != len(p) {
			b.Fatal(n, err)
		}
	}
}

func BenchmarkRandWrite4KiB(b *testing.B) {
	tg := openTestTarget(b, Options{})
	fillBench(b, tg)
	p := pattern(2, 4096)
	r := rand.New(rand.NewPCG(1, 1))
	b.SetBytes(4096)
	b.ResetTimer()
	for b.Loop() {
		if err := tg.Write(1, r.Uint64N(benchChunks), int64(r.IntN(benchChunk/4096))*4096, p); err != nil {
			b.Fatal(err)
		}
	}
	reportIOPS(b)
}

func BenchmarkRandRead4KiB(b *testing.B) {
	tg := openTestTarget(b, Options{})
	fillBench(b, tg)
	p := make([]byte, 4096)
	r := rand.New(rand.NewPCG(1, 1))
	b.SetBytes(4096)
	b.ResetTimer()
	for b.Loop() {
		if _, err := tg.Read(1, r.Uint64N(benchChunks), p, int64(r.IntN(benchChunk/4096))*4096); err != nil {
			b.Fatal(err)
		}
	}
	reportIOPS(b)
}

// The parallel variants show how the engine scales over the cores.
func BenchmarkRandRead4KiBParallel(b *testing.B) {
	tg := openTestTarget(b, Options{})
	fillBench(b, tg)
	b.SetBytes(4096)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		p := make([]byte, 4096)
		r := rand.New(rand.NewPCG(rand.Uint64(), 1))
		for pb.Next() {
			if _, err := tg.Read(1, r.Uint64N(benchChunks), p, int64(r.IntN(benchChunk/4096))*4096); err != nil {
				b.Fatal(err)
			}
		}
	})
	reportIOPS(b)
}

func BenchmarkRandWrite4KiBParallel(b *testing.B) {
	tg := openTestTarget(b, Options{})
	fillBench(b, tg)
	b.SetBytes(4096)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		p := pattern(3, 4096)
		r := rand.New(rand.NewPCG(rand.Uint64(), 1))
		for pb.Next() {
			if err := tg.Write(1, r.Uint64N(benchChunks), int64(r.IntN(benchChunk/4096))*4096, p); err != nil {
				b.Fatal(err)
			}
		}
	})
	reportIOPS(b)
}

// BenchmarkRaw* do the same with plain pread/pwrite on one file: the
// ceiling the engine is measured against.
func rawFile(b *testing.B, fill bool) *os.File {
	f, err := os.Create(filepath.Join(b.TempDir(), "raw"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	if fill {
		p := pattern(1, 1<<20)
		for off := int64(0); off < benchChunks*benchChunk; off += 1 << 20 {
			f.WriteAt(p, off)
		}
	}
	return f
}

func BenchmarkRawSeqWrite1MiB(b *testing.B) {
	f := rawFile(b, false)
	p := pattern(1, 1<<20)
	b.SetBytes(1 << 20)
	for i := 0; b.Loop(); i++ {
		f.WriteAt(p, int64(i%(benchChunks*4))<<20)
	}
}

func BenchmarkRawSeqRead1MiB(b *testing.B) {
	f := rawFile(b, true)
	p := make([]byte, 1<<20)
	b.SetBytes(1 << 20)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		f.ReadAt(p, int64(i%(benchChunks*4))<<20)
	}
}

func BenchmarkRawRandWrite4KiB(b *testing.B) {
	f := rawFile(b, true)
	p := pattern(2, 4096)
	r := rand.New(rand.NewPCG(1, 1))
	b.SetBytes(4096)
	b.ResetTimer()
	for b.Loop() {
		f.WriteAt(p, int64(r.IntN(benchChunks*benchChunk/4096))*4096)
	}
	reportIOPS(b)
}

func BenchmarkRawRandRead4KiB(b *testing.B) {
	f := rawFile(b, true)
	p := make([]byte, 4096)
	r := rand.New(rand.NewPCG(1, 1))
	b.SetBytes(4096)
	b.ResetTimer()
	for b.Loop() {
		f.ReadAt(p, int64(r.IntN(benchChunks*benchChunk/4096))*4096)
	}
	reportIOPS(b)
}

func reportIOPS(b *testing.B) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(b.N)/s, "IOPS")
	}
}
