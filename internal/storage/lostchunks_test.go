package storage

import (
	"testing"
)

// A chain store's chunk file paths name the chain and the chunk; any
// other path names none.
func TestChainChunkPathsNameTheirChainAndChunk(t *testing.T) {
	for _, tc := range []struct {
		rel   string
		chain uint32
		k     chunkKey
		ok    bool
	}{
		{"chains/7/chunks/01/1/0", 7, chunkKey{1, 0}, true},
		{"chains/7/chunks/01/1/0.sum", 7, chunkKey{1, 0}, true},
		{"chains/12/chunks/ff/4351/9", 12, chunkKey{4351, 9}, true},
		{"chunks/01/1/0", 0, chunkKey{}, false},
		{"chains/7/chunks/01/1", 0, chunkKey{}, false},
		{"chains/x/chunks/01/1/0", 0, chunkKey{}, false},
		{"chains/7/other/01/1/0", 0, chunkKey{}, false},
	} {
		chain, k, ok := parseChainChunkPath(tc.rel)
		if ok != tc.ok || (ok && (chain != tc.chain || k != tc.k)) {
			t.Errorf("%s: chain %d chunk %v ok %v; want %d %v %v", tc.rel, chain, k, ok, tc.chain, tc.k, tc.ok)
		}
	}
}

// A lost chunk is listed as absent to a resync, even once a write
// recreated it, until its chain's lost chunks are released; the others
// are listed as ever.
func TestALostChunkIsListedAbsentUntilReleased(t *testing.T) {
	tg := openTestTarget(t, Options{})
	for idx := range uint64(3) {
		mustWrite(t, tg, 5, idx, 0, pattern(idx, 8192))
	}
	list := func() []chunkKey {
		t.Helper()
		sts, more, err := tg.ListBucket(5, true, 0, 0, 2) // a page of two
		if err != nil || !more {
			t.Fatalf("first page: more %v, %v", more, err)
		}
		rest, more, err := tg.ListBucket(5, false, sts[1].Ino, sts[1].Index, 2)
		if err != nil || more {
			t.Fatalf("second page: more %v, %v", more, err)
		}
		var keys []chunkKey
		for _, st := range append(sts, rest...) {
			keys = append(keys, chunkKey{st.Ino, st.Index})
		}
		return keys
	}
	tg.markLost([]chunkKey{{5, 1}})
	mustWrite(t, tg, 5, 1, 4096, pattern(9, 4096)) // a forwarded change
	mustWrite(t, tg, 5, 3, 0, pattern(3, 100))
	got := list()
	want := []chunkKey{{5, 0}, {5, 2}, {5, 3}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("listed %v with chunk 5/1 lost; want %v", got, want)
	}
	tg.clearLost()
	if got := list(); len(got) != 4 {
		t.Fatalf("listed %v after the release; want all four chunks", got)
	}
}
