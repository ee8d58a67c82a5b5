package storage

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// recordingSync is a member that records the batches it is asked to make
// durable; each sync waits for release when gated.
type recordingSync struct {
	mu      sync.Mutex
	batches []map[uint64][]uint64
	running int // syncs running now
	most    int // syncs ever running at once
	started chan struct{}
	release chan struct{}
	fail    error
}

func newRecordingSync(gated bool) *recordingSync {
	r := &recordingSync{started: make(chan struct{}, 100)}
	if gated {
		r.release = make(chan struct{})
	}
	return r
}

func (r *recordingSync) sync(batch map[uint64][]uint64) error {
	r.mu.Lock()
	r.batches = append(r.batches, batch)
	r.running++
	r.most = max(r.most, r.running)
	r.mu.Unlock()
	r.started <- struct{}{}
	if r.release != nil {
		<-r.release
	}
	r.mu.Lock()
	r.running--
	r.mu.Unlock()
	return r.fail
}

// runBatches runs syncInBatches on a new channel and returns the channel
// and where its result arrives.
func runBatches(r *recordingSync) (chan<- copiedChunk, <-chan error) {
	in := make(chan copiedChunk)
	done := make(chan error, 1)
	go func() {
		_, err := syncInBatches(in, r.sync)
		done <- err
	}()
	return in, done
}

// sendWithin reports whether c could be sent within d.
func sendWithin(in chan<- copiedChunk, c copiedChunk, d time.Duration) bool {
	select {
	case in <- c:
		return true
	case <-time.After(d):
		return false
	}
}

// waitStarted waits for the next sync to start, failing the test after
// a few seconds.
func (r *recordingSync) waitStarted(t *testing.T) {
	t.Helper()
	receiveWithin(t, r.started, 5*time.Second, "no sync started")
}

func copied1MiB(ino, idx uint64) copiedChunk { return copiedChunk{chunkKey{ino, idx}, 1 << 20} }

func TestResyncSyncsEveryCopiedChunkOnceInBatchesOfBoundedSize(t *testing.T) {
	r := newRecordingSync(false)
	in, done := runBatches(r)
	for i := range uint64(300) {
		in <- copied1MiB(1+i%3, i)
	}
	close(in)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	seen := map[chunkKey]int{}
	for _, b := range r.batches {
		n := 0
		for ino, idxs := range b {
			for _, idx := range idxs {
				seen[chunkKey{ino, idx}]++
				n++
			}
		}
		if n<<20 > resyncSyncBytes {
			t.Errorf("a batch of %d MiB, more than %d", n, resyncSyncBytes>>20)
		}
	}
	if len(seen) != 300 {
		t.Errorf("%d chunks synced, want 300", len(seen))
	}
	for k, n := range seen {
		if n != 1 {
			t.Errorf("chunk %v synced %d times", k, n)
		}
	}
	if want := (300<<20 + resyncSyncBytes - 1) / resyncSyncBytes; len(r.batches) != want {
		t.Errorf("%d batches, want %d", len(r.batches), want)
	}
}

func TestResyncChunksWithoutBytesAreSyncedInBatchesOfBoundedCount(t *testing.T) {
	r := newRecordingSync(false)
	in, done := runBatches(r)
	for i := range uint64(resyncSyncChunks + 1) {
		in <- copiedChunk{chunkKey{7, i}, 0} // cut to size, or all holes
	}
	close(in)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(r.batches) != 2 || len(r.batches[0][7]) != resyncSyncChunks || len(r.batches[1][7]) != 1 {
		t.Errorf("batches of %d chunks, want %d then 1", len(r.batches), resyncSyncChunks)
	}
}

func TestResyncCopiesOnWhileTheBatchBeforeSyncs(t *testing.T) {
	r := newRecordingSync(true)
	in, done := runBatches(r)
	perBatch := uint64(resyncSyncBytes >> 20)
	for i := range perBatch {
		in <- copied1MiB(1, i)
	}
	r.waitStarted(t) // the first batch is full and syncing, and stays so
	for i := range perBatch - 1 {
		if !sendWithin(in, copied1MiB(1, perBatch+i), 5*time.Second) {
			t.Fatalf("chunk %d of the second batch not taken while the first syncs", i)
		}
	}
	// The second batch is full with this one: it waits for the first.
	if !sendWithin(in, copied1MiB(1, 2*perBatch-1), 5*time.Second) {
		t.Fatal("the last chunk of the second batch not taken")
	}
	if sendWithin(in, copied1MiB(1, 2*perBatch), 100*time.Millisecond) {
		t.Fatal("a third batch was taken while the first was still syncing")
	}
	close(r.release)
	close(in)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if r.most != 1 {
		t.Errorf("%d syncs ran at once, want 1", r.most)
	}
	if len(r.batches) != 2 {
		t.Errorf("%d batches synced, want 2", len(r.batches))
	}
}

func TestResyncReturnsOnlyOnceTheLastBatchIsDurable(t *testing.T) {
	r := newRecordingSync(true)
	in, done := runBatches(r)
	in <- copied1MiB(1, 0)
	close(in)
	r.waitStarted(t)
	select {
	case <-done:
		t.Fatal("returned while the last batch was still syncing")
	case <-time.After(100 * time.Millisecond):
	}
	r.release <- struct{}{}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestResyncStopsSyncingAfterABatchFails(t *testing.T) {
	r := newRecordingSync(false)
	r.fail = errors.New("member's disk failed")
	in, done := runBatches(r)
	for i := range uint64(3 * resyncSyncBytes >> 20) {
		in <- copied1MiB(1, i) // all taken: the rest is drained
	}
	close(in)
	if err := <-done; !errors.Is(err, r.fail) {
		t.Fatalf("got %v, want the sync's error", err)
	}
	if len(r.batches) != 1 {
		t.Errorf("%d batches synced after the first failed, want none", len(r.batches)-1)
	}
}
