package rpc

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"tandemfs/internal/osthread"
	"tandemfs/internal/wire"
)

// Common errnos, re-exported so callers need not import syscall for them.
const (
	EIO     = syscall.EIO
	EBADMSG = syscall.EBADMSG
)

// Client calls one server over a pool of authenticated connections. Each
// connection carries one call at a time; concurrent calls use more
// connections, up to MaxIdle of which are kept open between calls.
type Client struct {
	Addr        string
	Secret      Secret
	DialTimeout time.Duration // default 3 s
	CallTimeout time.Duration // default 60 s; 0 keeps the default
	MaxIdle     int           // default 16
	// Observer, if set, is told of every call made.
	Observer Observer

	mu      sync.Mutex
	idle    []*conn
	closed  bool
	warming int // dials Warm has under way

	replies replyTimes // spin.go
}

type conn struct {
	net.Conn
	raw syscall.RawConn // nil if the connection has no descriptor
	r   *bufio.Reader   // replies usually arrive in one read
	buf []byte
	// unwatch ends the watch of the current call's context (see watch).
	unwatch func() bool
	// idleSince is when the connection went back into the pool.
	idleSince time.Time
	// kind and sent are the current call's kind and when its request
	// was sent, for replyTimes.
	kind callKind
	sent time.Time
}

// staleCheckAfter is how long a connection must have been idle for get to
// check, before using it, that the server has not closed it. A server
// that restarted closed every connection of its previous life; without
// the check each call that took one of those from the pool failed, and
// several calls at once (a resync lists the member's buckets eight at a
// time) failed together. The check is one non-blocking recv(2), which
// calls following each other closely skip.
const staleCheckAfter = 20 * time.Millisecond

// peerClosed reports whether the server closed the connection (or sent
// something no request asked for, which breaks it as well): a peek at the
// socket that does not wait.
func (cn *conn) peerClosed() bool {
	if cn.r.Buffered() > 0 {
		return true
	}
	if cn.raw == nil {
		return false
	}
	closed := false
	var b [1]byte
	err := cn.raw.Read(func(fd uintptr) bool {
		_, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		closed = err != unix.EAGAIN && err != unix.EINTR // EOF, data, or an error
		return true
	})
	return closed || err != nil
}

// NewClient returns a client for addr.
func NewClient(addr string, secret Secret) *Client {
	return &Client{Addr: addr, Secret: secret}
}

func (c *Client) get(ctx context.Context) (*conn, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, &NetError{c.Addr, net.ErrClosed}
	}
	for n := len(c.idle); n > 0; n = len(c.idle) {
		cn := c.idle[n-1]
		c.idle = c.idle[:n-1]
		c.mu.Unlock()
		if time.Since(cn.idleSince) < staleCheckAfter || !cn.peerClosed() {
			return cn, nil
		}
		cn.Close()
		c.mu.Lock()
	}
	c.mu.Unlock()
	return c.dial(ctx)
}

