package stream

import (
	"bufio"
	"fmt"
	"io"
	"time"
)

// Kind classifies a range of the checked copy.
type Kind string

const (
	Valid     Kind = "valid"     // the bytes that belong here
	Zero      Kind = "zero"      // zero bytes, which a stream never contains
	Corrupt   Kind = "corrupt"   // damaged bytes; Extent.Reason says how
	Misplaced Kind = "misplaced" // intact blocks of this stream, at the wrong offset
	Foreign   Kind = "foreign"   // intact blocks of another stream
	Missing   Kind = "missing"   // the copy ends before the stream does
	Extra     Kind = "extra"     // the copy goes on after the stream ends
)

// Kinds lists every Kind, in the order reports print them.
var Kinds = []Kind{Valid, Zero, Corrupt, Misplaced, Foreign, Missing, Extra}

// Reasons given for corrupt ranges.
const (
	ReasonHeaderChecksum  = "bad header checksum"
	ReasonMalformedHeader = "malformed header"
	ReasonPayload         = "payload mismatch"
	// ReasonDamagedBlock: a well-formed header of another block, whose
	// payload does not match it either.
	ReasonDamagedBlock = "header names another block, payload damaged"
	// ReasonNoStream: no valid header was found to learn the seed from, so
	// non-zero bytes cannot be checked.
	ReasonNoStream = "no stream header found"
)

// Source says where misplaced or foreign data belongs: the stream (seed and
// length) and the offset named by its first block's header.
type Source struct {
	Seed   Seed  `json:"seed"`
	Length int64 `json:"length"`
	Offset int64 `json:"offset"`
}

// Extent is a range of the copy with one classification. Adjacent ranges of
// the same kind, reason and continuing source are merged.
type Extent struct {
	Kind   Kind    `json:"kind"`
	Offset int64   `json:"offset"`
	Length int64   `json:"length"`
	Reason string  `json:"reason,omitempty"` // for Corrupt: the reasons met, joined by "; "
	Source *Source `json:"source,omitempty"` // for Misplaced and Foreign
}

// End is the offset just past the extent.
func (e Extent) End() int64 { return e.Offset + e.Length }

// Tally counts the extents of one kind and their bytes.
type Tally struct {
	Extents int   `json:"extents"`
	Bytes   int64 `json:"bytes"`
}

// Report is the outcome of a check.
type Report struct {
	OK bool `json:"ok"` // no errors: the copy is exactly the stream

	SeedFound      bool  `json:"seed_found"`      // a valid header was found
	Seed           Seed  `json:"seed"`            // the seed judged against (found or given)
	RecordedLength int64 `json:"recorded_length"` // the length in the headers; -1 if none found
	Length         int64 `json:"length"`          // the length expected (Size, else recorded); -1 if unknown
	BytesRead      int64 `json:"bytes_read"`

	Extents  []Extent       `json:"extents"`
	Totals   map[Kind]Tally `json:"totals"` // every Kind is present
	Problems []string       `json:"problems,omitempty"`
	// Errors counts the extents that are not Valid, plus the problems.
	Errors int `json:"errors"`

	Seconds float64 `json:"seconds"` // from the first Write to Report
}

