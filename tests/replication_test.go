package tests

import (
	"bytes"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"tandemfs/internal/testcluster"
)

// chainStates returns, per replicated chain, the states of its members as
// `tandem status --json` reports them.
func chainStates(t *testing.T, c *testcluster.Cluster) map[uint32][]string {
	t.Helper()
	states, _ := chainStatus(t, c)
	return states
}

// chainCopies is a replicated chain and, per member (the head first),
// the directory holding its chunks: <target>/chains/<chain>/chunks (see
// internal/storage).
type chainCopies struct {
	ID      uint32
	Targets []uint32
	Dirs    []string
}

// replicatedChainCopies lists the replicated chains of the cluster, in the
// order `tandem status` gives them.
func replicatedChainCopies(t *testing.T, c *testcluster.Cluster) []chainCopies {
	t.Helper()
	var st struct {
		Targets []struct {
			ID   uint32 `json:"id"`
			Path string `json:"path"`
		} `json:"targets"`
		Chains []struct {
			ID      uint32   `json:"id"`
			Targets []uint32 `json:"targets"`
		} `json:"chains"`
	}
	readStatus(t, c, &st)
	paths := map[uint32]string{}
	for _, tg := range st.Targets {
		paths[tg.ID] = tg.Path
	}
	var out []chainCopies
	for _, ch := range st.Chains {
		if len(ch.Targets) < 2 {
			continue
		}
		cc := chainCopies{ID: ch.ID, Targets: ch.Targets}
		for _, tg := range ch.Targets {
			cc.Dirs = append(cc.Dirs, filepath.Join(paths[tg], "chains", fmt.Sprint(ch.ID), "chunks"))
		}
		out = append(out, cc)
	}
	return out
}

// chainStatus returns, per replicated chain, the states of its members and
// the chain's version.
func chainStatus(t *testing.T, c *testcluster.Cluster) (map[uint32][]string, map[uint32]uint32) {
	t.Helper()
	var st struct {
		Chains []struct {
			ID      uint32   `json:"id"`
			Version uint32   `json:"version"`
			Targets []uint32 `json:"targets"`
			States  []string `json:"states"`
		} `json:"chains"`
	}
	readStatus(t, c, &st)
	m, v := map[uint32][]string{}, map[uint32]uint32{}
	for _, ch := range st.Chains {
		if len(ch.Targets) > 1 {
			m[ch.ID], v[ch.ID] = ch.States, ch.Version
		}
	}
	return m, v
}

