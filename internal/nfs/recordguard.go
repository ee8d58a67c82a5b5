package nfs

import (
	"encoding/binary"
	"fmt"
	"io"
)

// recordGuard watches the record marks (RFC 5531, section 11) of the
// byte stream the RPC server reads, and fails the read that would let a
// record grow past max: a client cannot make the gateway buffer more
// than one WRITE's worth of bytes per request.
type recordGuard struct {
	r    io.Reader
	max  int
	hdr  [4]byte
	hdrN int  // bytes of the next fragment header seen
	left int  // bytes of the current fragment still to come
	last bool // the current fragment ends its record
	size int  // bytes of the current record so far
}

func (g *recordGuard) Read(p []byte) (int, error) {
	n, err := g.r.Read(p)
	if verr := g.observe(p[:n]); verr != nil {
		return 0, verr
	}
	return n, err
}

func (g *recordGuard) observe(b []byte) error {
	for len(b) > 0 {
		if g.left > 0 {
			take := min(g.left, len(b))
			g.left -= take
			b = b[take:]
			if g.left == 0 && g.last {
				g.size = 0
			}
			continue
		}
		take := copy(g.hdr[g.hdrN:], b)
		g.hdrN += take
		b = b[take:]
		if g.hdrN < len(g.hdr) {
			return nil
		}
		g.hdrN = 0
		h := binary.BigEndian.Uint32(g.hdr[:])
		g.left, g.last = int(h&^0x80000000), h&0x80000000 != 0
		g.size += g.left
		if g.size > g.max {
			return fmt.Errorf("an RPC record of more than %d bytes", g.max)
		}
		if g.left == 0 && g.last {
			g.size = 0
		}
	}
	return nil
}
