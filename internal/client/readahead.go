package client

import (
	"sync"

	"tandemfs/internal/proto"
)

// Sequential reads are served from whole chunks fetched ahead of the
// reader, several at a time from different targets, so one reader keeps
// the whole stripe busy (the kernel's own readahead asks for one window at
// a time, which leaves every target idle most of the time).
const (
	// raTrigger is how many reads in a row must land near the reader's
	// front before readahead starts; random reads in a large file almost
	// never do four times running.
	raTrigger    = 4
	raWindowSize = 8 << 20 // bytes fetched ahead of the reader
)

// raSlack is how far from the reader's front a read may land and still
// count as sequential.
const raSlack = 2 << 20

func near(a, b, slack uint64) bool {
	if a > b {
		return a-b <= slack
	}
	return b-a <= slack
}

// readahead is the per-inode readahead state.
type readahead struct {
	mu      sync.Mutex
	nextOff uint64 // where a sequential reader reads next
	streak  int    // sequential reads in a row
	blocks  map[uint64]*raBlock
}

// raBlock is one chunk being fetched or fetched.
type raBlock struct {
	done chan struct{}
	data []byte // the chunk's bytes up to the file size at fetch time
	err  error
}

// read serves [off, off+len(buf)) from readahead if the access pattern is
// sequential; it reports false when the caller should read directly. The
// bytes are returned in buf, or, when one fetched chunk holds them all, as
// a slice of that chunk (never reused, so it stays valid), saving a copy.
func (ra *readahead) read(c *Client, in *proto.Inode, size, off uint64, buf []byte) ([]byte, bool, error) {
	cs := uint64(in.Stripe.ChunkSize)
	ra.mu.Lock()
	// The kernel sends its own readahead requests concurrently, so they
	// arrive slightly out of order: "sequential" means near the reader's
	// front, not exactly at it.
	if near(off, ra.nextOff, raSlack) {
		ra.streak++
	} else {
		ra.streak = 0
		ra.blocks = nil
	}
	ra.nextOff = max(ra.nextOff, off+uint64(len(buf)))
	if ra.streak == 0 {
		ra.nextOff = off + uint64(len(buf))
	}
	if ra.streak < raTrigger || cs == 0 {
		ra.mu.Unlock()
		return nil, false, nil
	}
	if ra.blocks == nil {
		ra.blocks = map[uint64]*raBlock{}
	}
	first := off / cs
	for idx := range ra.blocks {
		if idx+1 < first { // keep one chunk behind for stragglers
			delete(ra.blocks, idx)
		}
	}
	ahead := max(uint64(raWindowSize)/cs, 2)
	for idx := first; idx < first+ahead && idx*cs < size; idx++ {
		if _, ok := ra.blocks[idx]; !ok {
			ra.blocks[idx] = c.fetchChunk(in, idx, size)
		}
	}
	var need []*raBlock
	for idx := first; idx*cs < off+uint64(len(buf)); idx++ {
		need = append(need, ra.blocks[idx])
	}
	ra.mu.Unlock()

	if len(need) == 1 {
		b := need[0]
		<-b.done
		start := first * cs
		if b.err == nil && off+uint64(len(buf))-start <= uint64(len(b.data)) {
			return b.data[off-start : off-start+uint64(len(buf))], true, nil
		}
	}
	for i, b := range need {
		<-b.done
		if b.err != nil {
			ra.invalidate()
			return nil, true, b.err
		}
		start := (first + uint64(i)) * cs
		lo := max(off, start)
		hi := min(off+uint64(len(buf)), start+cs)
		dst := buf[lo-off : hi-off]
		n := 0
		if lo-start < uint64(len(b.data)) {
			n = copy(dst, b.data[lo-start:])
		}
		clear(dst[n:])
	}
	return buf, true, nil
}

// fetchChunk starts reading chunk idx of the file in the background.
func (c *Client) fetchChunk(in *proto.Inode, idx, size uint64) *raBlock {
	cs := uint64(in.Stripe.ChunkSize)
	n := min(cs, size-idx*cs)
	b := &raBlock{done: make(chan struct{}), data: make([]byte, n)}
	layout := *in
	go func() {
		b.err = c.readPieces(&layout, idx*cs, b.data)
		close(b.done)
	}()
	return b
}

// invalidate drops fetched data (after a write or truncate, or an error).
func (ra *readahead) invalidate() {
	ra.mu.Lock()
	ra.blocks = nil
	ra.streak = 0
	ra.mu.Unlock()
}
