package tests

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"tandemfs/internal/testcluster"
)

// The line a chain head logs when a resync is done (tests/hamatrix reads
// it too).
var (
	resyncDoneLine = regexp.MustCompile(`resync of target (\d+) in chain (\d+) done in \S+: (\d+) chunks examined, (\d+) copied \((\d+) bytes\)`)
	resyncTookLine = regexp.MustCompile(`resync of target \d+ in chain \d+ done in (\S+):`)
)

// resyncsLogged sums up the resyncs a storage server's log reports done:
// runs, chunks copied, bytes copied.
func resyncsLogged(t *testing.T, c *testcluster.Cluster, server string) (runs, copied, bytes int) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(c.Dir(), "logs", server+".log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range resyncDoneLine.FindAllStringSubmatch(string(data), -1) {
		n, _ := strconv.Atoi(m[4])
		b, _ := strconv.Atoi(m[5])
		runs, copied, bytes = runs+1, copied+n, bytes+b
	}
	return runs, copied, bytes
}

// appendUntil writes 1 MiB pieces of data to a new file as fast as it
// can until stop is closed, keeping what it wrote in data, or only
// counting it in *n when data is nil. The pieces are windows of one
// random pool, each stamped with its number, so that generating them
// costs next to nothing: the load is the file system's, not the
// generator's (crypto/rand for every piece took a third of both cores).
func appendUntil(path string, data *bytes.Buffer, n *int64, stop chan struct{}) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	const size = 1 << 20
	pool := randBytes(8 * size)
	piece := make([]byte, size)
	for i := uint64(0); ; i++ {
		select {
		case <-stop:
			return f.Close()
		default:
		}
		off := (i * 7919 * 512) % uint64(len(pool)-size)
		copy(piece, pool[off:off+size])
		binary.LittleEndian.PutUint64(piece, i)
		if _, err := f.Write(piece); err != nil {
			f.Close()
			return err
		}
		if data != nil {
			data.Write(piece)
		}
		if n != nil {
			*n += size
		}
	}
}

