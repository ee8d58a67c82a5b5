package rpc

import (
	"net"
	"sync"
	"time"
)

// AuthListener wraps a listener so that every accepted connection must pass
// the cluster-secret handshake before any byte reaches the caller. The
// handshake runs on the connection's first Read or Write, in the goroutine
// that serves it, so one slow or hostile peer cannot stall Accept.
type AuthListener struct {
	net.Listener
	Secret Secret
	Logf   func(format string, args ...any)
}

// Accept returns the next connection, to be authenticated on first use.
func (l *AuthListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &authConn{Conn: c, secret: l.Secret, logf: l.Logf}, nil
}

type authConn struct {
	net.Conn
	secret Secret
	logf   func(format string, args ...any)
	once   sync.Once
	err    error
}

func (c *authConn) auth() error {
	c.once.Do(func() {
		c.err = serverHandshake(c.Conn, c.secret)
		if c.err != nil {
			if c.logf != nil {
				c.logf("refused connection from %s: %v", c.Conn.RemoteAddr(), c.err)
			}
			c.Conn.Close()
		}
	})
	return c.err
}

func (c *authConn) Read(b []byte) (int, error) {
	if err := c.auth(); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

func (c *authConn) Write(b []byte) (int, error) {
	if err := c.auth(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

// DialAuth connects to addr and authenticates both ends.
func DialAuth(addr string, secret Secret, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	if err := clientHandshake(c, secret); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}
