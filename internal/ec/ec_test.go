package ec

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestSchemesParseAndBadOnesNameTheirProblem(t *testing.T) {
	for _, good := range []string{"4+2", "8+2", "8+3", "16+4", "2+1", " 6+3 "} {
		if _, err := Parse(good); err != nil {
			t.Errorf("Parse(%q): %v", good, err)
		}
	}
	for text, want := range map[string]string{
		"0+1":  "data shards (K) must be 2 to 16",
		"4+0":  "no parity shard",
		"17+2": "data shards (K) must be 2 to 16",
		"8+5":  "parity shards (M) must be 1 to 4",
		"1+2":  "use --replicas 3",
		"4":    "want K+M",
		"a+b":  "want K+M",
		"-4+2": "data shards (K) must be",
	} {
		_, err := Parse(text)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want an error saying %q", text, err, want)
		}
	}
}

func TestSplitWalksCellsInFileOrder(t *testing.T) {
	g := Geometry{Scheme{4, 2}, 1 << 20}
	// From 512 KiB before the end of stripe 0 to 1.5 MiB into stripe 1.
	ps := g.Split(4<<20-512<<10, 2<<20)
	want := []Piece{
		{Stripe: 0, Shard: 3, Off: 512 << 10, Pos: 0, N: 512 << 10},
		{Stripe: 1, Shard: 0, Off: 0, Pos: 512 << 10, N: 1 << 20},
		{Stripe: 1, Shard: 1, Off: 0, Pos: 1536 << 10, N: 512 << 10},
	}
	if len(ps) != len(want) {
		t.Fatalf("Split: %+v, want %+v", ps, want)
	}
	for i := range ps {
		if ps[i] != want[i] {
			t.Errorf("piece %d: %+v, want %+v", i, ps[i], want[i])
		}
	}
}

func TestAShortStripeCostsItsDataOncePlusOncePerParityShard(t *testing.T) {
	g := Geometry{Scheme{4, 2}, 1 << 20}
	length := uint64(1<<20 + 100) // a file of one cell and 100 bytes
	var total uint64
	for j := 0; j < g.Shards(); j++ {
		total += g.ShardLen(j, length)
	}
	if want := length + 2*(1<<20); total != want {
		t.Fatalf("the shards of %d bytes hold %d bytes, want %d", length, total, want)
	}
	if g.ShardLen(1, length) != 100 || g.ShardLen(2, length) != 0 || g.ShardLen(4, 100) != 100 {
		t.Fatal("shard lengths of a short stripe")
	}
}

// stripe is k data shards of random bytes, the last short (a file's end).
func stripe(r *rand.Rand, k, n int) [][]byte {
	data := make([][]byte, k)
	for j := range data {
		l := n
		if j == k-1 {
			l = n / 3
		}
		data[j] = make([]byte, l)
		for i := range data[j] {
			data[j][i] = byte(r.Uint32())
		}
	}
	return data
}

// lose calls fn with every set of m shard numbers out of n.
func lose(n, m int, fn func(lost []int)) {
	var rec func(from int, lost []int)
	rec = func(from int, lost []int) {
		if len(lost) == m {
			fn(lost)
			return
		}
		for j := from; j < n; j++ {
			rec(j+1, append(lost, j))
		}
	}
	rec(0, nil)
}

func TestAnyMLostShardsOfAStripeAreRebuilt(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, s := range []Scheme{{4, 2}, {8, 2}, {8, 3}, {6, 3}} {
		c, err := CodecFor(s)
		if err != nil {
			t.Fatal(err)
		}
		const n = 3000
		data := stripe(r, s.Data, n)
		parity, err := c.Encode(data, n)
		if err != nil {
			t.Fatal(err)
		}
		all := append(append([][]byte{}, data...), parity...)
		for m := 1; m <= s.Parity; m++ {
			lose(s.Shards(), m, func(lost []int) {
				shards := append([][]byte{}, all...)
				for _, j := range lost {
					shards[j] = nil
				}
				if err := c.ReconstructData(shards, n); err != nil {
					t.Fatalf("%s, shards %v lost: %v", s, lost, err)
				}
				for j := 0; j < s.Data; j++ {
					if !bytes.Equal(shards[j][:len(data[j])], data[j]) || !allZero(shards[j][len(data[j]):]) {
						t.Fatalf("%s, shards %v lost: data shard %d rebuilt wrong", s, lost, j)
					}
				}
			})
		}
	}
}

func TestAPieceOfEveryShardAtOneOffsetRebuildsAlone(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	c, _ := CodecFor(Scheme{4, 2})
	const n = 8192
	data := stripe(r, 4, n)
	parity, _ := c.Encode(data, n)
	all := append(append([][]byte{}, data...), parity...)
	const off, l = 4096, 100 // a degraded read of 100 bytes at 4 KiB
	shards := make([][]byte, 6)
	for j, s := range all {
		shards[j] = window(s, off, l)
	}
	want := append([]byte(nil), shards[1]...)
	shards[1], shards[4] = nil, nil
	if err := c.ReconstructData(shards, l); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(shards[1], want) {
		t.Fatal("the piece of data shard 1 rebuilt wrong")
	}
}

func TestMoreThanMLostShardsAreAnErrorNotWrongBytes(t *testing.T) {
	c, _ := CodecFor(Scheme{4, 2})
	data := stripe(rand.New(rand.NewPCG(5, 6)), 4, 100)
	parity, _ := c.Encode(data, 100)
	shards := append(append([][]byte{}, data...), parity...)
	shards[0], shards[2], shards[5] = nil, nil, nil
	if err := c.ReconstructData(shards, 100); !errors.Is(err, ErrTooFewShards) {
		t.Fatalf("three of 4+2 lost: %v, want ErrTooFewShards", err)
	}
}

func TestVerifyFindsAFlippedByte(t *testing.T) {
	c, _ := CodecFor(Scheme{8, 2})
	data := stripe(rand.New(rand.NewPCG(7, 8)), 8, 512)
	parity, _ := c.Encode(data, 512)
	shards := append(append([][]byte{}, data...), parity...)
	if ok, err := c.Verify(shards, 512); !ok || err != nil {
		t.Fatalf("a good stripe: %v, %v", ok, err)
	}
	shards[3] = append([]byte(nil), shards[3]...)
	shards[3][17] ^= 1
	if ok, _ := c.Verify(shards, 512); ok {
		t.Fatal("a stripe with a flipped byte verified")
	}
}

func window(b []byte, off, n int) []byte {
	out := make([]byte, n)
	if off < len(b) {
		copy(out, b[off:])
	}
	return out
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}