func (c *Checker) buildReport(elapsed time.Duration) *Report {
	r := &Report{
		SeedFound:      c.found,
		RecordedLength: -1,
		Length:         c.expect,
		BytesRead:      c.read,
		Extents:        c.extents,
		Totals:         make(map[Kind]Tally, len(Kinds)),
		Seconds:        elapsed.Seconds(),
	}
	if r.Extents == nil {
		r.Extents = []Extent{} // JSON [] rather than null
	}
	if c.adopted {
		r.Seed = c.seed
	}
	if c.found {
		r.RecordedLength = c.length
	}
	for _, k := range Kinds {
		r.Totals[k] = Tally{}
	}
	for _, e := range c.extents {
		t := r.Totals[e.Kind]
		t.Extents++
		t.Bytes += e.Length
		r.Totals[e.Kind] = t
		if e.Kind != Valid {
			r.Errors++
		}
	}
	switch {
	case c.adopted && !c.found:
		// Judged against the caller's seed and size; the extents say it all.
	case !c.adopted && c.opts.SeedKnown && (c.read > 0 || !c.opts.SizeKnown):
		r.Problems = append(r.Problems, fmt.Sprintf("no valid header of stream %v found", c.opts.Seed))
	case !c.adopted && (c.read > 0 || !c.opts.SizeKnown):
		r.Problems = append(r.Problems, "no valid stream header found")
	case c.adopted && c.opts.SizeKnown && c.opts.Size != c.length:
		r.Problems = append(r.Problems, fmt.Sprintf("the stream records a length of %d bytes, but %d were expected", c.length, c.opts.Size))
	}
	r.Errors += len(r.Problems)
	r.OK = r.Errors == 0
	return r
}

// MaxTextExtents is how many extents WriteText lists before it summarises.
const MaxTextExtents = 1000

// WriteText writes the report in the manner of checkstream: the extents in
// order, then an end-of-file summary and a verdict.
func (r *Report) WriteText(w io.Writer) error {
	bw := bufio.NewWriter(w)
	for i, e := range r.Extents {
		if i == MaxTextExtents {
			fmt.Fprintf(bw, "... and %d more extents\n", len(r.Extents)-i)
			break
		}
		fmt.Fprintf(bw, "%s data for %d bytes at offset %d", e.Kind, e.Length, e.Offset)
		switch {
		case e.Reason != "":
			fmt.Fprintf(bw, ": %s", e.Reason)
		case e.Kind == Misplaced:
			fmt.Fprintf(bw, ": belongs at offset %d", e.Source.Offset)
		case e.Kind == Foreign:
			fmt.Fprintf(bw, ": belongs to stream %v (length %d) at offset %d", e.Source.Seed, e.Source.Length, e.Source.Offset)
		case e.Kind == Missing:
			fmt.Fprint(bw, ": the copy ends early")
		case e.Kind == Extra:
			fmt.Fprint(bw, ": past the end of the stream")
		}
		fmt.Fprintln(bw)
	}
	fmt.Fprintln(bw, "----------------------------------------------- end of file summary")
	if r.SeedFound {
		fmt.Fprintf(bw, "stream seed %v, recorded length %d bytes (%s)\n", r.Seed, r.RecordedLength, FormatSize(r.RecordedLength))
	}
	total := r.Length
	if total < 0 {
		total = r.BytesRead
	}
	for _, k := range Kinds {
		t := r.Totals[k]
		if k == Valid {
			fmt.Fprintf(bw, "[valid data] %d valid extents, %d/%d bytes (%s/%s)\n",
				t.Extents, t.Bytes, total, FormatSize(t.Bytes), FormatSize(total))
		} else if t.Extents > 0 {
			fmt.Fprintf(bw, "[%s data] %d extents, %d bytes (%s)\n", k, t.Extents, t.Bytes, FormatSize(t.Bytes))
		}
	}
	for _, p := range r.Problems {
		fmt.Fprintf(bw, "problem: %s\n", p)
	}
	blocks := (r.BytesRead + BlockSize - 1) / BlockSize
	rate := 0.0
	if r.Seconds > 0 {
		rate = float64(r.BytesRead) / r.Seconds / 1024
	}
	fmt.Fprintf(bw, "read %d blocks %d bytes in %.3f seconds (%.0f KiB/sec)\n", blocks, r.BytesRead, r.Seconds, rate)
	if r.OK {
		fmt.Fprintln(bw, "----------------------------------------------- no errors")
	} else {
		fmt.Fprintf(bw, "----------------------------------------------- encountered %d errors, failing\n", r.Errors)
	}
	return bw.Flush()
}
