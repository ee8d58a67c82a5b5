package client

import (
	"sync"
	"testing"
	"time"

	"tandemfs/internal/proto"
)

func layout(chunk uint32, chains ...uint32) *proto.Inode {
	return &proto.Inode{Stripe: proto.Stripe{ChunkSize: chunk, Count: uint32(len(chains))}, Chains: chains}
}

func TestSplitRangeCutsAtChunkBoundariesAndRotatesChains(t *testing.T) {
	in := layout(1<<20, 7, 8, 9)
	ps := splitRange(in, 1<<20-100, 2<<20+200)
	want := []piece{
		{chain: 7, index: 0, off: 1<<20 - 100, pos: 0, n: 100},
		{chain: 8, index: 1, off: 0, pos: 100, n: 1 << 20},
		{chain: 9, index: 2, off: 0, pos: 100 + 1<<20, n: 1 << 20},
		{chain: 7, index: 3, off: 0, pos: 100 + 2<<20, n: 100},
	}
	if len(ps) != len(want) {
		t.Fatalf("%d pieces, want %d: %+v", len(ps), len(want), ps)
	}
	for i := range want {
		if ps[i] != want[i] {
			t.Errorf("piece %d = %+v, want %+v", i, ps[i], want[i])
		}
	}
}

func TestSplitRangeOfNothingIsNoPieces(t *testing.T) {
	if ps := splitRange(layout(4096, 1), 123, 0); len(ps) != 0 {
		t.Fatalf("%+v", ps)
	}
}

func TestOverlappingWritesWaitForEachOther(t *testing.T) {
	var s rangeSet
	s.init()
	s.add(0, 100)
	done := make(chan struct{})
	go func() {
		s.add(50, 150) // overlaps: must wait
		close(done)
	}()
	select {
	case <-done:
		t.Fatal("an overlapping write did not wait")
	case <-time.After(50 * time.Millisecond):
	}
	s.done(0, 100)
	<-done
	s.add(200, 300) // disjoint: goes at once
	s.done(50, 150)
	s.done(200, 300)
	s.waitAll()
}

func TestInflightBytesAreBounded(t *testing.T) {
	var s rangeSet
	s.init()
	s.add(0, maxInflightBytes)
	var wg sync.WaitGroup
	wg.Add(1)
	started := make(chan struct{})
	go func() {
		defer wg.Done()
		close(started)
		s.add(maxInflightBytes, maxInflightBytes+1) // over the bound: waits
		s.done(maxInflightBytes, maxInflightBytes+1)
	}()
	<-started
	time.Sleep(20 * time.Millisecond)
	s.mu.Lock()
	n := len(s.ranges)
	s.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d requests in flight beyond the byte bound", n)
	}
	s.done(0, maxInflightBytes)
	wg.Wait()
}

func TestReadaheadStartsOnlyForSequentialReaders(t *testing.T) {
	var ra readahead
	in := layout(0) // ChunkSize 0: read reports whether it would serve, without I/O
	for i := 0; i < 10; i++ {
		off := uint64(i*7919*4096) % (1 << 30) // scattered
		if _, _, served, _ := ra.read(nil, in, &rangeSet{}, 1<<30, off, make([]byte, 4096)); served {
			t.Fatal("random reads triggered readahead")
		}
	}
	if ra.streak >= raTrigger {
		t.Fatalf("streak %d after random reads", ra.streak)
	}
	for i := 0; i < raTrigger+1; i++ {
		ra.read(nil, in, &rangeSet{}, 1<<30, uint64(i)*131072, make([]byte, 131072))
	}
	if ra.streak < raTrigger {
		t.Fatalf("streak %d after %d sequential reads", ra.streak, raTrigger+1)
	}
}

func TestAReadOutOfOrderByMoreThanTheSlackKeepsRunningReadahead(t *testing.T) {
	const mib = 1 << 20
	late := uint64(2 * mib)
	front := late + raSlack + mib // a request sent later was served first
	var ra readahead
	ra.nextOff = front
	if ra.inWindow(late) {
		t.Fatal("before readahead runs, a read behind the front counts as sequential")
	}
	ra.blocks = map[uint64]*raBlock{}
	if near(late, front, raSlack) || !ra.inWindow(late) {
		t.Fatal("a read late by more than the slack, within the window, does not count as sequential")
	}
	early := front + raSlack + mib // served before the requests sent earlier
	if near(early, front, raSlack) || !ra.inWindow(early) {
		t.Fatal("a read early by more than the slack, within the window, does not count as sequential")
	}
	if ra.inWindow(front-raWindowSize-1) || ra.inWindow(front+raWindowSize+1) {
		t.Fatal("a read beyond the window counts as sequential")
	}
}

