package stream

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

const (
	B        = BlockSize
	testSeed = Seed(42)
	testSize = 16 * B
)

// check feeds data to a checker in chunks of the given size.
func check(data []byte, opts CheckOptions, chunk int) *Report {
	c := NewChecker(opts)
	for len(data) > 0 {
		n := min(chunk, len(data))
		c.Write(data[:n])
		data = data[n:]
	}
	return c.Report()
}

func valid(off, end int64) Extent { return Extent{Kind: Valid, Offset: off, Length: end - off} }
func zero(off, end int64) Extent  { return Extent{Kind: Zero, Offset: off, Length: end - off} }
func corrupt(off, end int64, why string) Extent {
	return Extent{Kind: Corrupt, Offset: off, Length: end - off, Reason: why}
}
func misplaced(off, end, from int64) Extent {
	return Extent{Kind: Misplaced, Offset: off, Length: end - off, Source: &Source{Seed: testSeed, Length: testSize, Offset: from}}
}

func TestCleanCopiesPassWhateverTheWriteSizes(t *testing.T) {
	for _, size := range []int64{1, 63, 64, 65, B - 1, B, B + 1, testSize, testSize + 1000, 300*B + 17} {
		data := generate(t, testSeed, size)
		for _, chunk := range []int{1, 3, 511, 512, B - 1, B, B + 1, 65537, 1<<20 + 3} {
			if chunk == 1 && size > testSize {
				continue // slow and adds nothing over the smaller sizes
			}
			var opts CheckOptions
			if size < HeaderSize {
				// Too short to hold a header: only the caller knows the stream.
				opts = CheckOptions{Seed: testSeed, SeedKnown: true, Size: size, SizeKnown: true}
			}
			r := check(data, opts, chunk)
			want := []Extent{valid(0, size)}
			if !r.OK || !reflect.DeepEqual(r.Extents, want) || r.Seed != testSeed || r.Length != size || r.BytesRead != size {
				t.Errorf("size %d in chunks of %d: ok=%v seed=%v length=%d extents=%+v problems=%q",
					size, chunk, r.OK, r.Seed, r.Length, r.Extents, r.Problems)
			}
		}
	}
}

func TestCleanCopyPassesWithIrregularWrites(t *testing.T) {
	data := generate(t, testSeed, 200*B+123)
	rng := rand.New(rand.NewPCG(1, 2))
	c := NewChecker(CheckOptions{Seed: testSeed, SeedKnown: true, Size: int64(len(data)), SizeKnown: true})
	for p := data; len(p) > 0; {
		n := min(1+rng.IntN(3*B), len(p))
		c.Write(p[:n])
		p = p[n:]
	}
	if r := c.Report(); !r.OK || len(r.Extents) != 1 {
		t.Errorf("irregular writes: ok=%v extents=%+v problems=%q", r.OK, r.Extents, r.Problems)
	}
}

