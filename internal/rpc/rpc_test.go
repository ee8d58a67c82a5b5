package rpc

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"tandemfs/internal/osthread"
	"tandemfs/internal/wire"
)

var secret = Secret("0123456789abcdef0123456789abcdef")

// echoServer answers op 1 with its payload, op 2 with ENOENT, op 3 panics,
// op 4 answers after 2 s.
func echoServer(t *testing.T, s Secret) (*Server, string, *logBuf) {
	t.Helper()
	return observedEchoServer(t, s, nil)
}

// observedEchoServer is echoServer telling obs of every request served.
func observedEchoServer(t *testing.T, s Secret, obs Observer) (*Server, string, *logBuf) {
	t.Helper()
	return startEchoServer(t, &Server{Secret: s, Observer: obs})
}

// startEchoServer serves the echo server's operations with srv, as
// configured, on a new loopback port.
func startEchoServer(t *testing.T, srv *Server) (*Server, string, *logBuf) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	logs := &logBuf{}
	srv.Name, srv.Logf = "test", logs.printf
	srv.Handler = func(op uint16, d *wire.Dec, e *wire.Enc) error {
		switch op {
		case 1:
			b := d.Bytes(1 << 30)
			if err := d.Finish(); err != nil {
				return BadRequest(err)
			}
			e.Bytes(b)
			return nil
		case 2:
			return Errorf(syscall.ENOENT, "no such thing")
		case 3:
			panic("boom")
		case 4:
			time.Sleep(2 * time.Second)
			return nil
		}
		return Errorf(syscall.ENOSYS, "unknown op %d", op)
	}
	go srv.Serve(ln)
	t.Cleanup(srv.Close)
	return srv, ln.Addr().String(), logs
}

type logBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuf) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.WriteString(strings.TrimSpace(format))
	l.b.WriteString("\n")
}

func (l *logBuf) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

func echo(c *Client, payload []byte) ([]byte, error) {
	var got []byte
	err := c.Call(1, func(e *wire.Enc) { e.Bytes(payload) }, func(d *wire.Dec) error {
		got = append([]byte{}, d.Bytes(1<<30)...)
		return nil
	})
	return got, err
}

func TestCallsRoundTripAndErrnosTravel(t *testing.T) {
	_, addr, _ := echoServer(t, secret)
	c := NewClient(addr, secret)
	defer c.Close()
	big := bytes.Repeat([]byte("x"), 3<<20)
	got, err := echo(c, big)
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("echo of 3 MiB: %v", err)
	}
	err = c.Call(2, nil, nil)
	if !errors.Is(err, syscall.ENOENT) || !strings.Contains(err.Error(), "no such thing") {
		t.Fatalf("got %v, want ENOENT with its message", err)
	}
	if IsNetError(err) {
		t.Fatal("an error reply is not a transport failure")
	}
}

// A call whose context ends gives up at once, even while the server is
// still working on it, and the client goes on working.
func TestCallGivesUpWhenItsContextEnds(t *testing.T) {
	_, addr, _ := echoServer(t, secret)
	c := NewClient(addr, secret)
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	t0 := time.Now()
	err := c.CallContext(ctx, 4, nil, nil)
	if took := time.Since(t0); took > time.Second {
		t.Fatalf("the call returned %v after its context ended", took)
	}
	if !IsNetError(err) || !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want a transport error caused by the cancellation", err)
	}
	if err := c.CallContext(ctx, 1, nil, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("a call with an ended context: got %v", err)
	}
	if _, err := echo(c, []byte("still here")); err != nil {
		t.Fatal(err)
	}
}

func TestHandlerPanicIsAnErrorAndTheServerGoesOn(t *testing.T) {
	_, addr, _ := echoServer(t, secret)
	c := NewClient(addr, secret)
	defer c.Close()
	if err := c.Call(3, nil, nil); !errors.Is(err, syscall.EIO) {
		t.Fatalf("panicking handler: got %v, want EIO", err)
	}
	if _, err := echo(c, []byte("still here")); err != nil {
		t.Fatal(err)
	}
}

