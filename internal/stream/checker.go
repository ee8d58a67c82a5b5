package stream

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"time"
)

// ErrReported is returned by Write after Report has ended the check.
var ErrReported = errors.New("stream: write after Report")

// CheckOptions says what the checker should expect. The zero value expects
// nothing: the seed and length come from the first valid header.
type CheckOptions struct {
	// Seed, if SeedKnown, is the seed the stream must have. Without it the
	// checker adopts the first valid header's seed, so a copy whose first
	// block came from another stream would be judged against that stream.
	Seed      Seed
	SeedKnown bool

	// Size, if SizeKnown, is the length the copy must have: bytes short of it
	// are missing and bytes past it extra, whatever length the headers
	// record (a disagreement is reported as a problem).
	Size      int64
	SizeKnown bool
}

const (
	// minGap is the shortest run of valid or zero bytes that separates two
	// corrupt ranges; see the package documentation.
	minGap = 16

	// maxPending bounds how many blocks the checker holds back, waiting for
	// a valid header to learn the seed from, when the copy starts damaged.
	// When it is reached, the blocks held are judged without a seed (zero
	// bytes are still found exactly, everything else is corrupt) and the
	// checker starts holding blocks back again.
	maxPending = 1024
)

// Checker checks a stream written to it in chunks of any size and reports
// what it found. Write never fails before Report is called, so a Checker can
// sit at the end of io.Copy, io.MultiWriter or io.TeeReader.
type Checker struct {
	opts CheckOptions

	buf  [BlockSize]byte // a block that arrived in pieces
	fill int             // bytes of buf in use
	pos  int64           // offset of the next block
	read int64           // bytes written so far

	adopted bool  // seed and length known, normally from a valid header
	found   bool  // a valid header was found
	seed    Seed  // the stream's seed, once adopted
	length  int64 // the stream's recorded length, once adopted
	expect  int64 // where the copy should end; -1 while unknown

	pending []pendingBlock

	hdr      [HeaderSize]byte // expected header of the current block
	expected [BlockSize]byte  // expected block, for byte-level comparison
	runs     []run

	extents []Extent
	started time.Time
	report  *Report
}

type pendingBlock struct {
	pos  int64
	data []byte
}

// run is a range of bytes within one block that share a classification.
type run struct {
	kind       Kind
	start, end int
}

// NewChecker returns a checker with the given expectations.
func NewChecker(opts CheckOptions) *Checker {
	c := &Checker{opts: opts, expect: -1}
	if opts.SizeKnown {
		c.expect = opts.Size
	}
	return c
}

// Write feeds the next len(p) bytes of the copy to the checker. It only
// fails after Report.
func (c *Checker) Write(p []byte) (int, error) {
	if c.report != nil {
		return 0, ErrReported
	}
	if c.started.IsZero() {
		c.started = time.Now()
	}
	n := len(p)
	c.read += int64(n)
	if c.fill > 0 {
		k := copy(c.buf[c.fill:], p)
		c.fill += k
		p = p[k:]
		if c.fill < BlockSize {
			return n, nil
		}
		c.block(c.buf[:], c.pos)
		c.pos += BlockSize
		c.fill = 0
	}
	// Whole blocks are checked where they lie, without copying.
	for len(p) >= BlockSize {
		c.block(p[:BlockSize], c.pos)
		c.pos += BlockSize
		p = p[BlockSize:]
	}
	c.fill = copy(c.buf[:], p)
	return n, nil
}

// Report ends the check (a partial last block is checked as such) and
// returns what was found. Later calls return the same report.
func (c *Checker) Report() *Report {
	if c.report != nil {
		return c.report
	}
	if c.fill > 0 {
		c.block(c.buf[:c.fill], c.pos)
		c.pos += int64(c.fill)
		c.fill = 0
	}
	if !c.adopted && c.opts.SeedKnown && c.opts.SizeKnown {
		// No valid header (the copy is wrecked, or shorter than a header),
		// but the caller said what the stream is, so judge against that.
		c.adopted = true
		c.seed, c.length = c.opts.Seed, c.opts.Size
	}
	c.flushPending()
	if c.expect > c.read {
		c.add(Extent{Kind: Missing, Offset: c.read, Length: c.expect - c.read})
	}
	var elapsed time.Duration
	if !c.started.IsZero() {
		elapsed = time.Since(c.started)
	}
	c.report = c.buildReport(elapsed)
	return c.report
}

// block takes the block at pos (BlockSize bytes, or fewer at the end of the
// copy). It does not keep b.
func (c *Checker) block(b []byte, pos int64) {
	if !c.adopted {
		h, st := parseHeader(b)
		switch {
		case st == headerOK && (!c.opts.SeedKnown || h.seed == c.opts.Seed):
			c.adopt(h)
			c.flushPending()
		case len(c.pending) < maxPending && (len(c.pending) > 0 || !allZero(b)):
			// Keep it to compare once the seed is known; zero blocks need no
			// seed, but must not overtake blocks already held.
			c.pending = append(c.pending, pendingBlock{pos, bytes.Clone(b)})
			return
		default:
			c.flushPending()
		}
	}
	c.classify(b, pos)
}

func (c *Checker) adopt(h header) {
	c.adopted = true
	c.found = true
	c.seed = h.seed
	c.length = h.length
	if !c.opts.SizeKnown {
		c.expect = h.length
	}
}

func (c *Checker) flushPending() {
	p := c.pending
	c.pending = nil
	for _, pb := range p {
		c.classify(pb.data, pb.pos)
	}
}

