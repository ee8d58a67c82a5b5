package client

import (
	"sync"
	"sync/atomic"

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

// raKeepBehind is how far behind the reader's front a fetched chunk may end
// and still be kept for requests served late: the kernel's readahead
// requests, served out of order over FUSE-over-io_uring, came up to 3 MiB
// behind it. Together with the window ahead it bounds a sequential
// reader's readahead memory to about 12 MiB plus a chunk.
const raKeepBehind = 4 << 20

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
	// fetched and used count the bytes readahead fetched and the bytes
	// it served since the last check (see wasteful).
	fetched, used uint64
}

// raBlock is one chunk being fetched or fetched. Its memory comes from a
// pool and goes back when the last reference is released: the window holds
// one while the block is in it, the fetch one until it ends, and each read
// one while it copies from the block or, when the read returns a slice of
// it, until the caller is done with that slice. Fresh 1 MiB allocations
// cost a sequential reader a fifth of its CPU in page faults and zeroing.
type raBlock struct {
	done chan struct{}
	data []byte // the chunk's bytes up to the file size at fetch time
	err  error
	refs atomic.Int32
	mem  *[]byte // pooled backing array of data
}

func (b *raBlock) hold() { b.refs.Add(1) }

func (b *raBlock) release() {
	if b.refs.Add(-1) == 0 {
		putChunkBuf(b.mem)
	}
}

// read serves [off, off+len(buf)) from readahead if the access pattern is
// sequential and no write of this client in flight (writing) overlaps
// the window; it reports false when the caller should read directly. The
// bytes are returned in buf, or, when one fetched chunk holds them all, as
// a slice of that chunk, saving a copy; the slice stays valid until the
// returned done is called (never nil when served).
func (ra *readahead) read(c *Client, in *proto.Inode, writing *rangeSet, size, off uint64, buf []byte) ([]byte, func(), bool, error) {
	cs := uint64(in.Stripe.ChunkSize)
	ra.mu.Lock()
	// The kernel sends its own readahead requests concurrently, so they
	// arrive out of order: "sequential" means near the reader's front,
	// or, once readahead runs, within a window of it, behind or ahead
	// (over FUSE-over-io_uring each request has its own worker, and one
	// sent later may be served first by more than the slack: starting
	// over then cost fio reading with POSIX_FADV_SEQUENTIAL 30 % of its
	// rate; requests 3 MiB ahead of the front still started it over
	// about six times per GiB read, each time dropping the fetched window).
	seq := near(off, ra.nextOff, raSlack) || ra.inWindow(off)
	if seq && !ra.wasteful() {
		ra.streak++
	} else {
		ra.streak = 0
		ra.dropAll()
	}
	ra.nextOff = max(ra.nextOff, off+uint64(len(buf)))
	if ra.streak == 0 {
		ra.nextOff = off + uint64(len(buf))
	}
	if ra.streak < raTrigger || cs == 0 {
		ra.mu.Unlock()
		return nil, nil, false, nil
	}
	if ra.blocks == nil {
		ra.blocks = map[uint64]*raBlock{}
	}
	first := off / cs
	ahead := max(uint64(raWindowSize)/cs, 2)
	if writing.overlapsAny(first*cs, (first+ahead)*cs) {
		// A fetch now could read a chunk before a write-behind request
		// reaches its servers and keep the older bytes after the write
		// is done (a read elsewhere in the chunk does not wait for it).
		// The chunks already here were fetched after the last write
		// was counted in flight: the write dropped any fetched before.
		ra.mu.Unlock()
		return nil, nil, false, nil
	}
	ra.dropBehind(cs)
	for idx := first; idx < first+ahead && idx*cs < size; idx++ {
		if _, ok := ra.blocks[idx]; !ok {
			ra.blocks[idx] = c.fetchChunk(in, idx, size)
			ra.fetched += min(cs, size-idx*cs)
		}
	}
	ra.used += uint64(len(buf))
	var need []*raBlock
	for idx := first; idx*cs < off+uint64(len(buf)); idx++ {
		b := ra.blocks[idx]
		b.hold()
		need = append(need, b)
	}
	ra.mu.Unlock()
	releaseAll := func() {
		for _, b := range need {
			b.release()
		}
	}

	if len(need) == 1 {
		b := need[0]
		<-b.done
		start := first * cs
		if b.err == nil && off+uint64(len(buf))-start <= uint64(len(b.data)) {
			return b.data[off-start : off-start+uint64(len(buf))], b.release, true, nil
		}
	}
	defer releaseAll()
	for i, b := range need {
		<-b.done
		if b.err != nil {
			ra.invalidate()
			return nil, nil, true, b.err
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
	return buf, noop, true, nil
}

// dropBehind lets go of the chunks no straggler will ask for any more:
// those ending more than raKeepBehind behind the reader's front (under
// ra.mu). Keeping only one chunk behind each request's own made fio's
// sequential read over the ring fetch 12-14 % of the file twice: a request
// served late, 3-4 MiB behind the front, found its chunk gone.
func (ra *readahead) dropBehind(cs uint64) {
	for idx, b := range ra.blocks {
		if (idx+1)*cs+raKeepBehind < ra.nextOff {
			delete(ra.blocks, idx)
			b.release()
		}
	}
}

// raCheckEvery is how many bytes readahead fetches between two checks
// that the reader uses what is fetched for it.
const raCheckEvery = 4 * raWindowSize

// wasteful reports, once every raCheckEvery bytes fetched, whether the
// reader used less than half of them, and starts counting again (under
// ra.mu). A reader whose jumps stay within the window looks sequential
// (a strided reader, say, that reads 4 KiB every 4 MiB), and readahead
// would fetch every byte of the file for it; such a reader goes back to
// reading directly, and its jumps do not start readahead again.
func (ra *readahead) wasteful() bool {
	if ra.fetched < raCheckEvery {
		return false
	}
	w := ra.used < ra.fetched/2
	ra.fetched, ra.used = 0, 0
	return w
}

// dropAll lets go of every fetched chunk (under ra.mu).
func (ra *readahead) dropAll() {
	for _, b := range ra.blocks {
		b.release()
	}
	ra.blocks = nil
	ra.fetched, ra.used = 0, 0
}

// inWindow reports whether readahead runs and off lies within the window
// of the reader's front, behind or ahead of it (under ra.mu).
func (ra *readahead) inWindow(off uint64) bool {
	return ra.blocks != nil && near(off, ra.nextOff, raWindowSize)
}

// fetchChunk starts reading chunk idx of the file in the background.
func (c *Client) fetchChunk(in *proto.Inode, idx, size uint64) *raBlock {
	cs := uint64(in.Stripe.ChunkSize)
	n := min(cs, size-idx*cs)
	mem := getChunkBuf(int(n))
	b := &raBlock{done: make(chan struct{}), data: (*mem)[:n], mem: mem}
	b.refs.Store(2) // the window's and the fetch's
	layout := *in
	go func() {
		b.err = c.readPieces(&layout, idx*cs, b.data)
		close(b.done)
		b.release()
	}()
	return b
}

// invalidate drops fetched data (after a write or truncate, or an error).
func (ra *readahead) invalidate() {
	ra.mu.Lock()
	defer ra.mu.Unlock()
	ra.dropAll()
	ra.streak = 0
}