// A sequential reader's next chunk may be one this client's write-behind
// is still sending: fetched now, the chunk could hold the bytes from
// before the write and serve them after it (found by tests/fsx_test.go).
func TestReadaheadFetchesNothingAWriteInFlightOverlaps(t *testing.T) {
	const cs = 64 << 10
	in := layout(cs)
	ra := readahead{nextOff: 5 * cs, streak: raTrigger, blocks: map[uint64]*raBlock{}}
	var writing rangeSet
	writing.init()
	writing.add(9*cs+100, 9*cs+130) // 30 bytes, four chunks ahead of the reader
	// nil Client: a fetch would crash the test.
	if _, _, served, _ := ra.read(nil, in, &writing, 1<<30, 5*cs, make([]byte, 4096)); served {
		t.Fatal("served from readahead while a write to its window was in flight")
	}
	if len(ra.blocks) != 0 {
		t.Fatalf("%d chunks fetched while a write to the window was in flight", len(ra.blocks))
	}
	if ra.streak < raTrigger {
		t.Fatalf("streak %d: the reader is still sequential and should get readahead once the write is done", ra.streak)
	}
}

func TestReadaheadKeepsTheChunksLateRequestsMayStillAskFor(t *testing.T) {
	const cs = 1 << 20
	ra := readahead{nextOff: 20 * cs, blocks: map[uint64]*raBlock{}}
	for idx := uint64(0); idx < 24; idx++ {
		mem := getChunkBuf(cs)
		b := &raBlock{done: make(chan struct{}), data: (*mem)[:cs], mem: mem}
		b.refs.Store(1) // the window's
		ra.blocks[idx] = b
	}
	ra.dropBehind(cs)
	// Chunk 15 ends 4 MiB (raKeepBehind) behind the front: a request
	// served late may still ask for it. Chunk 14 ends further back.
	for idx := uint64(0); idx < 24; idx++ {
		_, kept := ra.blocks[idx]
		if want := idx >= 15; kept != want {
			t.Errorf("chunk %d kept %v, want %v", idx, kept, want)
		}
	}
}

func TestReadaheadMemoryIsReusedOnlyAfterEveryHolderLetGo(t *testing.T) {
	mem := getChunkBuf(1 << 20)
	b := &raBlock{done: make(chan struct{}), data: (*mem)[:1<<20], mem: mem}
	b.refs.Store(2) // the window and the fetch
	close(b.done)
	b.release() // the fetch ended
	b.hold()    // a reader returned a slice of the block to the kernel
	ra := readahead{blocks: map[uint64]*raBlock{0: b}}
	ra.invalidate() // a write dropped the window
	if got := b.refs.Load(); got != 1 {
		t.Fatalf("%d references after the window let go, want the reader's 1", got)
	}
	b.release() // the kernel has the bytes
	if got := b.refs.Load(); got != 0 {
		t.Fatalf("%d references after every holder let go", got)
	}
}

func TestChunkBuffersComeInPowerOfTwoClasses(t *testing.T) {
	for _, n := range []int{1, 4096, 4097, 1 << 20, 3 << 20, maxPooledChunk} {
		p := getChunkBuf(n)
		if c := cap(*p); c < n || c&(c-1) != 0 {
			t.Fatalf("buffer for %d bytes has capacity %d", n, c)
		}
		putChunkBuf(p)
	}
	if p := getChunkBuf(maxPooledChunk + 1); cap(*p) != maxPooledChunk+1 {
		t.Fatalf("an unpooled size got capacity %d", cap(*p))
	}
}

// Readahead that a reader leaves mostly unused stops: a reader whose jumps
// stay within the window looks sequential, and readahead would otherwise
// fetch the whole file for it.
func TestReadaheadStopsForAReaderThatUsesLittleOfWhatItFetches(t *testing.T) {
	var ra readahead
	ra.fetched, ra.used = raCheckEvery-1, 0
	if ra.wasteful() {
		t.Fatal("judged before raCheckEvery bytes were fetched")
	}
	ra.fetched, ra.used = raCheckEvery, raCheckEvery*3/4 // a sequential reader lags a window behind
	if ra.wasteful() {
		t.Fatal("a reader using three quarters of what was fetched judged wasteful")
	}
	if ra.fetched != 0 || ra.used != 0 {
		t.Fatal("the counts did not start again after a check")
	}

	// A strided reader 4 MiB apart, with readahead running.
	const cs = 1 << 20
	ra = readahead{nextOff: 64 * cs, streak: raTrigger + 3, blocks: map[uint64]*raBlock{}}
	var blocks []*raBlock
	for idx := uint64(64); idx < 72; idx++ {
		mem := getChunkBuf(cs)
		b := &raBlock{done: make(chan struct{}), data: (*mem)[:cs], mem: mem}
		b.refs.Store(1) // the window's
		ra.blocks[idx] = b
		blocks = append(blocks, b)
	}
	ra.fetched, ra.used = raCheckEvery, 8*4096
	in := layout(0) // no I/O: read only decides
	if _, _, served, _ := ra.read(nil, in, &rangeSet{}, 1<<30, 68*cs, make([]byte, 4096)); served {
		t.Fatal("served from readahead")
	}
	if ra.streak != 0 || ra.blocks != nil {
		t.Fatalf("readahead still runs (streak %d, %d chunks) for a reader that used %d of %d bytes", ra.streak, len(ra.blocks), 8*4096, raCheckEvery)
	}
	for i, b := range blocks {
		if n := b.refs.Load(); n != 0 {
			t.Fatalf("chunk %d still has %d references after readahead stopped", i, n)
		}
	}
}
