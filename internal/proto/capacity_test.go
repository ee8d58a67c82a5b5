package proto

import (
	"reflect"
	"testing"
)

// Each file system counts once however many targets it holds, and only
// while one of them is online.
func TestCapacityCountsEachOnlineFileSystemOnce(t *testing.T) {
	const gib = 1 << 30
	targets := []Target{
		{ID: 1, Server: 1, Device: 0xa, TotalBytes: 100 * gib, FreeBytes: 40 * gib},
		{ID: 2, Server: 1, Device: 0xa, TotalBytes: 100 * gib, FreeBytes: 40 * gib}, // same disk as 1
		{ID: 3, Server: 2, Device: 0xa, TotalBytes: 100 * gib, FreeBytes: 40 * gib}, // same disk, other server on the same machine
		{ID: 4, Server: 2, Device: 0xb, TotalBytes: 50 * gib, FreeBytes: 10 * gib},
		{ID: 5, Server: 3, Device: 0xc, TotalBytes: 70 * gib, FreeBytes: 70 * gib, State: TargetOffline},
		{ID: 6, Server: 3, Device: 0xd, TotalBytes: 70 * gib, FreeBytes: 70 * gib, State: TargetFailed},
	}
	got := CapacityOf(targets)
	want := ClusterCapacity{Total: 150 * gib, Free: 50 * gib, FileSystems: 2, Offline: []uint32{5, 6}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	// The disk of an offline target still counts through an online one.
	targets[0].State = TargetOffline
	if got := CapacityOf(targets); got.Total != 150*gib || len(got.Offline) != 3 {
		t.Fatalf("got %+v", got)
	}
}
