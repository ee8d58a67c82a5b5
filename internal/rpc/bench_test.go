package rpc

import (
	"testing"

	"tandemfs/internal/wire"
)

// BenchmarkSmallCall measures the round trip of a small request over
// loopback TCP: the floor under every metadata and 4 KiB data operation.
func BenchmarkSmallCall(b *testing.B) {
	_, addr, _ := echoServer(&testing.T{}, secret)
	c := NewClient(addr, secret)
	defer c.Close()
	msg := make([]byte, 64)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := echo(c, msg); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadCall4K measures a 4 KiB data reply read with CallRead.
func BenchmarkReadCall4K(b *testing.B) {
	_, addr, _ := echoServer(&testing.T{}, secret)
	c := NewClient(addr, secret)
	defer c.Close()
	msg := make([]byte, 4096)
	dst := make([]byte, 4096)
	b.SetBytes(4096)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.CallRead(1, func(e *wire.Enc) { e.Bytes(msg) }, dst); err != nil {
			b.Fatal(err)
		}
	}
}
