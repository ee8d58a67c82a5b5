package rpc

import (
	"errors"
	"fmt"
	"io"

	"golang.org/x/sys/unix"
)

// body is what follows a request's encoded fields: bytes in memory, or a
// range of a file that sendfile(2) sends (CallFile).
type body struct {
	data []byte
	file *fileRange
}

func (b body) len() int {
	if b.file != nil {
		return b.file.n
	}
	return len(b.data)
}

// fileRange is n bytes at off of the open file fd.
type fileRange struct {
	fd  int
	off int64
	n   int
}

// sendFile writes the bytes of r to the connection with sendfile(2), in
// the network poller (so the connection's deadline applies). The kernel
// hands the file's cached pages to the socket: no copy into this process
// and out again, which on the 2-core test VM was a third of what a
// resync's head spent per chunk (docs/ha.md).
func (cn *conn) sendFile(r *fileRange) error {
	if cn.raw == nil {
		return errors.New("sendfile: the connection has no descriptor")
	}
	off, left := r.off, r.n
	var sendErr error
	err := cn.raw.Write(func(sock uintptr) bool {
		for left > 0 {
			n, err := unix.Sendfile(int(sock), r.fd, &off, left)
			if n > 0 {
				left -= n
			}
			switch {
			case err == unix.EAGAIN:
				return false // wait until the socket takes more
			case err == unix.EINTR:
			case err != nil:
				sendErr = fmt.Errorf("sendfile: %w", err)
				return true
			case n == 0:
				sendErr = fmt.Errorf("sendfile: the file ends %d bytes short: %w", left, io.ErrUnexpectedEOF)
				return true
			}
		}
		return true
	})
	if err != nil {
		return err
	}
	return sendErr
}
