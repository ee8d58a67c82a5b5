package rpc

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"log"
	"net"
	"sync"
	"time"

	"tandemfs/internal/wire"
)

// HandlerFunc serves one request. It decodes req (and must consume all of
// it), appends its reply to resp, and returns nil; or returns an error,
// which is sent to the caller as an errno and message. Byte slices taken
// from req are valid only until the handler returns.
type HandlerFunc func(op uint16, req *wire.Dec, resp *wire.Enc) error

// Observer is told of every request a Server serves or call a Client
// makes, for metrics: the operation, when it began, the bytes of its
// request and reply frames, and whether it failed.
type Observer interface {
	Observe(op uint16, start time.Time, sent, received int, failed bool)
}

// Server accepts authenticated connections and serves requests on each one
// in order, one goroutine per connection.
type Server struct {
	Name    string // for log lines, e.g. "meta" or "storage"
	Secret  Secret
	Handler HandlerFunc
	Logf    func(format string, args ...any)
	// Observer, if set, is told of every request served.
	Observer Observer
	// PollNext, if set, is how long the goroutine that sent a reply polls
	// the server's connections for the next request before it lets its
	// Go processor go idle (pollnext.go). Set it before Serve.
	PollNext time.Duration
	polls    Poller

	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

func (s *Server) logf(format string, args ...any) {
	if s.Logf != nil {
		s.Logf(format, args...)
		return
	}
	log.Printf(s.Name+": "+format, args...)
}

// Serve accepts connections on ln until Close is called.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	s.ln = ln
	if s.conns == nil {
		s.conns = map[net.Conn]struct{}{}
	}
	s.mu.Unlock()
	s.polls.Max = s.PollNext
	defer s.polls.Track(ln)()
	for {
		c, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return nil
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(c)
	}
}

// Close stops accepting, closes every connection and waits for handlers.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	if s.ln != nil {
		s.ln.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *Server) serveConn(c net.Conn) {
	defer func() {
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		s.wg.Done()
	}()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	if err := serverHandshake(c, s.Secret); err != nil {
		s.logf("refused connection from %s: %v", c.RemoteAddr(), err)
		return
	}
	defer s.polls.Track(c)()
	var in, space []byte
	out := make([]byte, 0, 64<<10)
	r := bufio.NewReaderSize(c, 64<<10)
	for {
		var err error
		in, space, err = readRequest(r, space)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				s.logf("connection from %s: %v", c.RemoteAddr(), err)
			}
			return
		}
		var tail *wire.FileTail
		out, tail = s.serveFrame(in, out)
		if !s.send(c, out, tail) {
			return
		}
		if s.PollNext > 0 && r.Buffered() == 0 {
			s.polls.Poll()
		}
		if cap(out) > 8<<20 {
			out = make([]byte, 0, 64<<10) // do not pin huge buffers
		}
	}
}

// send writes a reply frame, and the file tail that ends it if there is
// one, and reports whether the connection can go on.
func (s *Server) send(c net.Conn, out []byte, tail *wire.FileTail) bool {
	if _, err := c.Write(out); err != nil {
		closeTail(tail)
		return false
	}
	if tail == nil {
		return true
	}
	err := sendTail(c, tail)
	if err != nil {
		// The frame is cut short: the caller sees the connection end.
		s.logf("reply to %s: %v", c.RemoteAddr(), err)
	}
	return err == nil
}

// serveFrame runs one request frame, tells the Observer, and returns the
// reply frame and the file tail that ends it, if any.
func (s *Server) serveFrame(in, out []byte) ([]byte, *wire.FileTail) {
	if s.Observer == nil {
		return s.handle(in, out)
	}
	start := time.Now()
	out, tail := s.handle(in, out)
	var op uint16
	if len(in) >= 2 {
		op = binary.LittleEndian.Uint16(in)
	}
	failed := binary.LittleEndian.Uint32(out[lenBytes:]) != 0
	sent := len(out)
	if tail != nil {
		sent += tail.N
	}
	s.Observer.Observe(op, start, sent, lenBytes+len(in), failed)
	return out, tail
}

// handle runs one request frame and returns the reply frame, and the file
// tail the handler set to end it (counted in the frame's length).
func (s *Server) handle(in, out []byte) ([]byte, *wire.FileTail) {
	out = frameStart(out)
	out = append(out, 0, 0, 0, 0) // errno, filled in below
	if len(in) < reqHeader {
		return s.errorReply(out, Errorf(EBADMSG, "request frame of %d bytes has no header", len(in))), nil
	}
	op := binary.LittleEndian.Uint16(in)
	enc := &wire.Enc{B: out}
	err := s.safeHandle(op, wire.NewDec(in[reqHeader:]), enc)
	if err != nil {
		closeTail(enc.Tail)
		return s.errorReply(out, err), nil
	}
	out = enc.B
	extra := 0
	if enc.Tail != nil {
		extra = enc.Tail.N
	}
	if err := frameEndWith(out, extra); err != nil {
		closeTail(enc.Tail)
		return s.errorReply(out[:lenBytes+respHeader], err), nil
	}
	return out, enc.Tail
}

// safeHandle turns a handler panic into an error reply: one bad request
// must not take the whole server down.
func (s *Server) safeHandle(op uint16, d *wire.Dec, e *wire.Enc) (err error) {
	defer func() {
		if r := recover(); r != nil {
			s.logf("panic serving op %d: %v", op, r)
			err = Errorf(EIO, "internal error serving op %d", op)
		}
	}()
	return s.Handler(op, d, e)
}

func (s *Server) errorReply(out []byte, err error) []byte {
	out = out[:lenBytes+respHeader]
	errno := ErrnoOf(err)
	var we *wireErr
	if errors.As(err, &we) {
		errno = EBADMSG
	}
	binary.LittleEndian.PutUint32(out[lenBytes:], uint32(errno))
	msg := err.Error()
	if len(msg) > 4096 {
		msg = msg[:4096]
	}
	out = append(out, msg...)
	frameEnd(out)
	return out
}

type wireErr struct{ error }

// BadRequest marks a decoding failure so it is answered with EBADMSG.
func BadRequest(err error) error {
	if err == nil {
		return nil
	}
	return &wireErr{err}
}