// dial opens and authenticates a new connection.
func (c *Client) dial(ctx context.Context) (*conn, error) {
	dt := c.DialTimeout
	if dt == 0 {
		dt = 3 * time.Second
	}
	if ctx == nil {
		ctx = context.Background()
	}
	// The dial ends with ctx too: a server whose link is down answers
	// no SYN, and a caller whose chain moved on must not wait out the
	// dial timeout.
	d := net.Dialer{Timeout: dt, Control: bigBuffers}
	nc, err := d.DialContext(ctx, "tcp", c.Addr)
	if err != nil {
		return nil, &NetError{c.Addr, err}
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	if err := clientHandshake(nc, c.Secret); err != nil {
		nc.Close()
		if errors.Is(err, ErrAuth) {
			return nil, err
		}
		return nil, &NetError{c.Addr, err}
	}
	cn := &conn{Conn: nc, r: bufio.NewReaderSize(nc, 64<<10), buf: make([]byte, 0, 64<<10)}
	if sc, ok := nc.(syscall.Conn); ok {
		cn.raw, _ = sc.SyscallConn()
	}
	return cn, nil
}

// Warm opens connections in the background until n are idle, so that the
// first calls need not wait for a dial and a handshake each; a failed dial
// is left for the first call to meet.
func (c *Client) Warm(n int) {
	c.mu.Lock()
	more := 0
	if !c.closed {
		more = max(n-len(c.idle)-c.warming, 0)
	}
	c.warming += more
	c.mu.Unlock()
	for range more {
		go func() {
			cn, err := c.dial(context.Background())
			c.mu.Lock()
			c.warming--
			c.mu.Unlock()
			if err == nil {
				c.put(cn)
			}
		}()
	}
}

// replyPollMs bounds awaitReply's wait: replies to metadata calls and
// small reads and writes come within it; a slower one is waited for in
// Go's network poller, where the call's deadline and context apply.
const replyPollMs = 5

// awaitReply waits for the reply to the request just sent: first by
// polling for it briefly, for a kind of call whose replies come quickly
// (spin.go); then in poll(2), for up to replyPollMs, when the caller runs
// on a thread it holds for good (osthread): the reply then wakes that
// thread directly instead of the network poller's, which would wake the
// caller's in turn. Measured on the 2-core VM (docs/benchmarks.md,
// 2026-11-26): without the poll(2) a create through a mount on io_uring
// cost the mount 3.6 futex calls, 3.5 nanosleeps and one epoll_pwait;
// with it serial creates ran at 4,137-4,654/s against 3,507-3,823 (three
// runs each, alternated).
func (c *Client) awaitReply(cn *conn) {
	if cn.raw == nil || cn.r.Buffered() > 0 {
		return
	}
	dedicated := osthread.Dedicated()
	// The average first: an atomic load, where mayPoll takes the
	// scheduler's lock, and most slow kinds of call stop there.
	if c.replies.worthSpinning(cn.kind) && mayPoll() && cn.spinForReply(dedicated) {
		return
	}
	if !dedicated {
		return
	}
	cn.raw.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		// EINTR or a timeout: the network poller waits on.
		if n, err := unix.Poll(fds, replyPollMs); n > 0 && err == nil {
			repliesPolled.Add(1)
		}
	})
}

// repliesPolled counts the replies awaitReply saw arrive (for tests).
var repliesPolled atomic.Int64

