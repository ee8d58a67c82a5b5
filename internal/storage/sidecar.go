package storage

import (
	"io"
	"slices"
)

// maxCachedSums is the largest sidecar mirrored in memory: that of an 8 MiB
// chunk. A 4 KiB read then costs one pread instead of two, a 4 KiB write two
// pwrites instead of a pread and two pwrites, and the memory it takes stays
// bounded by the open-chunk cache (16 KiB per open chunk).
const maxCachedSums = 16 << 10

// The sidecar accessors below keep ch.sumSize and ch.sums in step with the
// file. They need ch.mu held exclusively, except readEntries (shared).

// loadSums fills the mirror from the file, or drops it if the sidecar is too
// big to mirror.
func (ch *chunk) loadSums() error {
	if ch.sumSize > maxCachedSums {
		ch.sums = nil
		return nil
	}
	ch.sums = slices.Grow(ch.sums[:0], int(ch.sumSize))[:ch.sumSize]
	if ch.sums == nil {
		ch.sums = []byte{} // an empty sidecar, mirrored
	}
	n, err := ch.sum.ReadAt(ch.sums, 0)
	if err == io.EOF {
		ch.sums = ch.sums[:n]
		ch.sumSize = int64(n)
		return nil
	}
	if err != nil {
		ch.sums = nil
	}
	return err
}

// readEntries fills b with the sidecar entries from block first on; entries
// past the end of the sidecar are {0, 0}.
func (ch *chunk) readEntries(b []byte, first int64) error {
	off := first * entrySize
	if ch.sums != nil {
		n := 0
		if off < int64(len(ch.sums)) {
			n = copy(b, ch.sums[off:])
		}
		clear(b[n:])
		return nil
	}
	n, err := ch.sum.ReadAt(b, off)
	if err == io.EOF {
		clear(b[n:])
		return nil
	}
	return err
}

// writeEntries writes entries b from block first on.
func (ch *chunk) writeEntries(b []byte, first int64) error {
	off := first * entrySize
	if _, err := ch.sum.WriteAt(b, off); err != nil {
		return err
	}
	end := off + int64(len(b))
	ch.sumSize = max(ch.sumSize, end)
	switch {
	case ch.sums == nil:
	case ch.sumSize > maxCachedSums:
		ch.sums = nil
	default:
		ch.growSums(end)
		copy(ch.sums[off:], b)
	}
	return nil
}

// cutSums truncates the sidecar to n bytes.
func (ch *chunk) cutSums(n int64) error {
	if err := ch.sum.Truncate(n); err != nil {
		return err
	}
	ch.sumSize = n
	if ch.sums != nil {
		if n <= int64(len(ch.sums)) {
			ch.sums = ch.sums[:n]
		} else if n > maxCachedSums {
			ch.sums = nil
		} else {
			ch.growSums(n)
		}
	}
	return nil
}

// growSums extends the mirror with zeros (a sparse sidecar reads so) to n.
func (ch *chunk) growSums(n int64) {
	if old := int64(len(ch.sums)); n > old {
		ch.sums = slices.Grow(ch.sums, int(n-old))[:n]
		clear(ch.sums[old:])
	}
}
