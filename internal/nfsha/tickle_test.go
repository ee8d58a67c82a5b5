package nfsha

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"tandemfs/internal/testenv"
)

// vanish closes conn without a FIN or a reset, as a head cut off from the
// network loses its end of a connection: in repair mode (TCP_REPAIR, as
// CRIU uses it) the kernel forgets a socket without telling the peer.
func vanish(t *testing.T, conn net.Conn) {
	t.Helper()
	raw, err := conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := raw.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_TCP, unix.TCP_REPAIR, 1) }); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatalf("TCP_REPAIR: %v", serr)
	}
	conn.Close()
}

// connected is a listener on loopback and both ends of a connection to
// it; the listener and the client's end close when the test ends.
func connected(t *testing.T) (ln net.Listener, client, server net.Conn) {
	t.Helper()
	testenv.RequireRoot(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	if client, err = net.Dial("tcp", ln.Addr().String()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	if server, err = ln.Accept(); err != nil {
		t.Fatal(err)
	}
	return ln, client, server
}

func TestATickleResetsAClientConnectionWhoseServerVanished(t *testing.T) {
	ln, client, server := connected(t)
	vanish(t, server)

	// The client has sent everything and waits: nothing tells it.
	buf := make([]byte, 1)
	client.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := client.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read on a connection whose server vanished: %v, want it waiting (the test's premise)", err)
	}

	// The tickle comes from the address the listener still serves, as
	// from the head that took the address over.
	from := netip.MustParseAddrPort(ln.Addr().String())
	if err := sendTickles(from, []netip.AddrPort{netip.MustParseAddrPort(client.LocalAddr().String())}); err != nil {
		t.Fatal(err)
	}
	client.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := client.Read(buf); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after the tickle: %v, want the connection reset", err)
	}
}

func TestATickleLeavesALiveConnectionAlone(t *testing.T) {
	ln, client, server := connected(t)
	defer server.Close()

	// A client that reconnected from the same port (as Linux's NFS client
	// does) to the new head must not lose its new connection.
	from := netip.MustParseAddrPort(ln.Addr().String())
	if err := sendTickles(from, []netip.AddrPort{netip.MustParseAddrPort(client.LocalAddr().String())}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if _, err := server.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	client.SetReadDeadline(time.Now().Add(2 * time.Second))
	if n, err := client.Read(buf); n != 1 || err != nil {
		t.Fatalf("read on a live connection after a tickle: %d, %v", n, err)
	}
}
