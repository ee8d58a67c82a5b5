package stream

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"testing"
)

func generate(t testing.TB, seed Seed, size int64) []byte {
	t.Helper()
	data, err := io.ReadAll(NewGenerator(seed, size))
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(data)) != size {
		t.Fatalf("generated %d bytes, want %d", len(data), size)
	}
	return data
}

func TestEveryBlockStartsWithAHeaderNamingItsStreamAndOffset(t *testing.T) {
	const size = 3*BlockSize + 100
	data := generate(t, 42, size)
	for off := int64(0); off < size; off += BlockSize {
		line := string(data[off : off+HeaderSize])
		want := fmt.Sprintf("TDS %016x %016x %016x %08x\n", 42, off, size, headerCheck(42, size, off))
		if line != want {
			t.Errorf("header at %d = %q, want %q", off, line, want)
		}
	}
}

// The format is an interface: streams written by one version of tandem are
// checked by another. These golden values freeze it.
func TestFormatIsStable(t *testing.T) {
	data := generate(t, 42, 1<<20)
	if got, want := string(data[:HeaderSize]), "TDS 000000000000002a 0000000000000000 0000000000100000 7795faa4\n"; got != want {
		t.Errorf("first header = %q, want %q", got, want)
	}
	sum := sha256.Sum256(data)
	if got, want := hex.EncodeToString(sum[:]), "eab5f701fc46ce544865c406a9a15dbbd9716803c9f14e412774ec10139de27b"; got != want {
		t.Errorf("sha256 of the first MiB of stream 42 = %s, want %s", got, want)
	}
}

func TestNoByteOfAStreamIsZero(t *testing.T) {
	data := generate(t, 0, 64*BlockSize+7)
	if i := bytes.IndexByte(data, 0); i >= 0 {
		t.Fatalf("zero byte at offset %d", i)
	}
}

func TestGenerationIsDeterministicAndSeedDependent(t *testing.T) {
	a := generate(t, 7, 8*BlockSize)
	if !bytes.Equal(a, generate(t, 7, 8*BlockSize)) {
		t.Error("two generations of one stream differ")
	}
	b := generate(t, 8, 8*BlockSize)
	for off := 0; off < len(a); off += BlockSize {
		if bytes.Equal(a[off+HeaderSize:off+BlockSize], b[off+HeaderSize:off+BlockSize]) {
			t.Errorf("streams 7 and 8 share the payload at %d", off)
		}
	}
	seen := map[string]int{}
	for off := 0; off < len(a); off += BlockSize {
		p := string(a[off+HeaderSize : off+BlockSize])
		if prev, dup := seen[p]; dup {
			t.Errorf("blocks at %d and %d share a payload", prev, off)
		}
		seen[p] = off
	}
}

func TestShortLastBlockIsThePrefixOfAWholeOne(t *testing.T) {
	const size = 2*BlockSize + 1000
	short := generate(t, 5, size)
	var whole [BlockSize]byte
	fillBlock(whole[:], 5, size, 2*BlockSize)
	if !bytes.Equal(short[2*BlockSize:], whole[:1000]) {
		t.Error("last block is not the prefix of the block that would be there")
	}
}

func TestReadReadAtAndWriteToAgreeWhateverTheChunking(t *testing.T) {
	const size = 5*BlockSize + 333
	want := generate(t, 3, size)

	for _, chunk := range []int{1, 7, 63, 64, 65, BlockSize - 1, BlockSize, BlockSize + 1, 3*BlockSize + 5} {
		g := NewGenerator(3, size)
		var got []byte
		buf := make([]byte, chunk)
		for {
			n, err := g.Read(buf)
			got = append(got, buf[:n]...)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(got, want) {
			t.Errorf("Read in chunks of %d differs", chunk)
		}
	}

	g := NewGenerator(3, size)
	for _, off := range []int64{0, 1, 63, BlockSize - 2, BlockSize, 2*BlockSize + 100, size - 10} {
		buf := make([]byte, 3000)
		n, err := g.ReadAt(buf, off)
		wantN := min(int64(len(buf)), size-off)
		if int64(n) != wantN || (int64(n) < int64(len(buf)) && err != io.EOF) || (int64(n) == int64(len(buf)) && err != nil) {
			t.Errorf("ReadAt(%d) = %d, %v; want %d bytes", off, n, err, wantN)
		}
		if !bytes.Equal(buf[:n], want[off:off+int64(n)]) {
			t.Errorf("ReadAt(%d) returned the wrong bytes", off)
		}
	}

	var sink bytes.Buffer
	g = NewGenerator(3, size)
	if _, err := g.Seek(BlockSize+10, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	if n, err := g.WriteTo(&sink); err != nil || n != size-BlockSize-10 {
		t.Fatalf("WriteTo after Seek = %d, %v", n, err)
	}
	if !bytes.Equal(sink.Bytes(), want[BlockSize+10:]) {
		t.Error("WriteTo after Seek wrote the wrong bytes")
	}
}

func TestDefaultSeedIsStableAndDependsOnNameAndLength(t *testing.T) {
	if DefaultSeed("a", 100) != DefaultSeed("a", 100) {
		t.Error("DefaultSeed is not deterministic")
	}
	if DefaultSeed("a", 100) == DefaultSeed("b", 100) || DefaultSeed("a", 100) == DefaultSeed("a", 101) {
		t.Error("DefaultSeed ignores its inputs")
	}
}

func TestSeedsPrintAndParseAsHex(t *testing.T) {
	s := Seed(0xdeadbeef)
	if s.String() != "0x00000000deadbeef" {
		t.Errorf("String = %s", s)
	}
	for _, in := range []string{"0x00000000deadbeef", "0xdeadbeef", "3735928559"} {
		if got, err := ParseSeed(in); err != nil || got != s {
			t.Errorf("ParseSeed(%q) = %v, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "x", "-1", "0x1ffffffffffffffff"} {
		if _, err := ParseSeed(in); err == nil {
			t.Errorf("ParseSeed(%q) succeeded", in)
		}
	}
}

func TestParseSize(t *testing.T) {
	good := map[string]int64{
		"0": 0, "4096": 4096, "1k": 1024, "64K": 64 << 10, "3m": 3 << 20, "10G": 10 << 30,
		"10g": 10 << 30, "1t": 1 << 40, "1TiB": 1 << 40, "2GiB": 2 << 30, "5kib": 5 << 10,
	}
	for in, want := range good {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "G", "-1", "+5", "1.5G", "10x", "5iB", "1 G", "9999999999T", "10GB"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) succeeded", in)
		}
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1 KiB", 1536: "1.5 KiB", 100 << 30: "100 GiB"} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
	}
}
