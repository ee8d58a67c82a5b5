package rpc

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"tandemfs/internal/wire"
)

// tailServer serves op 7: reply "head:" + the request's label as a byte
// string, then n bytes at off of file as a file tail; op 8: the same tail,
// then an error. The descriptors it hands over are sent on fds.
func tailServer(t *testing.T, file string) (addr string, fds chan int) {
	t.Helper()
	fds = make(chan int, 16)
	srv := &Server{Secret: secret, Name: "tail", Logf: t.Logf}
	srv.Handler = func(op uint16, d *wire.Dec, e *wire.Enc) error {
		off, n := d.U64(), d.U32()
		if err := d.Finish(); err != nil {
			return BadRequest(err)
		}
		fd, err := unix.Open(file, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		fds <- fd
		e.Bytes([]byte("head"))
		e.Tail = &wire.FileTail{FD: fd, Off: int64(off), N: int(n)}
		if op == 8 {
			return Errorf(syscall.EIO, "failed after setting a tail")
		}
		return nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(srv.Close)
	return ln.Addr().String(), fds
}

// tailClient starts a tail server for a file holding content, and a
// client of it.
func tailClient(t *testing.T, content []byte) (*Client, chan int) {
	t.Helper()
	addr, fds := tailServer(t, writeTemp(t, content).Name())
	c := NewClient(addr, secret)
	t.Cleanup(c.Close)
	return c, fds
}

func tailReq(off uint64, n uint32) func(*wire.Enc) {
	return func(e *wire.Enc) { e.U64(off); e.U32(n) }
}

// A handler's file tail reaches the caller after the encoded reply, as
// raw bytes to the end of the frame, and the server closes the file.
func TestAFileTailEndsTheReplyAfterItsHead(t *testing.T) {
	content := make([]byte, 3<<20+123)
	for i := range content {
		content[i] = byte(rand.IntN(256))
	}
	c, fds := tailClient(t, content)
	for _, r := range []struct{ off, n int }{{0, 1 << 20}, {4096, 3<<20 - 4096}, {100, 23}, {len(content), 0}} {
		head, dst := make([]byte, 16), make([]byte, 4<<20)
		nh, n, err := c.CallReadTail(context.Background(), 7, tailReq(uint64(r.off), uint32(r.n)), head, dst)
		if err != nil {
			t.Fatalf("%d bytes at %d: %v", r.n, r.off, err)
		}
		if string(head[:nh]) != "head" || !bytes.Equal(dst[:n], content[r.off:r.off+r.n]) {
			t.Fatalf("%d bytes at %d: got head %q and %d bytes, not the file's", r.n, r.off, head[:nh], n)
		}
		requireClosed(t, <-fds)
	}
}

// A handler that fails after setting a tail gets an error reply, and its
// file is closed all the same.
func TestAFailedHandlersTailIsClosedNotSent(t *testing.T) {
	c, fds := tailClient(t, bytes.Repeat([]byte("z"), 8192))
	_, _, err := c.CallReadTail(context.Background(), 8, tailReq(0, 8192), make([]byte, 16), make([]byte, 8192))
	var re *Error
	if !errors.As(err, &re) || re.Errno != syscall.EIO {
		t.Fatalf("call whose handler failed: %v, want its EIO", err)
	}
	requireClosed(t, <-fds)
}

// A tail the file cannot fill cuts the reply short: that call fails, and
// the client goes on on a new connection.
func TestATailTheFileCannotFillFailsOnlyItsCall(t *testing.T) {
	c, fds := tailClient(t, bytes.Repeat([]byte("y"), 1000))
	if _, _, err := c.CallReadTail(context.Background(), 7, tailReq(0, 5000), make([]byte, 16), make([]byte, 5000)); err == nil {
		t.Fatal("a reply whose tail ran past the file's end succeeded")
	}
	requireClosed(t, <-fds)
	nh, n, err := c.CallReadTail(context.Background(), 7, tailReq(10, 20), make([]byte, 16), make([]byte, 20))
	if err != nil || nh != 4 || n != 20 {
		t.Fatalf("the call after: %d + %d bytes, %v", nh, n, err)
	}
	requireClosed(t, <-fds)
}

// requireClosed fails unless descriptor fd is closed (or reused by then
// for something other than a regular file, which the test does not do).
func requireClosed(t *testing.T, fd int) {
	t.Helper()
	var st unix.Stat_t
	for range 100 {
		if err := unix.Fstat(fd, &st); errors.Is(err, unix.EBADF) {
			return
		}
		unix.Nanosleep(&unix.Timespec{Nsec: 10e6}, nil)
	}
	t.Fatalf("descriptor %d of the tail's file is still open", fd)
}
