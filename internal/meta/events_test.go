package meta

import (
	"testing"
	"time"

	"tandemfs/internal/proto"
)

func change(index, ino uint64) proto.ChangeEvent { return proto.ChangeEvent{Index: index, Ino: ino} }

func TestEventLogAnswersTheChangesAfterAnIndex(t *testing.T) {
	l := newEventLog(10)
	var r proto.WatchReply
	l.since(0, 0, 100, &r)
	if !r.Lost || r.Upto != 10 {
		t.Fatalf("a first request must learn the stream and start from its end: %+v", r)
	}
	stream := r.Stream
	l.add(11, []proto.ChangeEvent{change(11, 5), change(11, 6)})
	l.add(12, nil) // a command that changed nothing still counts as seen
	l.add(13, []proto.ChangeEvent{change(13, 7)})
	l.since(stream, 10, 100, &r)
	if r.Lost || r.Upto != 13 || len(r.Events) != 3 {
		t.Fatalf("changes after 10: %+v", r)
	}
	l.since(stream, 11, 100, &r)
	if len(r.Events) != 1 || r.Events[0].Ino != 7 {
		t.Fatalf("changes after 11: %+v", r)
	}
	// A reply too small for every change stops between indexes.
	l.since(stream, 10, 2, &r)
	if r.Lost || r.Upto != 11 || len(r.Events) != 2 {
		t.Fatalf("changes after 10, at most 2: %+v", r)
	}
	l.since(stream+1, 13, 100, &r)
	if !r.Lost {
		t.Fatal("a request for another stream must be told it lost changes")
	}
}

func TestEventLogForgetsOldChangesAndSaysSo(t *testing.T) {
	l := newEventLog(0)
	var r proto.WatchReply
	l.since(0, 0, 1, &r)
	stream := r.Stream
	for i := uint64(1); i <= maxEvents+10; i++ {
		l.add(i, []proto.ChangeEvent{change(i, i)})
	}
	l.since(stream, 1, proto.MaxWatchEvents, &r)
	if !r.Lost {
		t.Fatal("changes that were dropped must be reported lost")
	}
	l.since(stream, maxEvents, proto.MaxWatchEvents, &r)
	if r.Lost || len(r.Events) != 10 {
		t.Fatalf("recent changes: lost %v, %d events", r.Lost, len(r.Events))
	}
	l.restart(maxEvents + 10)
	l.since(stream, maxEvents+10, 100, &r)
	if !r.Lost {
		t.Fatal("after a restore, the old stream must be reported lost")
	}
}

func TestWatchWaitsForTheNextChange(t *testing.T) {
	l := newEventLog(0)
	var r proto.WatchReply
	l.since(0, 0, 1, &r)
	go func() {
		time.Sleep(50 * time.Millisecond)
		l.add(1, []proto.ChangeEvent{change(1, 9)})
	}()
	start := time.Now()
	l.watch(&proto.WatchReq{Stream: r.Stream, After: 0, WaitMs: 5000}, nil, &r)
	if len(r.Events) != 1 || time.Since(start) > 2*time.Second {
		t.Fatalf("watch returned %+v after %v", r, time.Since(start))
	}
	start = time.Now()
	l.watch(&proto.WatchReq{Stream: r.Stream, After: 1, WaitMs: 100}, nil, &r)
	if len(r.Events) != 0 || r.Lost || time.Since(start) < 100*time.Millisecond {
		t.Fatalf("a watch without changes must wait its time and return nothing: %+v", r)
	}
}