// waitResyncStarted waits until a chain head logs that it starts a
// resync (or, for a server that does not log that, until one second
// after the status shows a syncing member: a head sees the map within a
// heartbeat and starts on the next one).
func waitResyncStarted(t *testing.T, c *testcluster.Cluster, server string, within time.Duration) {
	t.Helper()
	started := regexp.MustCompile(`resync of target \d+ in chain \d+: (copying|comparing)`)
	t0 := time.Now()
	for time.Since(t0) < within {
		data, err := os.ReadFile(filepath.Join(c.Dir(), "logs", server+".log"))
		if err != nil {
			t.Fatal(err)
		}
		if started.Match(data) {
			return
		}
		for _, states := range chainStates(t, c) {
			if slices.Contains(states, "syncing") {
				time.Sleep(time.Second)
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no resync started within %v", within)
}

// compareChainCopies checks that the members of every replicated chain
// hold the same chunk files (<target>/chains/<chain>/chunks; checksum
// sidecars record each member's own history and are left out).
func compareChainCopies(t *testing.T, c *testcluster.Cluster) {
	t.Helper()
	compared := 0
	for _, ch := range replicatedChainCopies(t, c) {
		var ref map[string][32]byte
		for i, tg := range ch.Targets {
			files := map[string][32]byte{}
			dir := ch.Dirs[i]
			err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
				if err != nil || d.IsDir() || strings.HasSuffix(p, ".sum") {
					return err
				}
				data, err := os.ReadFile(p)
				rel, _ := filepath.Rel(dir, p)
				files[rel] = sha256.Sum256(data)
				return err
			})
			if err != nil {
				t.Fatalf("chain %d target %d: %v", ch.ID, tg, err)
			}
			if ref == nil {
				ref = files
				continue
			}
			if len(files) != len(ref) {
				t.Errorf("chain %d: target %d holds %d chunks, the first member %d", ch.ID, tg, len(files), len(ref))
			}
			for name, sum := range ref {
				if files[name] != sum {
					t.Errorf("chain %d chunk %s differs on target %d", ch.ID, name, tg)
				}
			}
			compared += len(files)
		}
	}
	if compared == 0 {
		t.Fatal("no chunk files compared")
	}
}

// TestResyncCopiesOnlyWhatTheMemberMissed: a storage server that returns
// after a failover gets, from the head of each chain, the chunks that
// changed while it was out (written, rewritten, truncated, deleted) or in
// the minute before its failure (it may have lost them with its page
// cache), and not the chunks written after it came back, which it took by
// forwarding; afterwards both copies of every chain hold the same chunks,
// and the returned server alone serves every byte.
func TestResyncCopiesOnlyWhatTheMemberMissed(t *testing.T) {
	c := testcluster.Start(t)
	dir := c.Mount()
	before := randBytes(16 << 20) // 16 chunks of 1 MiB over the 2 chains
	mustWrite(t, filepath.Join(dir, "before"), before)
	shrunk := randBytes(4 << 20)
	mustWrite(t, filepath.Join(dir, "shrunk"), shrunk)
	if l := getLayout(t, filepath.Join(dir, "before")); l.Replicas != 2 || l.Count != 2 {
		t.Fatalf("layout %+v, want 2 chains of 2 copies", l)
	}

	c.KillProcess("storage2")
	waitFailover(t, c, 20*time.Second)
	_, versions := chainStatus(t, c)

	// While storage2 is out: a new file of 160 chunks, one rewritten chunk
	// of "before", and "shrunk" cut from 4 chunks to 1.5: chunk 1 cut,
	// chunks 2 and 3 deleted (copied as deletions).
	during := randBytes(160 << 20)
	mustWrite(t, filepath.Join(dir, "during"), during)
	f, err := os.OpenFile(filepath.Join(dir, "before"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	patch := randBytes(4096)
	if _, err := f.WriteAt(patch, 3<<20+100); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	copy(before[3<<20+100:], patch)
	if err := os.Truncate(filepath.Join(dir, "shrunk"), 3<<19); err != nil {
		t.Fatal(err)
	}
	shrunk = shrunk[:3<<19]

	// storage2 returns; once the head copies to it, a writer starts a
	// new file (in a later bucket than "during": its chunks are compared
	// after those of "during" were copied).
	c.Up()
	waitResyncStarted(t, c, "storage1", 30*time.Second)
	after := &bytes.Buffer{}
	stop, writerDone := make(chan struct{}), make(chan error, 1)
	go func() { writerDone <- appendUntil(filepath.Join(dir, "after"), after, nil, stop) }()
	took := waitResynced(t, c, versions, 90*time.Second)
	close(stop)
	if err := <-writerDone; err != nil {
		t.Fatalf("writing after the return: %v", err)
	}
	runs, copied, nbytes := resyncsLogged(t, c, "storage1")
	t.Logf("resynced %v after the restart: %d runs copied %d chunks (%d bytes); %d MiB written meanwhile", took, runs, copied, nbytes, after.Len()>>20)
	// Everything written before the failure is recent (16 + 4 chunks),
	// then the 160 chunks written while out; of the file written after
	// the return, at most the chunks being written in each chain when the
	// resync listed the two copies.
	const missed = 16 + 4 + 160
	if runs != 2 || copied < missed || copied > missed+4 {
		t.Errorf("the resync of the 2 chains copied %d chunks in %d runs, want %d (at most 4 more): the chunks changed while the server was out or shortly before, and no others", copied, runs, missed)
	}
	if after.Len() < 4<<20 {
		t.Logf("only %d MiB written after the return: the check proves little", after.Len()>>20)
	}
	compareChainCopies(t, c)

	c.KillProcess("storage1")
	for name, data := range map[string][]byte{"before": before, "shrunk": shrunk, "during": during, "after": after.Bytes()} {
		if got := mustRead(t, filepath.Join(dir, name)); !bytes.Equal(got, data) {
			t.Errorf("%s: the resynced copies hold different data (%d bytes read, %d written)", name, len(got), len(data))
		}
	}
	c.Up()
	waitAllServing(t, c, 90*time.Second)
}
