package rpc

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"
)

// Secret is the cluster's shared secret. Every connection proves knowledge
// of it in both directions without sending it (see handshake below).
type Secret []byte

// NewSecret returns 32 random bytes.
func NewSecret() (Secret, error) {
	s := make([]byte, 32)
	if _, err := rand.Read(s); err != nil {
		return nil, err
	}
	return s, nil
}

// WriteSecretFile stores s hex-encoded with mode 0600.
func WriteSecretFile(path string, s Secret) error {
	return os.WriteFile(path, []byte(hex.EncodeToString(s)+"\n"), 0o600)
}

// ReadSecretFile loads a secret written by WriteSecretFile. It refuses files
// that other users may read, as BeeGFS does for its connAuthFile.
func ReadSecretFile(path string) (Secret, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("cluster secret: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("cluster secret %s: mode %v is readable by others; chmod 600 it", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cluster secret: %w", err)
	}
	s, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(s) < 16 {
		return nil, fmt.Errorf("cluster secret %s: not a hex string of at least 16 bytes", path)
	}
	return s, nil
}

// The handshake is a mutual challenge-response:
//
//	client -> server: magic "TNDM", version byte, 32-byte client nonce
//	server -> client: 32-byte server nonce, HMAC(secret, "server"|nc|ns)
//	client -> server: HMAC(secret, "client"|nc|ns)
//	server -> client: one byte, 1 = accepted
//
// Both sides thus prove they hold the secret; the secret itself never
// crosses the wire, and fresh nonces make replayed answers useless.
const (
	magic            = "TNDM"
	protocolVersion  = 1
	nonceLen         = 32
	handshakeTimeout = 5 * time.Second
)

// ErrAuth means the peer failed the handshake.
var ErrAuth = errors.New("authentication failed (wrong or missing cluster secret)")

func mac(secret Secret, role string, nc, ns []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(role))
	h.Write(nc)
	h.Write(ns)
	return h.Sum(nil)
}

func clientHandshake(c net.Conn, secret Secret) error {
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	defer c.SetDeadline(time.Time{})
	nc := make([]byte, nonceLen)
	rand.Read(nc)
	hello := append([]byte(magic), protocolVersion)
	if _, err := c.Write(append(hello, nc...)); err != nil {
		return err
	}
	reply := make([]byte, nonceLen+sha256.Size)
	if _, err := io.ReadFull(c, reply); err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	ns, serverMac := reply[:nonceLen], reply[nonceLen:]
	if !hmac.Equal(serverMac, mac(secret, "server", nc, ns)) {
		return fmt.Errorf("server %s: %w", c.RemoteAddr(), ErrAuth)
	}
	if _, err := c.Write(mac(secret, "client", nc, ns)); err != nil {
		return err
	}
	// Only an explicit 0 is a refusal; a connection that breaks here is
	// a server that died or a network that failed mid-handshake, which
	// the caller retries like any transport failure.
	ok := make([]byte, 1)
	if _, err := io.ReadFull(c, ok); err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	if ok[0] != 1 {
		return fmt.Errorf("server %s refused us: %w", c.RemoteAddr(), ErrAuth)
	}
	return nil
}

func serverHandshake(c net.Conn, secret Secret) error {
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	defer c.SetDeadline(time.Time{})
	hello := make([]byte, len(magic)+1+nonceLen)
	if _, err := io.ReadFull(c, hello); err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	if string(hello[:len(magic)]) != magic {
		return errors.New("not a TandemFS peer (bad magic)")
	}
	if hello[len(magic)] != protocolVersion {
		return fmt.Errorf("protocol version %d, want %d", hello[len(magic)], protocolVersion)
	}
	nc := hello[len(magic)+1:]
	ns := make([]byte, nonceLen)
	rand.Read(ns)
	if _, err := c.Write(append(ns, mac(secret, "server", nc, ns)...)); err != nil {
		return err
	}
	clientMac := make([]byte, sha256.Size)
	if _, err := io.ReadFull(c, clientMac); err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	if !hmac.Equal(clientMac, mac(secret, "client", nc, ns)) {
		c.Write([]byte{0})
		return ErrAuth
	}
	_, err := c.Write([]byte{1})
	return err
}
