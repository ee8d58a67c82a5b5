package storage

import (
	"runtime"
	"testing"
	"time"

	"tandemfs/internal/proto"
)

// serverOf returns a Service that holds the targets ids, enough for
// followResyncs.
func serverOf(ids ...uint32) *Service {
	s := &Service{logf: func(string, ...any) {}}
	m := map[uint32]*Target{}
	for _, id := range ids {
		m[id] = &Target{}
	}
	s.byID.Store(&m)
	return s
}

func mapOf(version uint64, chains ...proto.Chain) *chainView {
	v := &chainView{version: version, chains: map[uint32]proto.Chain{}}
	for _, c := range chains {
		v.chains[c.ID] = c
	}
	return v
}

func chainOf(id uint32, targets []uint32, states ...uint8) proto.Chain {
	return proto.Chain{ID: id, Targets: targets, States: states}
}

func TestAServerTakesMoreProcessorsOnlyWhileItTakesPartInAResync(t *testing.T) {
	base := runtime.GOMAXPROCS(0)
	serving, syncing := proto.MemberServing, proto.MemberSyncing
	s := serverOf(1, 2) // targets 1 and 2; 8 and 9 are another server's
	t.Cleanup(s.releaseProcs)
	steps := []struct {
		what string
		v    *chainView
		want int
	}{
		{"no member syncing", mapOf(1, chainOf(1, []uint32{1, 9}, serving, serving)), base},
		{"another server's chain syncing", mapOf(2, chainOf(1, []uint32{8, 9}, serving, syncing)), base},
		{"heading a chain whose member syncs", mapOf(3, chainOf(1, []uint32{1, 9}, serving, syncing)), base + procsExtra},
		{"and a second chain syncing", mapOf(4, chainOf(1, []uint32{1, 9}, serving, syncing), chainOf(2, []uint32{8, 2}, serving, syncing)), base + procsExtra},
		{"a syncing member of its own", mapOf(5, chainOf(2, []uint32{8, 2}, serving, syncing)), base + procsExtra},
		{"every member serving again", mapOf(6, chainOf(2, []uint32{8, 2}, serving, serving)), base},
		{"an older map, loaded late", mapOf(5, chainOf(2, []uint32{8, 2}, serving, syncing)), base},
	}
	for _, st := range steps {
		s.followResyncs(st.v)
		if got := runtime.GOMAXPROCS(0); got != st.want {
			t.Fatalf("%s (map %d): GOMAXPROCS %d, want %d", st.what, st.v.version, got, st.want)
		}
	}
}

func TestResyncProcessorsAreSharedByTheServersOfOneProcess(t *testing.T) {
	base := runtime.GOMAXPROCS(0)
	a, b := serverOf(1), serverOf(2)
	busy := mapOf(1, chainOf(1, []uint32{1, 2}, proto.MemberServing, proto.MemberSyncing))
	a.followResyncs(busy)
	b.followResyncs(busy)
	if got := runtime.GOMAXPROCS(0); got != base+procsExtra {
		t.Fatalf("two servers in one resync: GOMAXPROCS %d, want %d (raised once)", got, base+procsExtra)
	}
	a.releaseProcs() // a closes
	if got := runtime.GOMAXPROCS(0); got != base+procsExtra {
		t.Fatalf("one of them closed: GOMAXPROCS %d, want %d while the other resyncs", got, base+procsExtra)
	}
	a.followResyncs(mapOf(2, busy.chains[1])) // a closed server takes no part
	b.releaseProcs()
	if got := runtime.GOMAXPROCS(0); got != base {
		t.Fatalf("both closed: GOMAXPROCS %d, want %d back", got, base)
	}
}

func TestLargeWritesTakeMoreProcessorsUntilTheyStopComing(t *testing.T) {
	base := runtime.GOMAXPROCS(0)
	l := newLargeWrites(time.Second)
	t.Cleanup(l.close)
	l.note(4 << 10)
	if got := runtime.GOMAXPROCS(0); got != base {
		t.Fatalf("after a 4 KiB write: GOMAXPROCS %d, want %d", got, base)
	}
	// A stream of large writes for longer than the linger, each within
	// the linger of the one before: the processors stay throughout.
	for range 120 {
		l.note(1 << 20)
		time.Sleep(10 * time.Millisecond)
		if got := runtime.GOMAXPROCS(0); got != base+procsExtra {
			t.Fatalf("10 ms after a large write: GOMAXPROCS %d, want %d", got, base+procsExtra)
		}
	}
	waitFor(t, "the processors given back after the writes stop", func() bool { return runtime.GOMAXPROCS(0) == base })
	l.note(1 << 20)
	l.close()
	if got := runtime.GOMAXPROCS(0); got != base {
		t.Fatalf("closed while holding: GOMAXPROCS %d, want %d", got, base)
	}
	l.note(1 << 20)
	if got := runtime.GOMAXPROCS(0); got != base {
		t.Fatalf("a large write after close: GOMAXPROCS %d, want %d", got, base)
	}
}