func TestMalformedRequestGetsEBADMSG(t *testing.T) {
	_, addr, _ := echoServer(t, secret)
	c := NewClient(addr, secret)
	defer c.Close()
	err := c.Call(1, func(e *wire.Enc) { e.U32(100) }, nil) // claims 100 bytes, has none
	if !errors.Is(err, syscall.EBADMSG) {
		t.Fatalf("got %v, want EBADMSG", err)
	}
}

func TestOversizedFrameClosesTheConnection(t *testing.T) {
	_, addr, _ := echoServer(t, secret)
	conn, err := DialAuth(addr, secret, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var hdr [4]byte
	binary.LittleEndian.PutUint32(hdr[:], MaxFrame+1)
	conn.Write(hdr[:])
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil {
		t.Fatal("server answered a frame larger than MaxFrame instead of closing")
	}
}

func TestWrongSecretIsRefusedBothWays(t *testing.T) {
	_, addr, logs := echoServer(t, secret)
	c := NewClient(addr, Secret("another-secret-entirely-32-bytes"))
	defer c.Close()
	if _, err := echo(c, []byte("hi")); !errors.Is(err, ErrAuth) {
		t.Fatalf("client with a wrong secret: got %v, want ErrAuth", err)
	}
	time.Sleep(100 * time.Millisecond)
	if !strings.Contains(logs.String(), "refused connection") {
		t.Fatalf("refusal not logged; log: %q", logs.String())
	}
}

func TestPeerThatIsNotTandemIsRefused(t *testing.T) {
	_, addr, _ := echoServer(t, secret)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Write([]byte("GET / HTTP/1.0\r\n\r\n" + strings.Repeat(" ", 64)))
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(conn); err != nil && !errors.Is(err, io.EOF) {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("server kept a non-TandemFS peer connected")
		}
	}
}

func TestUnreachableServerIsANetError(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	c := NewClient(addr, secret)
	defer c.Close()
	_, err := echo(c, nil)
	if !IsNetError(err) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("got %v, want a NetError naming %s", err, addr)
	}
}

func TestConcurrentCallsUseSeparateConnections(t *testing.T) {
	_, addr, _ := echoServer(t, secret)
	c := NewClient(addr, secret)
	defer c.Close()
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			msg := bytes.Repeat([]byte{byte(i)}, 1000+i)
			for j := 0; j < 50; j++ {
				got, err := echo(c, msg)
				if err != nil || !bytes.Equal(got, msg) {
					t.Errorf("call %d/%d: %v", i, j, err)
					return
				}
			}
		}(i)
	}
	wg.Wait()
}

func TestSecretFileMustBePrivate(t *testing.T) {
	dir := t.TempDir()
	p := dir + "/secret"
	s, _ := NewSecret()
	if err := WriteSecretFile(p, s); err != nil {
		t.Fatal(err)
	}
	got, err := ReadSecretFile(p)
	if err != nil || !bytes.Equal(got, s) {
		t.Fatalf("round trip: %v", err)
	}
	syscallChmod(t, p, 0o644)
	if _, err := ReadSecretFile(p); err == nil || !strings.Contains(err.Error(), "readable by others") {
		t.Fatalf("world-readable secret accepted: %v", err)
	}
	if _, err := ReadSecretFile(dir + "/missing"); err == nil {
		t.Fatal("missing secret file accepted")
	}
}