// Each fault is injected into a clean 16-block copy of stream 42, and the
// check must report exactly the damaged bytes and what is wrong with them.
func TestCheckFindsEveryInjectedFault(t *testing.T) {
	other := generate(t, 7, testSize)
	tests := []struct {
		name   string
		inject func(d []byte) []byte
		want   []Extent
	}{
		{
			name:   "bit flipped in a payload",
			inject: func(d []byte) []byte { d[7*B+1000] ^= 1 << 3; return d },
			want:   []Extent{valid(0, 7*B+1000), corrupt(7*B+1000, 7*B+1001, ReasonPayload), valid(7*B+1001, testSize)},
		},
		{
			name:   "bit flipped in the last byte",
			inject: func(d []byte) []byte { d[testSize-1] ^= 0x80; return d },
			want:   []Extent{valid(0, testSize-1), corrupt(testSize-1, testSize, ReasonPayload)},
		},
		{
			name: "bit flipped in a header's offset digits",
			// '0' becomes '1': still a well-formed header, but its checksum fails.
			inject: func(d []byte) []byte { d[5*B+offAt+2] ^= 1; return d },
			want:   []Extent{valid(0, 5*B+offAt+2), corrupt(5*B+offAt+2, 5*B+offAt+3, ReasonHeaderChecksum), valid(5*B+offAt+3, testSize)},
		},
		{
			name:   "bit flipped in a header's magic",
			inject: func(d []byte) []byte { d[5*B+1] ^= 1 << 6; return d },
			want:   []Extent{valid(0, 5*B+1), corrupt(5*B+1, 5*B+2, ReasonMalformedHeader), valid(5*B+2, testSize)},
		},
		{
			name:   "bit flipped in the first header, so the seed comes from the second",
			inject: func(d []byte) []byte { d[seedAt+15] ^= 1 << 2; return d },
			want:   []Extent{valid(0, seedAt+15), corrupt(seedAt+15, seedAt+16, ReasonHeaderChecksum), valid(seedAt+16, testSize)},
		},
		{
			name:   "aligned 4 KiB zeroed",
			inject: func(d []byte) []byte { clear(d[3*B : 4*B]); return d },
			want:   []Extent{valid(0, 3*B), zero(3*B, 4*B), valid(4*B, testSize)},
		},
		{
			name:   "first block zeroed",
			inject: func(d []byte) []byte { clear(d[:B]); return d },
			want:   []Extent{zero(0, B), valid(B, testSize)},
		},
		{
			name:   "unaligned range zeroed across three blocks",
			inject: func(d []byte) []byte { clear(d[3*B+100 : 5*B+2000]); return d },
			want:   []Extent{valid(0, 3*B+100), zero(3*B+100, 5*B+2000), valid(5*B+2000, testSize)},
		},
		{
			name:   "a few bytes of a header zeroed",
			inject: func(d []byte) []byte { clear(d[9*B+10 : 9*B+13]); return d },
			want:   []Extent{valid(0, 9*B+10), zero(9*B+10, 9*B+13), valid(9*B+13, testSize)},
		},
		{
			name:   "truncated at a block boundary",
			inject: func(d []byte) []byte { return d[:10*B] },
			want:   []Extent{valid(0, 10*B), {Kind: Missing, Offset: 10 * B, Length: 6 * B}},
		},
		{
			name:   "truncated mid-block",
			inject: func(d []byte) []byte { return d[:10*B+777] },
			want:   []Extent{valid(0, 10*B+777), {Kind: Missing, Offset: 10*B + 777, Length: 6*B - 777}},
		},
		{
			name:   "truncated mid-header",
			inject: func(d []byte) []byte { return d[:10*B+20] },
			want:   []Extent{valid(0, 10*B+20), {Kind: Missing, Offset: 10*B + 20, Length: 6*B - 20}},
		},
		{
			name: "two blocks swapped",
			inject: func(d []byte) []byte {
				a, b := bytes.Clone(d[3*B:4*B]), bytes.Clone(d[9*B:10*B])
				copy(d[3*B:], b)
				copy(d[9*B:], a)
				return d
			},
			want: []Extent{valid(0, 3*B), misplaced(3*B, 4*B, 9*B), valid(4*B, 9*B), misplaced(9*B, 10*B, 3*B), valid(10*B, testSize)},
		},
		{
			name:   "a block written over another (from another offset)",
			inject: func(d []byte) []byte { copy(d[12*B:13*B], d[2*B:3*B]); return d },
			want:   []Extent{valid(0, 12*B), misplaced(12*B, 13*B, 2*B), valid(13*B, testSize)},
		},
		{
			name: "blocks written one block early, as one extent",
			inject: func(d []byte) []byte {
				copy(d[4*B:8*B], bytes.Clone(d[5*B:9*B]))
				return d
			},
			want: []Extent{valid(0, 4*B), misplaced(4*B, 8*B, 5*B), valid(8*B, testSize)},
		},
		{
			// The header is intact but names block 2, and the payload is not
			// block 2's either: the bytes that differ from block 12 are corrupt.
			name: "a misplaced block that is itself damaged",
			inject: func(d []byte) []byte {
				copy(d[12*B:13*B], d[2*B:3*B])
				d[12*B+2000] ^= 2
				return d
			},
			want: []Extent{valid(0, 12*B+offAt+12), corrupt(12*B+offAt+12, 12*B+offAt+13, ReasonDamagedBlock),
				valid(12*B+offAt+13, 12*B+checkAt), corrupt(12*B+checkAt, 13*B, ReasonDamagedBlock), valid(13*B, testSize)},
		},
		{
			name:   "a block from another stream",
			inject: func(d []byte) []byte { copy(d[6*B:7*B], other[6*B:7*B]); return d },
			want: []Extent{valid(0, 6*B),
				{Kind: Foreign, Offset: 6 * B, Length: B, Source: &Source{Seed: 7, Length: testSize, Offset: 6 * B}},
				valid(7*B, testSize)},
		},
		{
			name: "a block of the same seed but another length",
			inject: func(d []byte) []byte {
				copy(d[6*B:7*B], generate(t, testSeed, 2*testSize)[6*B:7*B])
				return d
			},
			want: []Extent{valid(0, 6*B),
				{Kind: Foreign, Offset: 6 * B, Length: B, Source: &Source{Seed: testSeed, Length: 2 * testSize, Offset: 6 * B}},
				valid(7*B, testSize)},
		},
		{
			name: "512 bytes overwritten with other data",
			inject: func(d []byte) []byte {
				for i := 4*B + 1000; i < 4*B+1512; i++ {
					d[i] ^= 0x80 // payload bytes are odd, so this never makes a zero
				}
				return d
			},
			want: []Extent{valid(0, 4*B+1000), corrupt(4*B+1000, 4*B+1512, ReasonPayload), valid(4*B+1512, testSize)},
		},
		{
			name:   "extra tail appended",
			inject: func(d []byte) []byte { return append(d, strings.Repeat("x", 1000)...) },
			want:   []Extent{valid(0, testSize), {Kind: Extra, Offset: testSize, Length: 1000}},
		},
		{
			name:   "stream appended twice",
			inject: func(d []byte) []byte { return append(d, d...) },
			want:   []Extent{valid(0, testSize), {Kind: Extra, Offset: testSize, Length: testSize}},
		},
		{
			name: "several faults at once",
			inject: func(d []byte) []byte {
				clear(d[B : 2*B])
				d[3*B+500] ^= 1
				return d[:15*B+1]
			},
			want: []Extent{valid(0, B), zero(B, 2*B), valid(2*B, 3*B+500), corrupt(3*B+500, 3*B+501, ReasonPayload),
				valid(3*B+501, 15*B+1), {Kind: Missing, Offset: 15*B + 1, Length: B - 1}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, chunk := range []int{B, 1000, 1 << 20} {
				data := tt.inject(generate(t, testSeed, testSize))
				r := check(data, CheckOptions{}, chunk)
				if !reflect.DeepEqual(r.Extents, tt.want) {
					t.Fatalf("chunks of %d: extents\n got %s\nwant %s", chunk, dump(r.Extents), dump(tt.want))
				}
				if r.OK || r.Errors != len(tt.want)-r.Totals[Valid].Extents || r.Seed != testSeed {
					t.Fatalf("chunks of %d: ok=%v errors=%d seed=%v", chunk, r.OK, r.Errors, r.Seed)
				}
			}
		})
	}
}

