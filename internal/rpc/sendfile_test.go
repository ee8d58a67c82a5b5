package rpc

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"tandemfs/internal/wire"
)

// CallFile sends a range of a file as a request's last bytes, the same
// request on the wire as CallData with those bytes.
func TestCallFileSendsTheFileRangeAsTheRequestsData(t *testing.T) {
	_, addr, _ := echoServer(t, secret)
	c := NewClient(addr, secret)
	defer c.Close()
	content := make([]byte, 3<<20+100)
	for i := range content {
		content[i] = byte(rand.IntN(256))
	}
	f := writeTemp(t, content)

	for _, r := range []struct{ off, n int }{{0, len(content)}, {100, 3 << 20}, {4096, 1}, {len(content), 0}} {
		var got []byte
		err := c.CallFile(1, func(e *wire.Enc) { e.U32(uint32(r.n)) }, int(f.Fd()), int64(r.off), r.n, func(d *wire.Dec) error {
			got = append([]byte{}, d.Bytes(1<<30)...)
			return nil
		})
		if err != nil {
			t.Fatalf("CallFile of %d bytes at %d: %v", r.n, r.off, err)
		}
		if want := content[r.off : r.off+r.n]; !bytes.Equal(got, want) {
			t.Fatalf("CallFile of %d bytes at %d: the server got %d bytes, not the file's", r.n, r.off, len(got))
		}
	}
}

// A file shorter than the range asked for fails the call, and the client
// goes on working on a fresh connection.
func TestCallFileOfAShortFileFailsAndTheClientGoesOn(t *testing.T) {
	_, addr, _ := echoServer(t, secret)
	c := NewClient(addr, secret)
	defer c.Close()
	f := writeTemp(t, bytes.Repeat([]byte("y"), 1000))
	err := c.CallFile(1, func(e *wire.Enc) { e.U32(5000) }, int(f.Fd()), 0, 5000, nil)
	if err == nil {
		t.Fatal("CallFile past the end of the file succeeded")
	}
	if got, err := echo(c, []byte("after")); err != nil || string(got) != "after" {
		t.Fatalf("call after the failed CallFile: %q, %v", got, err)
	}
}

func writeTemp(t *testing.T, content []byte) *os.File {
	t.Helper()
	p := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(p, content, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}
