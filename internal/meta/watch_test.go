package meta_test

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"tandemfs/internal/client"
	"tandemfs/internal/meta"
	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
)

// How clients keep their namespace caches current: each watches the
// metadata leader's change stream, so it may answer from its cache for
// long, yet sees another client's change within milliseconds, far sooner
// than the one-second timeout a cache without the stream would need.

// soon is how quickly another client's change must show; a cache that
// only expired entries after a timeout would still show the old state.
const soon = 700 * time.Millisecond

// eventually polls cond until it holds or soon has passed.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(soon)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not seen within %v", what, soon)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitWatching waits until c's watch is live (its first reply arrived).
func waitWatching(t *testing.T, c *client.Client) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !c.Watching() {
		if time.Now().After(deadline) {
			t.Fatal("the client never started watching the change stream")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestAnotherClientsChangesShowAtOnce(t *testing.T) {
	svc, a := setup(t)
	b := newClient(t, svc)
	waitWatching(t, a)
	f := mk(t, a, proto.RootIno, "f", 0o644)
	mk(t, a, proto.RootIno, "g", 0o644)
	if _, err := a.Lookup(proto.RootIno, "f"); err != nil {
		t.Fatal(err)
	}

	// b changes the mode: a's cached inode goes.
	if _, err := b.SetAttr(&proto.SetAttrReq{Ino: f.Ino, Valid: proto.SetMode, Mode: 0o600}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "mode set by another client", func() bool {
		n, err := a.GetAttr(f.Ino)
		return err == nil && n.Mode&0o777 == 0o600
	})

	// b renames g to h: a's cached name goes, the new one is found.
	if err := b.Rename(proto.RootIno, "g", proto.RootIno, "h", 0); err != nil {
		t.Fatal(err)
	}
	eventually(t, "rename by another client", func() bool {
		_, errOld := a.Lookup(proto.RootIno, "g")
		_, errNew := a.Lookup(proto.RootIno, "h")
		return errors.Is(errOld, syscall.ENOENT) && errNew == nil
	})

	// b removes f: a no longer finds it.
	if err := b.Unlink(proto.RootIno, "f", false); err != nil {
		t.Fatal(err)
	}
	eventually(t, "unlink by another client", func() bool {
		_, err := a.Lookup(proto.RootIno, "f")
		return errors.Is(err, syscall.ENOENT)
	})

	// A name another client creates is found at once: absence is
	// never cached.
	mk(t, b, proto.RootIno, "new", 0o644)
	if _, err := a.Lookup(proto.RootIno, "new"); err != nil {
		t.Fatalf("a file another client just created: %v", err)
	}
}

func TestOwnChangesAndLookupsAreAnsweredFromTheCache(t *testing.T) {
	_, c := setup(t)
	waitWatching(t, c)
	d := mk(t, c, proto.RootIno, "d", syscall.S_IFDIR|0o755)
	f := mk(t, c, d.Ino, "f", 0o644)
	// The notice of the client's own create arrives after its reply;
	// it must not drop what the reply taught.
	time.Sleep(100 * time.Millisecond)
	before := c.MetaCalls()
	for i := 0; i < 3; i++ {
		n, err := c.Lookup(d.Ino, "f")
		if err != nil || n.Ino != f.Ino {
			t.Fatalf("lookup: %v %v", n, err)
		}
		if _, err := c.GetAttr(d.Ino); err != nil {
			t.Fatal(err)
		}
		// Past the one-second timeout of a cache without the stream.
		time.Sleep(600 * time.Millisecond)
	}
	if calls := c.MetaCalls() - before; calls != 0 {
		t.Fatalf("%d metadata calls for names and inodes the client knows", calls)
	}
}

func TestALostStreamEmptiesTheCache(t *testing.T) {
	dir := t.TempDir()
	cfg := meta.Config{Dir: dir, Listen: freeAddr(t), RaftListen: freeAddr(t), Secret: testSecret, Logf: t.Logf}
	svc, err := meta.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, svc)
	waitWatching(t, c)
	mk(t, c, proto.RootIno, "f", 0o644)

	// A restarted service starts a new stream: what happened while the
	// client could not watch is unknown, so it must ask again.
	svc.Close()
	if svc, err = meta.Start(cfg); err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	time.Sleep(300 * time.Millisecond)
	waitWatching(t, c)
	before := c.MetaCalls()
	if _, err := c.Lookup(proto.RootIno, "f"); err != nil {
		t.Fatal(err)
	}
	if c.MetaCalls() == before {
		t.Fatal("a lookup after the stream was lost was answered from the cache")
	}
}

// A change of the cluster map (a server joining, a failover) reaches the
// clients through the stream at once, not at their next periodic reload.
func TestClientsHearOfClusterMapChangesAtOnce(t *testing.T) {
	svc, c := setup(t)
	waitWatching(t, c)
	before := c.ClusterMap().Version
	raw := rpc.NewClient(svc.Addr(), testSecret)
	defer raw.Close()
	req := proto.RegisterServerReq{UUID: "server-a", Addr: "127.0.0.1:1",
		Targets: []proto.TargetInfo{{UUID: "target-a", Path: "/a", TotalBytes: 1 << 30, FreeBytes: 1 << 30}}}
	if err := raw.Call(proto.OpRegisterServer, req.Encode, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a new server in the client's cluster map", func() bool {
		return c.ClusterMap().Version > before
	})
}
