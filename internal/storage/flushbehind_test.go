package storage

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"tandemfs/internal/proto"
)

// counted is a counter's value.
func counted(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// countingFlush stands in for syncFS on a target: it counts the flushes
// begun and, when gated, holds each until released.
type countingFlush struct {
	mu      sync.Mutex
	begun   int
	started chan struct{}
	release chan struct{}
	err     error
}

func countFlushes(tg *Target, gated bool, err error) *countingFlush {
	c := &countingFlush{started: make(chan struct{}, 100), err: err}
	if gated {
		c.release = make(chan struct{})
	}
	fn := func(dir string) error {
		if dir != tg.dir {
			return errors.New("flushed " + dir + ", not the target's directory")
		}
		c.mu.Lock()
		c.begun++
		c.mu.Unlock()
		c.started <- struct{}{}
		if c.release != nil {
			<-c.release
		}
		return c.err
	}
	tg.behind.flush.Store(&fn)
	return c
}

func (c *countingFlush) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.begun
}

// waitBegun waits for the next flush to begin, failing after a few seconds.
func (c *countingFlush) waitBegun(t *testing.T) {
	t.Helper()
	receiveWithin(t, c.started, 5*time.Second, "no flush began")
}

// assertNoneBegins checks that no further flush begins for a while.
func (c *countingFlush) assertNoneBegins(t *testing.T, why string) {
	t.Helper()
	select {
	case <-c.started:
		t.Fatalf("a flush began %s", why)
	case <-time.After(100 * time.Millisecond):
	}
}

// waitIdle waits until no flush runs, failing after a few seconds.
func waitIdle(t *testing.T, tg *Target) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); tg.behind.running.Load(); {
		if time.Now().After(end) {
			t.Fatal("the flush did not end")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestLargeWritesFlushTheFileSystemBehindThemEvery64MiB(t *testing.T) {
	tg := openTestTarget(t, Options{})
	c := countFlushes(tg, false, nil)
	for range flushBehindBytes/mib - 1 {
		tg.wrote(mib)
	}
	c.assertNoneBegins(t, "before 64 MiB were written")
	tg.wrote(mib)
	c.waitBegun(t)
	waitIdle(t, tg)
	for range flushBehindBytes / mib {
		tg.wrote(mib)
	}
	c.waitBegun(t)
	if n := c.count(); n != 2 {
		t.Fatalf("%d flushes after 128 MiB, want 2", n)
	}
}

func TestSmallWritesDoNotCountTowardsAFlush(t *testing.T) {
	tg := openTestTarget(t, Options{})
	c := countFlushes(tg, false, nil)
	for range 2 * flushBehindBytes / 4096 {
		tg.wrote(4096)
	}
	c.assertNoneBegins(t, "after random 4 KiB writes")
}

func TestOneFlushRunsAtATimeAndTheNextFollowsTheWritesAfterIt(t *testing.T) {
	tg := openTestTarget(t, Options{})
	c := countFlushes(tg, true, nil)
	for range flushBehindBytes / mib {
		tg.wrote(mib)
	}
	c.waitBegun(t)
	for range 3 * flushBehindBytes / mib {
		tg.wrote(mib)
	}
	c.assertNoneBegins(t, "while another ran")
	close(c.release)
	waitIdle(t, tg)
	tg.wrote(mib) // the writes made during the first flush are due
	c.waitBegun(t)
}

func TestAFailedFlushIsLoggedOnceAMinuteAndDoesNotStopTheNext(t *testing.T) {
	var mu sync.Mutex
	var logs []string
	tg := openTestTarget(t, Options{Logf: func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		logs = append(logs, format)
	}})
	c := countFlushes(tg, false, errors.New("disk gone"))
	flushes, failed := counted(t, flushBehindFlushes), counted(t, flushBehindErrors)
	for range 3 {
		for range flushBehindBytes / mib {
			tg.wrote(mib)
		}
		c.waitBegun(t)
		waitIdle(t, tg)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(logs) != 1 || !strings.Contains(logs[0], "flushing its file system") {
		t.Fatalf("logged %q, want one line about the failed flush", logs)
	}
	if n := counted(t, flushBehindFlushes) - flushes; n != 3 {
		t.Errorf("tandem_storage_flush_behind_total rose by %v, want 3", n)
	}
	if n := counted(t, flushBehindErrors) - failed; n != 3 {
		t.Errorf("tandem_storage_flush_behind_errors_total rose by %v, want 3", n)
	}
}

func TestSyncFSFlushesARealFileSystemAndNamesAMissingDirectory(t *testing.T) {
	if err := syncFS(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if err := syncFS(t.TempDir() + "/gone"); err == nil {
		t.Fatal("syncfs of a missing directory succeeded")
	}
}

func TestClientWritesAreFlushedBehindAndAResyncsCopiesAreNot(t *testing.T) {
	ts, _ := startRegisteredServer(t, 1)
	tg := ts.svc.Targets()[0]
	c := countFlushes(tg, false, nil)
	tid := tg.ID()
	write := func(idx uint64, bulk bool) {
		ref := proto.ChunkRef{Routing: proto.Routing{Target: tid, Chain: tid}, Ino: 5, Index: idx}
		call(t, ts.client, proto.OpChunkWrite, &proto.ChunkWriteReq{Chunk: ref, Data: pattern(idx, proto.MaxData), Bulk: bulk})
	}
	for i := range uint64(flushBehindBytes/proto.MaxData + 1) {
		write(i, true)
	}
	c.assertNoneBegins(t, "for a resync's copies")
	for i := range uint64(flushBehindBytes / proto.MaxData) {
		write(i, false)
	}
	c.waitBegun(t)
}
