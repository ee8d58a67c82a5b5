package storage

import (
	"testing"
	"time"
)

// barrier runs c.waitOlder(chain, version) and returns a function that
// reports whether it returned within d.
func barrier(c *changesInFlight, chain, version uint32, d time.Duration) (returned func() bool) {
	done := make(chan struct{})
	go func() {
		c.waitOlder(chain, version)
		close(done)
	}()
	return func() bool {
		select {
		case <-done:
			return true
		case <-time.After(d):
			return false
		}
	}
}

func TestTheBarrierPassesWithNoOlderChangeInFlight(t *testing.T) {
	c := newChangesInFlight()
	c.start(1, 3)() // started and finished
	defer c.start(1, 5)()
	defer c.start(2, 1)()
	if !barrier(c, 1, 5, 5*time.Second)() {
		t.Fatal("the barrier waited for changes of its own version or of another chain")
	}
}

func TestTheBarrierWaitsForEveryChangeOfAnOlderVersion(t *testing.T) {
	c := newChangesInFlight()
	first, second := c.start(1, 3), c.start(1, 4)
	returned := barrier(c, 1, 5, 50*time.Millisecond)
	if returned() {
		t.Fatal("the barrier passed two changes of older versions in flight")
	}
	first()
	if returned() {
		t.Fatal("the barrier passed a change of an older version still in flight")
	}
	second()
	if !barrier(c, 1, 5, 5*time.Second)() || !returned() {
		t.Fatal("the barrier still waits after both changes finished")
	}
}
