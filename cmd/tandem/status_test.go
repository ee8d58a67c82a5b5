package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"tandemfs/internal/proto"
)

// Long work shows how far it is, how fast it goes and how long it has
// left: a resync a quarter done after 10 s at 100 MiB/s has 30 s left.
func TestProgressIsShownAsPercentRateAndTimeLeft(t *testing.T) {
	started := time.Now().Add(-10 * time.Second)
	st := &proto.StatusReply{
		RaftState: "Leader",
		Resyncs: []proto.ResyncProgress{{Chain: 7, Target: 3, Buckets: 64, Bytes: 1000 << 20,
			StartedMs: started.UnixMilli()}},
		Scrubs: []proto.ScrubProgress{{Target: 1, Chain: 1, Running: true, Buckets: 128, Bytes: 500 << 20,
			StartedMs: started.UnixMilli()}},
	}
	j := statusToJSON(st, nil)
	b, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Resyncs []struct {
			Percent uint32  `json:"percent"`
			Rate    float64 `json:"bytes_per_second"`
			Left    float64 `json:"seconds_left"`
		} `json:"resyncs"`
		Scrubs []struct {
			Percent uint32  `json:"percent"`
			Rate    float64 `json:"bytes_per_second"`
			Left    float64 `json:"seconds_left"`
		} `json:"scrubs"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	r, s := got.Resyncs[0], got.Scrubs[0]
	near := func(a, b float64) bool { return a > b*0.97 && a < b*1.03 }
	if r.Percent != 25 || !near(r.Rate, 100<<20) || !near(r.Left, 30) {
		t.Fatalf("resync: %+v; want 25%%, 100 MiB/s, 30 s left\n%s", r, b)
	}
	if s.Percent != 50 || !near(s.Rate, 50<<20) || !near(s.Left, 10) {
		t.Fatalf("scrub: %+v; want 50%%, 50 MiB/s, 10 s left\n%s", s, b)
	}
	if line := j.Resyncs[0].progressJSON.String(); !strings.Contains(line, "MiB/s") || !strings.Contains(line, "s left") {
		t.Fatalf("the line status prints: %q", line)
	}
	// Nothing done yet: no time left to tell.
	if p := progressOf(0, 0, started, time.Now()); p.Left != -1 || !strings.Contains(p.String(), "not known yet") {
		t.Fatalf("at the start: %+v %q", p, p.String())
	}
}
