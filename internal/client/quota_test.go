package client

import (
	"math"
	"testing"
	"time"

	"tandemfs/internal/proto"
)

// A file reports its growth when it reaches the next byte limit of its
// quotas that is still ahead: past a soft limit (its grace period runs)
// or at a hard one (growth is refused) there is nothing to reach.
func TestTheRoomLeftCountsOnlyLimitsAhead(t *testing.T) {
	c := &Client{}
	c.quotas.limited = map[proto.QuotaID]proto.QuotaRecord{
		{Kind: proto.QuotaUser, ID: 1000}: {Kind: proto.QuotaUser, ID: 1000, Bytes: 100,
			QuotaLimits: proto.QuotaLimits{BlockSoft: 150, BlockHard: 400}},
		{Kind: proto.QuotaGroup, ID: 50}: {Kind: proto.QuotaGroup, ID: 50, Bytes: 300,
			QuotaLimits: proto.QuotaLimits{BlockSoft: 200, BlockHard: 1000}},
		{Kind: proto.QuotaUser, ID: 2000}: {Kind: proto.QuotaUser, ID: 2000, Bytes: 500,
			QuotaLimits: proto.QuotaLimits{BlockHard: 500}},
	}
	file := func(uid, gid uint32) *proto.Inode {
		return &proto.Inode{Attr: proto.Attr{Mode: 0o100644, Uid: uid, Gid: gid}}
	}
	for _, tc := range []struct {
		uid, gid uint32
		want     uint64
	}{
		{1000, 7, 50},             // the user's soft limit is next
		{9, 50, 700},              // the group is past its soft limit: its hard one is next
		{1000, 50, 50},            // the nearest of both
		{2000, 7, math.MaxUint64}, // at the hard limit: growth is refused, nothing to report
		{9, 7, math.MaxUint64},    // no limits at all
	} {
		if got := c.headroom(file(tc.uid, tc.gid)); got != tc.want {
			t.Errorf("uid %d gid %d: room %d, want %d", tc.uid, tc.gid, got, tc.want)
		}
	}
	// Growth of the file at its hard limit is refused.
	c.quotas.fetched = time.Now() // fresh: no refresh is asked for
	if err := c.checkGrowth(file(2000, 7)); err == nil {
		t.Fatal("a file whose owner is at the hard limit may grow")
	}
	if err := c.checkGrowth(file(1000, 7)); err != nil {
		t.Fatalf("a file with room may grow: %v", err)
	}
}