func dump(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestGarbageIsOneCorruptRangeNotHundreds(t *testing.T) {
	data := generate(t, testSeed, testSize)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 2 * B; i < 6*B; i++ {
		data[i] = byte(rng.Uint32()) | 1 // random, but not zero
	}
	r := check(data, CheckOptions{}, B)
	// Random bytes match the expected ones now and then; the ends of the
	// range are only known to within such chance matches.
	if len(r.Extents) != 3 || r.Extents[1].Kind != Corrupt || r.Extents[1].Offset > 2*B+8 || r.Extents[1].End() < 6*B-8 ||
		r.Extents[1].Reason != ReasonMalformedHeader {
		t.Errorf("extents %s", dump(r.Extents))
	}
}

func TestShiftedCopyIsCorrupt(t *testing.T) {
	// A copy that lost one byte, and so has every later block shifted.
	data := generate(t, testSeed, testSize)
	data = append(data[:5*B+1000], data[5*B+1001:]...)
	r := check(data, CheckOptions{}, 4096)
	want := []Extent{valid(0, 5*B+1000), corrupt(5*B+1000, testSize-1, ReasonPayload+reasonSep+ReasonMalformedHeader),
		{Kind: Missing, Offset: testSize - 1, Length: 1}}
	if r.OK || !reflect.DeepEqual(r.Extents, want) {
		t.Errorf("extents %s", dump(r.Extents))
	}
}

func TestPinnedSeedMakesAnotherStreamForeign(t *testing.T) {
	data := generate(t, 7, 4*B)
	r := check(data, CheckOptions{Seed: testSeed, SeedKnown: true}, B)
	if r.OK || r.SeedFound || len(r.Problems) != 1 || r.Totals[Corrupt].Bytes != 4*B {
		t.Errorf("report %s", dump(r))
	}
	// With one block of the right stream the others are recognised as foreign.
	copy(data[2*B:], generate(t, testSeed, 4*B)[2*B:3*B])
	r = check(data, CheckOptions{Seed: testSeed, SeedKnown: true}, B)
	if r.OK || !r.SeedFound || r.Totals[Foreign].Bytes != 3*B || r.Totals[Valid].Bytes != B {
		t.Errorf("report %s", dump(r))
	}
}

func TestExpectedSizeDecidesMissingAndExtra(t *testing.T) {
	data := generate(t, testSeed, testSize)

	r := check(data, CheckOptions{Size: testSize, SizeKnown: true}, B)
	if !r.OK {
		t.Errorf("right size: %s", dump(r))
	}

	r = check(data[:testSize-5], CheckOptions{Size: testSize, SizeKnown: true}, B)
	if r.OK || r.Totals[Missing].Bytes != 5 {
		t.Errorf("short copy: %s", dump(r))
	}

	// A size other than the recorded one is a problem in itself, and it
	// decides where the copy should end.
	r = check(data, CheckOptions{Size: testSize - B, SizeKnown: true}, B)
	want := []Extent{valid(0, testSize-B), {Kind: Extra, Offset: testSize - B, Length: B}}
	if r.OK || !reflect.DeepEqual(r.Extents, want) || len(r.Problems) != 1 || r.Errors != 2 {
		t.Errorf("wrong size: %s", dump(r))
	}
}

func TestEmptyAndZeroInputs(t *testing.T) {
	if r := check(nil, CheckOptions{}, B); r.OK || len(r.Problems) != 1 {
		t.Errorf("empty input with no expectations passed: %s", dump(r))
	}
	if r := check(nil, CheckOptions{Size: 0, SizeKnown: true}, B); !r.OK {
		t.Errorf("empty input expected to be empty failed: %s", dump(r))
	}
	if r := check(nil, CheckOptions{Size: B, SizeKnown: true}, B); r.OK || r.Totals[Missing].Bytes != B {
		t.Errorf("empty input expected to hold a block: %s", dump(r))
	}
	// A hole where the whole file should be: every byte is reported zero,
	// even though no header ever gives the seed.
	r := check(make([]byte, 3000*B+5), CheckOptions{Size: 3000*B + 5, SizeKnown: true}, 1<<20)
	want := []Extent{zero(0, 3000*B+5)}
	if r.OK || !reflect.DeepEqual(r.Extents, want) || r.SeedFound {
		t.Errorf("all zero: %s", dump(r))
	}
}

func TestLongDamagedStartIsJudgedWithoutASeed(t *testing.T) {
	// More than the checker holds back while looking for a header.
	n := int64(maxPending+10) * B
	data := generate(t, testSeed, n+4*B)
	for i := range data[:n] {
		data[i] = 'x'
	}
	r := check(data, CheckOptions{}, 1<<20)
	// Only the blocks still held back when the header turns up are compared
	// with the stream; the reasons say so.
	want := []Extent{corrupt(0, n, ReasonNoStream+reasonSep+ReasonMalformedHeader), valid(n, n+4*B)}
	if !reflect.DeepEqual(r.Extents, want) {
		t.Errorf("extents %s", dump(r.Extents))
	}
}

func TestWriteAfterReportFails(t *testing.T) {
	c := NewChecker(CheckOptions{})
	c.Report()
	if _, err := c.Write([]byte("x")); err != ErrReported {
		t.Errorf("Write after Report = %v", err)
	}
}

func TestReportTextNamesEveryFault(t *testing.T) {
	data := generate(t, testSeed, testSize)
	clear(data[B : 2*B])
	copy(data[3*B:4*B], data[5*B:6*B])
	data[7*B+70] ^= 4
	var out strings.Builder
	if err := check(data[:15*B], CheckOptions{}, B).WriteText(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"zero data for 4096 bytes at offset 4096\n",
		"misplaced data for 4096 bytes at offset 12288: belongs at offset 20480\n",
		"corrupt data for 1 bytes at offset 28742: payload mismatch\n",
		"missing data for 4096 bytes at offset 61440: the copy ends early\n",
		"stream seed 0x000000000000002a, recorded length 65536 bytes (64 KiB)\n",
		"[valid data] 4 valid extents, 53247/65536 bytes",
		"encountered 4 errors, failing\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

func TestReportJSONIsScriptable(t *testing.T) {
	data := generate(t, Seed(1<<63+1), testSize)
	b, err := json.Marshal(check(data, CheckOptions{}, B))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		OK     bool
		Seed   string
		Totals map[string]Tally
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	// The seed is a string so that consumers with float64 numbers keep it exact.
	if !got.OK || got.Seed != "0x8000000000000001" || got.Totals["valid"].Bytes != testSize || len(got.Totals) != len(Kinds) {
		t.Errorf("JSON %s", b)
	}
}
