package meta

import (
	"slices"
	"testing"

	"tandemfs/internal/proto"
	"tandemfs/internal/wire"
)

func allLive(uint64) bool { return true }

func report(gen uint64, files ...proto.OpenFile) *proto.OpenFiles {
	return &proto.OpenFiles{Gen: gen, Files: files}
}

func TestAReportedOpenFileHasItsSessionAsReaderOrWriterUntilAReportLeavesItOut(t *testing.T) {
	tb := newOpenTable()
	tb.report(1, report(1, proto.OpenFile{Ino: 10, Writing: true}, proto.OpenFile{Ino: 11}))
	tb.report(2, report(1, proto.OpenFile{Ino: 10}))
	w, r := tb.holders(10, allLive)
	if !slices.Equal(w, []uint64{1}) || !slices.Equal(r, []uint64{2}) {
		t.Fatalf("file 10: writers %v readers %v, want [1] and [2]", w, r)
	}
	tb.report(1, report(2, proto.OpenFile{Ino: 11}))
	if w, r := tb.holders(10, allLive); len(w) != 0 || !slices.Equal(r, []uint64{2}) {
		t.Fatalf("after session 1 closed file 10: writers %v readers %v, want none and [2]", w, r)
	}
}

func TestAnAnnouncedWriterStaysOneUntilAReportAsNewAsTheAnnouncementCountsIt(t *testing.T) {
	tb := newOpenTable()
	tb.announceWriting(1, 10, 5)
	// A report built before the announcement (counter 4) arrives after it:
	// the client was already writing, the report does not know yet.
	tb.report(1, report(4))
	if w, _ := tb.holders(10, allLive); !slices.Equal(w, []uint64{1}) {
		t.Fatalf("an older report dropped the announced writer: writers %v", w)
	}
	tb.report(1, report(5, proto.OpenFile{Ino: 10, Writing: true}))
	tb.report(1, report(6))
	if w, r := tb.holders(10, allLive); len(w)+len(r) != 0 {
		t.Fatalf("the file was closed (report 6): writers %v readers %v", w, r)
	}
}

func TestAReportThatArrivesLateIsIgnored(t *testing.T) {
	tb := newOpenTable()
	tb.report(1, report(3, proto.OpenFile{Ino: 10, Writing: true}))
	tb.report(1, report(2))
	if w, _ := tb.holders(10, allLive); !slices.Equal(w, []uint64{1}) {
		t.Fatalf("report 2 after report 3 replaced it: writers %v", w)
	}
}

func TestASessionWithMoreOpenFilesThanAReportHoldsWritesEveryFile(t *testing.T) {
	tb := newOpenTable()
	tb.report(1, &proto.OpenFiles{Gen: 1, Overflow: true})
	if w, _ := tb.holders(12345, allLive); !slices.Equal(w, []uint64{1}) {
		t.Fatalf("an overflowing session is not a writer of every file: writers %v", w)
	}
}

func TestASilentSessionHoldsNothing(t *testing.T) {
	tb := newOpenTable()
	tb.report(1, report(1, proto.OpenFile{Ino: 10, Writing: true}))
	tb.announceWriting(2, 10, 1)
	w, r := tb.holders(10, func(id uint64) bool { return id != 1 })
	if !slices.Equal(w, []uint64{2}) || len(r) != 0 {
		t.Fatalf("with session 1 silent: writers %v readers %v, want [2] and none", w, r)
	}
	if _, ok := tb.bySession[1]; ok {
		t.Fatalf("the silent session's files are still in the table")
	}
}

func TestOpenFileReportsRideOnWatchRequestsAndOldRequestsStillDecode(t *testing.T) {
	in := proto.WatchReq{Stream: 1, After: 2, WaitMs: 3, Session: 4, Opens: report(7, proto.OpenFile{Ino: 9, Writing: true})}
	var out proto.WatchReq
	if err := roundTrip(&in, &out); err != nil {
		t.Fatal(err)
	}
	if out.Opens == nil || out.Opens.Gen != 7 || !slices.Equal(out.Opens.Files, in.Opens.Files) {
		t.Fatalf("decoded %+v from %+v", out.Opens, in.Opens)
	}
	in.Opens = nil
	if err := roundTrip(&in, &out); err != nil || out.Opens != nil || out.Session != 4 {
		t.Fatalf("a request without a report decoded as %+v (%v)", out, err)
	}
}

// roundTrip encodes in and decodes the bytes into out, refusing leftovers.
func roundTrip(in interface{ Encode(*wire.Enc) }, out interface{ Decode(*wire.Dec) }) error {
	var e wire.Enc
	in.Encode(&e)
	d := wire.NewDec(e.B)
	out.Decode(d)
	return d.Finish()
}
