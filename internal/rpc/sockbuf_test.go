package rpc

import (
	"net"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func rcvBuf(t *testing.T, c net.Conn) int {
	t.Helper()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var gerr error
	rc.Control(func(fd uintptr) { n, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF) })
	if gerr != nil {
		t.Fatal(gerr)
	}
	return n
}

func TestDataConnectionsGetLargeBuffersOnBothEnds(t *testing.T) {
	if b, err := os.ReadFile("/proc/sys/net/core/rmem_max"); os.Geteuid() != 0 && err == nil {
		if max, _ := strconv.Atoi(strings.TrimSpace(string(b))); max < sockBufBytes {
			t.Skipf("not root, and net.core.rmem_max is %d: the kernel caps the buffers", max)
		}
	}
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	d := net.Dialer{Control: bigBuffers}
	c, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, ok := <-accepted
	if !ok {
		t.Fatal("nothing accepted")
	}
	defer s.Close()
	// The kernel reports twice what was asked (its bookkeeping); without
	// the request a fresh socket starts at net.ipv4.tcp_rmem's default.
	for name, conn := range map[string]net.Conn{"dialed": c, "accepted": s} {
		if got := rcvBuf(t, conn); got < sockBufBytes {
			t.Errorf("%s connection: receive buffer %d bytes, want at least %d", name, got, sockBufBytes)
		}
	}
}
