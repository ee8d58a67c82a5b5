package rpc

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"golang.org/x/sys/unix"

	"tandemfs/internal/wire"
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
	return sendfileTo(cn.raw, r)
}

// sendTail sends a reply's file tail on the server's connection c and
// closes its file.
func sendTail(c net.Conn, t *wire.FileTail) error {
	defer closeTail(t)
	sc, ok := c.(syscall.Conn)
	if !ok {
		return errors.New("sendfile: the connection has no descriptor")
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	return sendfileTo(raw, &fileRange{fd: t.FD, off: t.Off, n: t.N})
}

// closeTail closes the file of a reply's tail, if there is one.
func closeTail(t *wire.FileTail) {
	if t != nil {
		unix.Close(t.FD)
	}
}

// sendfileTo sends the bytes of r on the socket behind raw.
func sendfileTo(raw syscall.RawConn, r *fileRange) error {
	off, left := r.off, r.n
	var sendErr error
	err := raw.Write(func(sock uintptr) bool {
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