// classify splits off any part of b beyond the expected end as extra and
// judges the rest.
func (c *Checker) classify(b []byte, pos int64) {
	if c.expect >= 0 && pos+int64(len(b)) > c.expect {
		cut := max(c.expect-pos, 0)
		c.judge(b[:cut], pos)
		c.add(Extent{Kind: Extra, Offset: pos + cut, Length: int64(len(b)) - cut})
		return
	}
	c.judge(b, pos)
}

// judge classifies b, all or the start of the block at pos.
func (c *Checker) judge(b []byte, pos int64) {
	n := len(b)
	if n == 0 {
		return
	}
	if !c.adopted {
		c.diff(b, nil, pos, headerMalformed)
		return
	}
	// The fast path, taken by every intact block: no copy, no allocation.
	putHeader(c.hdr[:], c.seed, c.length, pos)
	if n <= HeaderSize {
		if bytes.Equal(b, c.hdr[:n]) {
			c.add(Extent{Kind: Valid, Offset: pos, Length: int64(n)})
			return
		}
	} else if bytes.Equal(b[:HeaderSize], c.hdr[:]) && payloadMatches(b[HeaderSize:], blockKey(c.seed, pos)) {
		c.add(Extent{Kind: Valid, Offset: pos, Length: int64(n)})
		return
	}

	if allZero(b) {
		c.add(Extent{Kind: Zero, Offset: pos, Length: int64(n)})
		return
	}
	h, st := parseHeader(b)
	if st == headerOK && payloadMatches(b[HeaderSize:], blockKey(h.seed, h.offset)) {
		// An intact block, but not the one that belongs here.
		e := Extent{Offset: pos, Length: int64(n), Source: &Source{Seed: h.seed, Length: h.length, Offset: h.offset}}
		if h.seed == c.seed && h.length == c.length {
			e.Kind = Misplaced
		} else {
			e.Kind = Foreign
		}
		c.add(e)
		return
	}
	fillBlock(c.expected[:], c.seed, c.length, pos)
	c.diff(b, c.expected[:n], pos, st)
}

// diff compares b with the expected bytes byte by byte and adds an extent for
// each run of valid, zero and corrupt bytes. With exp nil (seed unknown)
// nothing is valid. st is the status of b's header, which explains damage
// that starts in the header.
func (c *Checker) diff(b, exp []byte, pos int64, st headerStatus) {
	// Classes of bytes, kept as small integers in the loop that visits every
	// byte of a damaged block.
	const (
		valid = iota
		zero
		corrupt
	)
	runs := c.runs[:0]
	class, start := -1, 0
	for i, x := range b {
		k := corrupt
		if exp != nil && x == exp[i] {
			k = valid
		} else if x == 0 {
			k = zero
		}
		if k != class {
			if class >= 0 {
				runs = append(runs, run{runKinds[class], start, i})
			}
			class, start = k, i
		}
	}
	runs = append(runs, run{runKinds[class], start, len(b)})
	// Absorb short valid or zero runs between corrupt ones.
	for i := 1; i+1 < len(runs); i++ {
		r := &runs[i]
		if r.kind != Corrupt && r.end-r.start < minGap && runs[i-1].kind == Corrupt && runs[i+1].kind == Corrupt {
			r.kind = Corrupt
		}
	}
	// Merge what the smoothing joined, so that each corrupt range gets one
	// reason, from where it starts.
	merged := runs[:1]
	for _, r := range runs[1:] {
		if last := &merged[len(merged)-1]; last.kind == r.kind {
			last.end = r.end
		} else {
			merged = append(merged, r)
		}
	}
	for _, r := range merged {
		e := Extent{Kind: r.kind, Offset: pos + int64(r.start), Length: int64(r.end - r.start)}
		if r.kind == Corrupt {
			e.Reason = ReasonPayload
			switch {
			case exp == nil:
				e.Reason = ReasonNoStream
			case r.start < HeaderSize && st == headerMalformed:
				e.Reason = ReasonMalformedHeader
			case r.start < HeaderSize && st == headerBadCheck:
				e.Reason = ReasonHeaderChecksum
			case r.start < HeaderSize:
				e.Reason = ReasonDamagedBlock
			}
		}
		c.add(e)
	}
	c.runs = runs
}

// add appends e to the extents, merging it into the last one when it
// continues it. Adjacent corrupt ranges merge whatever their reasons (which
// are then listed together): a shifted or overwritten region is one range
// to whoever reads the report, even if its blocks are damaged differently.
func (c *Checker) add(e Extent) {
	if e.Length == 0 {
		return
	}
	if n := len(c.extents); n > 0 {
		last := &c.extents[n-1]
		if last.Kind == e.Kind && last.End() == e.Offset && continues(last, &e) {
			last.Length += e.Length
			if e.Reason != "" && !slices.Contains(strings.Split(last.Reason, reasonSep), e.Reason) {
				last.Reason += reasonSep + e.Reason
			}
			return
		}
	}
	c.extents = append(c.extents, e)
}

const reasonSep = "; "

// continues reports whether e's source follows on from last's, as it does
// when a run of blocks was written at the wrong offset.
func continues(last, e *Extent) bool {
	if last.Source == nil || e.Source == nil {
		return last.Source == e.Source
	}
	return last.Source.Seed == e.Source.Seed && last.Source.Length == e.Source.Length &&
		last.Source.Offset+last.Length == e.Source.Offset
}

func allZero(b []byte) bool {
	for len(b) >= 8 {
		if binary.LittleEndian.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// runKinds maps diff's byte classes to kinds.
var runKinds = [...]Kind{Valid, Zero, Corrupt}