func (c *Client) put(cn *conn) {
	max := c.MaxIdle
	if max == 0 {
		max = 16
	}
	if cap(cn.buf) > 8<<20 {
		cn.buf = make([]byte, 0, 64<<10)
	}
	cn.idleSince = time.Now()
	c.mu.Lock()
	if !c.closed && len(c.idle) < max {
		c.idle = append(c.idle, cn)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	cn.Close()
}

// broken closes a connection that failed, and every idle one too: a
// transport failure usually means the server restarted or the network
// broke, and then the idle connections are dead as well; the next call
// dials afresh instead of failing on each of them in turn.
func (c *Client) broken(cn *conn) {
	cn.Close()
	c.mu.Lock()
	idle := c.idle
	c.idle = nil
	c.mu.Unlock()
	for _, x := range idle {
		x.Close()
	}
}

// Close closes idle connections and makes later calls fail.
func (c *Client) Close() {
	c.mu.Lock()
	c.closed = true
	idle := c.idle
	c.idle = nil
	c.mu.Unlock()
	for _, cn := range idle {
		cn.Close()
	}
}

// Call sends request op with the payload written by enc and passes the
// reply payload to dec (which may be nil). Slices the reply decoder sees are
// valid only during dec. A transport failure returns a *NetError; an error
// reply returns an *Error.
func (c *Client) Call(op uint16, enc func(*wire.Enc), dec func(*wire.Dec) error) error {
	return c.CallData(op, enc, nil, dec)
}

// CallContext is Call that gives up when ctx ends: the connection's
// deadline is cut short, so the call returns at once (with a *NetError
// wrapping ctx's error) and no longer touches its buffers.
func (c *Client) CallContext(ctx context.Context, op uint16, enc func(*wire.Enc), dec func(*wire.Dec) error) error {
	return c.CallDataContext(ctx, op, enc, nil, dec)
}

// CallDataContext is CallData that gives up when ctx ends, like
// CallContext.
func (c *Client) CallDataContext(ctx context.Context, op uint16, enc func(*wire.Enc), data []byte, dec func(*wire.Dec) error) error {
	return c.callData(ctx, op, enc, data, dec)
}

// CallReadContext is CallRead that gives up when ctx ends, like
// CallContext.
func (c *Client) CallReadContext(ctx context.Context, op uint16, enc func(*wire.Enc), dst []byte) (int, error) {
	return c.callRead(ctx, op, enc, dst)
}

// watch cuts cn's deadline short when ctx ends; the returned function
// stops watching and reports whether ctx ended the call.
func watch(ctx context.Context, cn *conn) func() bool {
	if ctx == nil || ctx.Done() == nil {
		return func() bool { return false }
	}
	stop := context.AfterFunc(ctx, func() { cn.SetDeadline(time.Now()) })
	return func() bool { return !stop() }
}

// ctxErr wraps a transport error caused by ctx ending.
func (c *Client) ctxErr(ctx context.Context, err error) error {
	return &NetError{c.Addr, fmt.Errorf("%w (%v)", context.Cause(ctx), err)}
}

// CallData is Call with a request whose payload ends with data: enc writes
// everything before it, and data goes to the kernel straight from the
// caller's buffer (writev), saving a copy of every byte written.
func (c *Client) CallData(op uint16, enc func(*wire.Enc), data []byte, dec func(*wire.Dec) error) error {
	return c.callData(nil, op, enc, data, dec)
}

// frameBytes counts the bytes of one call's request and reply frames.
type frameBytes struct{ sent, received int }

func (c *Client) callData(ctx context.Context, op uint16, enc func(*wire.Enc), data []byte, dec func(*wire.Dec) error) error {
	return c.callBody(ctx, op, enc, body{data: data}, dec)
}

// CallFile is CallData with the data taken from the file src: count bytes
// at offset off, which go from the page cache to the socket with
// sendfile(2), never copied into this process. On the wire the request is
// the same as CallData's. A file shorter than off+count fails the call
// (and its connection).
func (c *Client) CallFile(op uint16, enc func(*wire.Enc), src int, off int64, count int, dec func(*wire.Dec) error) error {
	return c.callBody(nil, op, enc, body{file: &fileRange{fd: src, off: off, n: count}}, dec)
}

func (c *Client) callBody(ctx context.Context, op uint16, enc func(*wire.Enc), b body, dec func(*wire.Dec) error) error {
	if c.Observer == nil {
		return c.doCallData(ctx, op, enc, b, dec, &frameBytes{})
	}
	var n frameBytes
	start := time.Now()
	err := c.doCallData(ctx, op, enc, b, dec, &n)
	c.Observer.Observe(op, start, n.sent, n.received, err != nil)
	return err
}

func (c *Client) doCallData(ctx context.Context, op uint16, enc func(*wire.Enc), b body, dec func(*wire.Dec) error, n *frameBytes) error {
	cn, err := c.send(ctx, op, enc, b, kindOf(op, b.len()), n)
	if err != nil {
		return err
	}
	in, err := readFrame(cn.r, cn.buf)
	cn.buf = in
	c.replies.record(cn.kind, time.Since(cn.sent))
	if ended := cn.unwatch(); err != nil || ended {
		c.broken(cn)
		if ended {
			return c.ctxErr(ctx, err)
		}
		return &NetError{c.Addr, err}
	}
	n.received = lenBytes + len(in)
	if len(in) < respHeader {
		c.broken(cn)
		return &NetError{c.Addr, errors.New("reply frame without header")}
	}
	if errno := binary.LittleEndian.Uint32(in); errno != 0 {
		err := &Error{Errno: syscall.Errno(errno), Msg: string(in[respHeader:])}
		c.put(cn)
		return err
	}
	if dec != nil {
		d := wire.NewDec(in[respHeader:])
		err = dec(d)
		if err == nil {
			err = d.Finish()
		}
		if err != nil {
			err = &Error{Errno: syscall.EBADMSG, Msg: "bad reply from " + c.Addr + ": " + err.Error()}
		}
	}
	c.put(cn)
	return err
}

// send takes a connection and writes one request on it: op, what enc
// writes, then the body. On error the connection is already dealt with.
func (c *Client) send(ctx context.Context, op uint16, enc func(*wire.Enc), b body, kind callKind, n *frameBytes) (*conn, error) {
	if ctx != nil && ctx.Err() != nil {
		return nil, c.ctxErr(ctx, ctx.Err())
	}
	cn, err := c.get(ctx)
	if err != nil {
		return nil, err
	}
	ct := c.CallTimeout
	if ct == 0 {
		ct = 60 * time.Second
	}
	cn.SetDeadline(time.Now().Add(ct))
	cn.unwatch = watch(ctx, cn)
	e := &wire.Enc{B: binary.LittleEndian.AppendUint16(frameStart(cn.buf), op)}
	if enc != nil {
		enc(e)
	}
	cn.buf = e.B
	if err := frameEndWith(e.B, b.len()); err != nil {
		cn.unwatch()
		c.put(cn)
		return nil, &Error{Errno: syscall.EINVAL, Msg: err.Error()}
	}
	n.sent = len(e.B) + b.len()
	switch {
	case b.file != nil:
		if _, err = cn.Write(e.B); err == nil {
			err = cn.sendFile(b.file)
		}
	case len(b.data) == 0:
		_, err = cn.Write(e.B)
	default:
		bufs := net.Buffers{e.B, b.data}
		_, err = bufs.WriteTo(cn.Conn)
	}
	if err != nil {
		ended := cn.unwatch()
		c.broken(cn)
		if ended {
			return nil, c.ctxErr(ctx, err)
		}
		return nil, &NetError{c.Addr, err}
	}
	cn.kind, cn.sent = kind, time.Now()
	c.awaitReply(cn)
	return cn, nil
}

// CallRead sends a request whose reply is one wire byte string (u32 length
// + bytes) and reads those bytes straight from the connection into dst,
// without an intermediate copy. It returns how many bytes the reply held.
func (c *Client) CallRead(op uint16, enc func(*wire.Enc), dst []byte) (int, error) {
	return c.callRead(nil, op, enc, dst)
}

func (c *Client) callRead(ctx context.Context, op uint16, enc func(*wire.Enc), dst []byte) (int, error) {
	if c.Observer == nil {
		return c.doCallRead(ctx, op, enc, dst, &frameBytes{})
	}
	var fb frameBytes
	start := time.Now()
	n, err := c.doCallRead(ctx, op, enc, dst, &fb)
	c.Observer.Observe(op, start, fb.sent, fb.received, err != nil)
	return n, err
}

func (c *Client) doCallRead(ctx context.Context, op uint16, enc func(*wire.Enc), dst []byte, fb *frameBytes) (int, error) {
	cn, err := c.send(ctx, op, enc, body{}, kindOf(op, len(dst)), fb)
	if err != nil {
		return 0, err
	}
	n, err := c.readDataReply(cn, dst)
	c.replies.record(cn.kind, time.Since(cn.sent))
	if err == nil {
		fb.received = lenBytes + respHeader + 4 + n // the frame, the byte string's length, its bytes
	}
	if err := c.settle(ctx, cn, err); err != nil {
		return 0, err
	}
	return n, nil
}

// settle puts cn back in the pool, or drops it, once a call's reply was
// read with err, and returns the error the call reports: err, or for a
// call ctx ended, that.
func (c *Client) settle(ctx context.Context, cn *conn, err error) error {
	ended := cn.unwatch()
	switch re := (*Error)(nil); {
	case ended:
		c.broken(cn)
		return c.ctxErr(ctx, err)
	case err == nil || errors.As(err, &re):
		c.put(cn)
	default:
		c.broken(cn)
	}
	return err
}

// CallReadTail sends a request whose reply is a wire byte string (u32
// length + bytes) followed by raw bytes to the end of the frame, as a
// handler that sets a file tail (wire.FileTail) sends it: the string lands
// in head and the raw bytes straight in dst. It returns the lengths of
// both.
func (c *Client) CallReadTail(ctx context.Context, op uint16, enc func(*wire.Enc), head, dst []byte) (nh, n int, err error) {
	var fb frameBytes
	start := time.Now()
	cn, err := c.send(ctx, op, enc, body{}, kindOf(op, len(dst)), &fb)
	if err != nil {
		return 0, 0, err
	}
	nh, n, err = c.readTailReply(cn, head, dst)
	c.replies.record(cn.kind, time.Since(cn.sent))
	fb.received = lenBytes + respHeader + 4 + nh + n
	err = c.settle(ctx, cn, err)
	if c.Observer != nil {
		c.Observer.Observe(op, start, fb.sent, fb.received, err != nil)
	}
	return nh, n, err
}

// readTailReply reads a reply frame holding a byte string, into head, and
// raw bytes after it, into dst. Errors other than *Error leave the
// connection unusable.
func (c *Client) readTailReply(cn *conn, head, dst []byte) (int, int, error) {
	rest, err := c.readReplyHeader(cn)
	if err != nil {
		return 0, 0, err
	}
	var lb [4]byte
	if rest < 4 {
		return 0, 0, &NetError{c.Addr, errors.New("reply without a head")}
	}
	if _, err := io.ReadFull(cn.r, lb[:]); err != nil {
		return 0, 0, &NetError{c.Addr, err}
	}
	nh := int(binary.LittleEndian.Uint32(lb[:]))
	n := rest - 4 - nh
	if nh > len(head) || n < 0 || n > len(dst) {
		return 0, 0, &NetError{c.Addr, fmt.Errorf("reply of %d + %d bytes for buffers of %d and %d", nh, n, len(head), len(dst))}
	}
	if _, err := io.ReadFull(cn.r, head[:nh]); err != nil {
		return 0, 0, &NetError{c.Addr, err}
	}
	if _, err := io.ReadFull(cn.r, dst[:n]); err != nil {
		return 0, 0, &NetError{c.Addr, err}
	}
	return nh, n, nil
}

// readReplyHeader reads a reply frame's length and errno and returns how
// many bytes of the frame follow; an error reply is read whole and
// returned as an *Error.
func (c *Client) readReplyHeader(cn *conn) (int, error) {
	var hdr [lenBytes + respHeader]byte
	if _, err := io.ReadFull(cn.r, hdr[:]); err != nil {
		return 0, &NetError{c.Addr, err}
	}
	size := binary.LittleEndian.Uint32(hdr[:])
	if size > MaxFrame || size < respHeader {
		return 0, &NetError{c.Addr, fmt.Errorf("bad reply frame of %d bytes", size)}
	}
	rest := int(size) - respHeader
	if errno := binary.LittleEndian.Uint32(hdr[lenBytes:]); errno != 0 {
		msg := make([]byte, rest)
		if _, err := io.ReadFull(cn.r, msg); err != nil {
			return 0, &NetError{c.Addr, err}
		}
		return 0, &Error{Errno: syscall.Errno(errno), Msg: string(msg)}
	}
	return rest, nil
}

// readDataReply reads a reply frame holding one byte string into dst.
// Errors other than *Error leave the connection unusable.
func (c *Client) readDataReply(cn *conn, dst []byte) (int, error) {
	rest, err := c.readReplyHeader(cn)
	if err != nil {
		return 0, err
	}
	var lb [4]byte
	if rest < 4 {
		return 0, &NetError{c.Addr, errors.New("data reply without length")}
	}
	if _, err := io.ReadFull(cn.r, lb[:]); err != nil {
		return 0, &NetError{c.Addr, err}
	}
	n := int(binary.LittleEndian.Uint32(lb[:]))
	if n != rest-4 || n > len(dst) {
		return 0, &NetError{c.Addr, fmt.Errorf("data reply of %d bytes for a %d-byte buffer", n, len(dst))}
	}
	if _, err := io.ReadFull(cn.r, dst[:n]); err != nil {
		return 0, &NetError{c.Addr, err}
	}
	return n, nil
}
