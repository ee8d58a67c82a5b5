package stream

import (
	"errors"
	"fmt"
	"io"
)

// copyBufferSize is the size of the writes WriteTo makes: large enough that
// per-call overhead (system calls, pipe wake-ups) disappears behind the
// generation itself.
const copyBufferSize = 1 << 20

// Generator produces the stream (seed, length). It is an io.Reader,
// io.ReaderAt, io.Seeker and io.WriterTo; io.Copy uses WriteTo, which writes
// in 1 MiB chunks. A Generator holds no resources and is cheap to create;
// it is not safe for concurrent use except through ReadAt.
type Generator struct {
	seed   Seed
	length int64
	off    int64
	block  [BlockSize]byte // scratch for blocks that are only partly wanted
}

// NewGenerator returns a generator of the stream with the given seed and
// length in bytes. It panics if length is negative.
func NewGenerator(seed Seed, length int64) *Generator {
	if length < 0 {
		panic(fmt.Sprintf("stream: negative length %d", length))
	}
	return &Generator{seed: seed, length: length}
}

// Seed returns the stream's seed.
func (g *Generator) Seed() Seed { return g.seed }

// Size returns the stream's length in bytes.
func (g *Generator) Size() int64 { return g.length }

// Read implements io.Reader.
func (g *Generator) Read(p []byte) (int, error) {
	n, err := g.readAt(p, g.off, &g.block)
	g.off += int64(n)
	return n, err
}

// ReadAt implements io.ReaderAt. It may be called concurrently, including
// with Read, because it uses its own scratch block.
func (g *Generator) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("stream: negative offset")
	}
	var scratch [BlockSize]byte
	n, err := g.readAt(p, off, &scratch)
	if err == nil && n < len(p) {
		err = io.EOF // ReadAt must explain a short read
	}
	return n, err
}

// Seek implements io.Seeker, so a copy that failed part way can resume.
func (g *Generator) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += g.off
	case io.SeekEnd:
		offset += g.length
	default:
		return 0, errors.New("stream: invalid whence")
	}
	if offset < 0 {
		return 0, errors.New("stream: negative position")
	}
	g.off = offset
	return offset, nil
}

// WriteTo implements io.WriterTo: it writes the rest of the stream to w in
// 1 MiB writes.
func (g *Generator) WriteTo(w io.Writer) (int64, error) {
	buf := make([]byte, copyBufferSize)
	var total int64
	for g.off < g.length {
		n, _ := g.Read(buf)
		m, err := w.Write(buf[:n])
		total += int64(m)
		if err != nil {
			return total, err
		}
		if m < n {
			return total, io.ErrShortWrite
		}
	}
	return total, nil
}

// readAt fills p with the stream from off, up to the stream's end.
func (g *Generator) readAt(p []byte, off int64, scratch *[BlockSize]byte) (int, error) {
	if off >= g.length {
		return 0, io.EOF
	}
	if rest := g.length - off; int64(len(p)) > rest {
		p = p[:rest]
	}
	n := 0
	for n < len(p) {
		blockOff := off - off%BlockSize
		within := int(off - blockOff)
		dst := p[n:]
		if within == 0 && len(dst) >= BlockSize {
			// The common case: whole, aligned blocks go straight into p.
			fillBlock(dst, g.seed, g.length, blockOff)
			n += BlockSize
			off += BlockSize
			continue
		}
		fillBlock(scratch[:], g.seed, g.length, blockOff)
		c := copy(dst, scratch[within:])
		n += c
		off += int64(c)
	}
	return n, nil
}
