package meta_test

import (
	"slices"
	"syscall"
	"testing"
	"time"

	"tandemfs/internal/client"
	"tandemfs/internal/meta"
	"tandemfs/internal/proto"
)

// A client's open files reach the leader: a file opened is held for
// reading, one whose data the client is about to write is held for
// writing before any byte leaves the client, and a file closed is held no
// more, each within a watch round or two.
func TestTheLeaderKnowsWhichFilesAClientHoldsOpenAndWhichItWrites(t *testing.T) {
	svc, err := meta.Start(meta.Config{Dir: t.TempDir(), Listen: freeAddr(t), RaftListen: freeAddr(t),
		Secret: testSecret, Logf: t.Logf, SessionTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	c, err := client.New(client.Config{MetaAddr: svc.Addr(), Secret: testSecret, Logf: t.Logf, GiveUp: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	n := mk(t, c, proto.RootIno, "f", syscall.S_IFREG|0o644)
	holders := func(want string) (w, r []uint64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			w, r, ok := svc.FileHolders(n.Ino)
			me := []uint64{c.Session()}
			got := ok && map[string]bool{
				"reader": slices.Equal(r, me) && len(w) == 0,
				"writer": slices.Equal(w, me) && len(r) == 0,
				"none":   len(w)+len(r) == 0,
			}[want]
			if got {
				return w, r
			}
			if time.Now().After(deadline) {
				t.Fatalf("file %d: writers %v, readers %v (judged: %v); want this client (%d) as %s", n.Ino, w, r, ok, c.Session(), want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	h, err := c.Open(n, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	holders("reader")
	// Past the inline limit the bytes go to targets, which this cluster
	// has none of: the write fails, after the announcement.
	if _, err := h.Write(make([]byte, 1<<20), 0); err == nil {
		t.Fatalf("a 1 MiB write succeeded on a cluster without storage")
	}
	w, _, _ := svc.FileHolders(n.Ino)
	if !slices.Equal(w, []uint64{c.Session()}) {
		t.Fatalf("right after the write: writers %v, want this client (%d) at once", w, c.Session())
	}
	h.Release()
	holders("none")
}
