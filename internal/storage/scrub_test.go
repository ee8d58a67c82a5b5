package storage

import (
	"bytes"
	"errors"
	"slices"
	"testing"
)

func TestVerifyChunkNamesEveryBadBlockAndReadsTheWholeChunk(t *testing.T) {
	tg := openTestTarget(t, Options{})
	data := bytes.Repeat([]byte("scrub me "), 60_000) // 540,000 bytes: 132 blocks, the last partial
	if err := tg.Write(7, 0, 0, data); err != nil {
		t.Fatal(err)
	}
	bad, n, err := tg.VerifyChunk(7, 0, nil)
	if err != nil || len(bad) != 0 || n != int64(len(data)) {
		t.Fatalf("a whole chunk: bad %v, %d bytes read, %v", bad, n, err)
	}
	for _, off := range []int64{3*BlockSize + 17, 100 * BlockSize, int64(len(data)) - 1} {
		flipBit(t, tg.dataPath(7, 0), off)
	}
	bad, n, err = tg.VerifyChunk(7, 0, nil)
	if err != nil || n != int64(len(data)) {
		t.Fatalf("%d bytes read, %v", n, err)
	}
	if want := []uint64{3, 100, 131}; !slices.Equal(bad, want) {
		t.Fatalf("bad blocks %v, want %v", bad, want)
	}
	if bad, n, err := tg.VerifyChunk(7, 1, nil); err != nil || bad != nil || n != 0 {
		t.Fatalf("a missing chunk: bad %v, %d bytes, %v", bad, n, err)
	}
}

func TestVerifyChunkStopsWhenItsPacerSaysSo(t *testing.T) {
	tg := openTestTarget(t, Options{})
	if err := tg.Write(7, 0, 0, make([]byte, 3*scrubPiece)); err != nil {
		t.Fatal(err)
	}
	calls := 0
	stop := errors.New("stop")
	_, n, err := tg.VerifyChunk(7, 0, func(int) error {
		calls++
		return stop
	})
	if !errors.Is(err, stop) || calls != 1 || n != scrubPiece {
		t.Fatalf("after the pacer's error: %d calls, %d bytes, %v", calls, n, err)
	}
}