// waitResynced waits until some replicated chain has moved past its
// version in before (a restarted member was taken in for a resync; chains
// whose members missed nothing do not move) and every member of every
// chain serves again.
func waitResynced(t *testing.T, c *testcluster.Cluster, before map[uint32]uint32, within time.Duration) time.Duration {
	t.Helper()
	t0 := time.Now()
	for {
		states, versions := chainStatus(t, c)
		moved, serving := false, len(states) > 0
		for id, ss := range states {
			moved = moved || versions[id] > before[id]
			for _, s := range ss {
				serving = serving && s == "serving"
			}
		}
		done := moved && serving
		if done {
			return time.Since(t0)
		}
		if time.Since(t0) > within {
			t.Fatalf("chains not resynced after %v: %v (versions %v, before %v)", within, states, versions, before)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// allServing reports whether every member of every replicated chain
// serves.
func allServing(t *testing.T, c *testcluster.Cluster) bool {
	t.Helper()
	states := chainStates(t, c)
	all := len(states) > 0
	for _, ss := range states {
		for _, s := range ss {
			all = all && s == "serving"
		}
	}
	return all
}

// waitAllServing waits until every member of every replicated chain serves
// (a returned server has been resynced).
func waitAllServing(t *testing.T, c *testcluster.Cluster, within time.Duration) time.Duration {
	t.Helper()
	t0 := time.Now()
	for {
		if allServing(t, c) {
			return time.Since(t0)
		}
		if time.Since(t0) > within {
			t.Fatalf("chains not all serving after %v: %v", within, chainStates(t, c))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// stallWriter appends 1 MiB pieces of known data to a file until stopped,
// and records the longest single write.
type stallWriter struct {
	f       *os.File
	data    bytes.Buffer
	longest time.Duration
	err     error
	stop    chan struct{}
	wg      sync.WaitGroup
	pieces  chan int
}

func startWriter(t *testing.T, path string) *stallWriter {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := &stallWriter{f: f, stop: make(chan struct{}), pieces: make(chan int, 1000)}
	rng := rand.New(rand.NewSource(1))
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		piece := make([]byte, 1<<20)
		for n := 1; ; n++ {
			select {
			case <-w.stop:
				return
			default:
			}
			rng.Read(piece)
			t0 := time.Now()
			if _, err := f.Write(piece); err != nil {
				w.err = err
				return
			}
			if n%4 == 0 {
				if err := f.Sync(); err != nil {
					w.err = err
					return
				}
			}
			w.longest = max(w.longest, time.Since(t0))
			w.data.Write(piece)
			w.pieces <- n
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return w
}

// waitPieces waits until the writer has written n more pieces.
func (w *stallWriter) waitPieces(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-w.pieces:
		case <-time.After(60 * time.Second):
			t.Fatalf("writer stuck (error %v)", w.err)
		}
	}
}

func (w *stallWriter) finish(t *testing.T) []byte {
	t.Helper()
	close(w.stop)
	w.wg.Wait()
	if w.err != nil {
		t.Fatalf("writer failed: %v", w.err)
	}
	if err := w.f.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	return w.data.Bytes()
}

// TestReplicatedDataSurvivesTheCrashOfEitherServer: files get two copies
// on different servers by default. A writer keeps writing through the
// kill -9 of a storage server, stalling for no more than the failover; the
// restarted server is resynced while the file system stays mounted; and
// then the other server can crash: the resynced copies serve every byte.
func TestReplicatedDataSurvivesTheCrashOfEitherServer(t *testing.T) {
	c := testcluster.Start(t)
	path := filepath.Join(c.Mount(), "stream")

	w := startWriter(t, path)
	w.waitPieces(t, 8)
	if l := getLayout(t, path); l.Replicas != 2 {
		t.Fatalf("a new file in a 2-server cluster has %d replicas, want 2", l.Replicas)
	}
	c.KillProcess("storage2")
	killed := time.Now()
	w.waitPieces(t, 8)
	t.Logf("storage2 killed; writes went on after %v; longest write %v", time.Since(killed), w.longest)
	want := w.finish(t)
	if w.longest > 10*time.Second {
		t.Errorf("a write stalled %v across the failover (goal: 5 s)", w.longest)
	}
	if got := mustRead(t, path); !bytes.Equal(got, want) {
		t.Fatalf("read back %d bytes after the failover, differing from the %d written", len(got), len(want))
	}

	c.Up() // restarts storage2, which resyncs
	t.Logf("storage2 resynced %v after its restart", waitAllServing(t, c, 90*time.Second))

	c.KillProcess("storage1")
	t0 := time.Now()
	got := mustRead(t, path)
	t.Logf("storage1 killed; read back after %v", time.Since(t0))
	if !bytes.Equal(got, want) {
		t.Fatalf("the resynced copies hold different data (%d bytes read, %d written)", len(got), len(want))
	}
	c.Up()
	waitAllServing(t, c, 90*time.Second)
}

// TestThreeCopiesSurviveTwoServerCrashes: a directory asking for three
// copies gets chains over three servers, and its files survive the crash
// of two of them.
func TestThreeCopiesSurviveTwoServerCrashes(t *testing.T) {
	c := testcluster.Start(t, testcluster.WithServers(3, 1))
	dir := filepath.Join(c.Mount(), "triple")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := runTandem(t, "stripe", "set", "--replicas", "3", dir); err != nil {
		t.Fatalf("stripe set: %v\n%s", err, out)
	}
	path := filepath.Join(dir, "f")
	data := randBytes(3<<20 + 5)
	mustWrite(t, path, data)
	if l := getLayout(t, path); l.Replicas != 3 || len(l.Targets) != 3 {
		t.Fatalf("layout %+v, want 3 copies on 3 targets", l)
	}
	c.KillProcess("storage1")
	c.KillProcess("storage2")
	t0 := time.Now()
	if got := mustRead(t, path); !bytes.Equal(got, data) {
		t.Fatal("the last copy differs from what was written")
	}
	t.Logf("two of three servers killed; read back after %v", time.Since(t0))
	more := randBytes(1 << 20)
	mustWrite(t, filepath.Join(dir, "g"), more)
	if got := mustRead(t, filepath.Join(dir, "g")); !bytes.Equal(got, more) {
		t.Fatal("a file written on the last server reads back wrong")
	}
}

// TestAnOddServerHoldsReplicatedFilesToo: with three servers of one
// target each, the third target is chained with one of the others (it
// holds that chain's second store), so files with two copies use all
// three servers, and losing the third loses nothing.
func TestAnOddServerHoldsReplicatedFilesToo(t *testing.T) {
	c := testcluster.Start(t, testcluster.WithServers(3, 1))
	path := filepath.Join(c.Mount(), "f")
	data := randBytes(3<<20 + 100)
	mustWrite(t, path, data)
	l := getLayout(t, path)
	distinct := map[uint32]bool{}
	for _, id := range l.Targets {
		distinct[id] = true
	}
	if l.Replicas != 2 || len(distinct) != 3 {
		t.Fatalf("layout %+v: want two copies over all three targets", l)
	}
	c.KillProcess("storage3")
	waitFailover(t, c, 20*time.Second)
	if got := mustRead(t, path); !bytes.Equal(got, data) {
		t.Fatal("the file reads back other bytes without the third server")
	}
}