func syscallChmod(t *testing.T, p string, mode uint32) {
	if err := syscall.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

// FuzzFrames feeds arbitrary bytes to a server after a valid handshake: it
// must answer or close, never crash.
func FuzzFrames(f *testing.F) {
	f.Add([]byte{3, 0, 0, 0, 1, 0, 0})
	f.Add([]byte{255, 255, 255, 255})
	f.Add([]byte{6, 0, 0, 0, 1, 0, 2, 0, 0, 0})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	srv := &Server{Name: "fuzz", Secret: secret, Logf: func(string, ...any) {}, Handler: func(op uint16, d *wire.Dec, e *wire.Enc) error {
		b := d.Bytes(1 << 20)
		n := d.U64()
		if err := d.Finish(); err != nil {
			return BadRequest(err)
		}
		e.Bytes(b)
		e.U64(n)
		return nil
	}}
	go srv.Serve(ln)
	defer srv.Close()
	addr := ln.Addr().String()
	f.Fuzz(func(t *testing.T, data []byte) {
		conn, err := DialAuth(addr, secret, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.Write(data)
		conn.(*net.TCPConn).CloseWrite()
		conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		io.Copy(io.Discard, conn)
		// The server must still serve a well-formed call afterwards.
		c := NewClient(addr, secret)
		defer c.Close()
		if _, err := echo(c, []byte("ok")); err != nil && !errors.Is(err, syscall.EBADMSG) {
			t.Fatalf("server broken after fuzz input: %v", err)
		}
	})
}

// A server that dies in the middle of the handshake is a transport
// failure, which callers retry, not a refusal of our secret, which they
// report and give up on.
func TestServerDyingInHandshakeIsANetError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		hello := make([]byte, len(magic)+1+nonceLen)
		io.ReadFull(c, hello)
		ns := make([]byte, nonceLen)
		c.Write(append(ns, mac(secret, "server", hello[len(magic)+1:], ns)...))
		io.ReadFull(c, make([]byte, 32))
		c.Close() // dies before saying yes or no
	}()
	c := NewClient(ln.Addr().String(), secret)
	defer c.Close()
	err = c.Call(1, nil, nil)
	if errors.Is(err, ErrAuth) || !IsNetError(err) {
		t.Fatalf("got %v, want a transport error", err)
	}
}

// A server that restarted closed the connections of its previous life;
// calls after the restart, even several at once, notice that before they
// use one and dial afresh, so none fails.
func TestRestartedServerCostsNoFailedCall(t *testing.T) {
	srv, addr, _ := echoServer(t, secret)
	c := NewClient(addr, secret)
	defer c.Close()
	var wg sync.WaitGroup
	for range 4 { // four idle connections in the pool
		wg.Add(1)
		go func() { defer wg.Done(); c.Call(4, nil, nil) }()
	}
	wg.Wait()
	srv.Close()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s again: %v", addr, err)
	}
	again := &Server{Name: "again", Secret: secret, Logf: t.Logf, Handler: func(op uint16, d *wire.Dec, e *wire.Enc) error { return nil }}
	go again.Serve(ln)
	defer again.Close()
	time.Sleep(2 * staleCheckAfter) // a restart takes longer than this
	errs := make(chan error, 4)
	for range 4 {
		go func() { errs <- c.Call(1, nil, nil) }()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatalf("a call after the restart failed: %v", err)
		}
	}
}

// On a thread its goroutine holds for good (a FUSE-over-io_uring worker),
// a call waits for its reply in poll(2) for a while, then as any other.
func TestCallsFromADedicatedThreadGetQuickAndSlowReplies(t *testing.T) {
	if !mayPoll() {
		// The echo server runs in this process, and its goroutine needs
		// the one processor the thread in poll(2) holds until the
		// runtime's monitor takes it back: no reply comes within the
		// poll. A mount's servers are other processes.
		t.Skip("needs more than one Go processor: the test's server shares the caller's")
	}
	withSpin(t, 0) // polling would catch the quick replies first (spin_test.go)
	_, addr, _ := echoServer(t, secret)
	c := NewClient(addr, secret)
	defer c.Close()
	errs := make(chan error, 1)
	before := repliesPolled.Load()
	if _, err := echo(c, []byte("elsewhere")); err != nil {
		t.Fatal(err)
	}
	if n := repliesPolled.Load() - before; n != 0 {
		t.Fatalf("%d replies waited for in poll(2) by a goroutine without a thread of its own", n)
	}
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer osthread.Dedicate()()
		for i := range 50 {
			want := bytes.Repeat([]byte{byte(i)}, 1+i*1000)
			got, err := echo(c, want)
			if err != nil || !bytes.Equal(got, want) {
				errs <- fmt.Errorf("echo %d: %d bytes back, %v", i, len(got), err)
				return
			}
		}
		// Slower than the poll's bound: answered after 2 s.
		errs <- c.Call(4, nil, nil)
	}()
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if n := repliesPolled.Load() - before; n < 25 {
		t.Fatalf("only %d of 50 quick replies were waited for in poll(2)", n)
	}
}
