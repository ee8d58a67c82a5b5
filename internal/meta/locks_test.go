package meta

import (
	"reflect"
	"testing"

	"tandemfs/internal/proto"
)

// The lock algebra the state machine applies: POSIX record locks as Linux
// keeps them, per owner, over byte ranges.

var (
	alice = proto.LockOwner{Session: 1, Owner: 10}
	bob   = proto.LockOwner{Session: 2, Owner: 20}
	// carol runs on alice's client host: same session, another process.
	carol = proto.LockOwner{Session: 1, Owner: 11}
)

func rd(start, end uint64) proto.Lock {
	return proto.Lock{Start: start, End: end, Type: proto.LockRead}
}
func wr(start, end uint64) proto.Lock {
	return proto.Lock{Start: start, End: end, Type: proto.LockWrite}
}
func un(start, end uint64) proto.Lock {
	return proto.Lock{Start: start, End: end, Type: proto.LockUnlock}
}

// take applies want for owner, failing the test if it conflicts.
func take(t *testing.T, held []heldLock, owner proto.LockOwner, want proto.Lock) []heldLock {
	t.Helper()
	if c, ok := conflict(held, owner, want); ok {
		t.Fatalf("%+v taking %+v: conflicts with %+v", owner, want, c)
	}
	return applyLock(held, owner, want)
}

func ranges(held []heldLock, owner proto.LockOwner) []proto.Lock {
	var out []proto.Lock
	for _, h := range held {
		if h.LockOwner == owner {
			out = append(out, proto.Lock{Start: h.Start, End: h.End, Type: h.Type})
		}
	}
	return out
}

func wantRanges(t *testing.T, held []heldLock, owner proto.LockOwner, want ...proto.Lock) {
	t.Helper()
	if got := ranges(held, owner); !reflect.DeepEqual(got, want) {
		t.Fatalf("%+v holds %+v, want %+v", owner, got, want)
	}
}

func TestReadLocksAreSharedAndWriteLocksExclude(t *testing.T) {
	held := take(t, nil, alice, rd(0, 99))
	held = take(t, held, bob, rd(50, 149))
	if _, ok := conflict(held, carol, wr(99, 99)); !ok {
		t.Fatal("a write lock was granted over read locks of other owners")
	}
	if _, ok := conflict(held, carol, wr(150, 200)); ok {
		t.Fatal("a write lock past every held range was refused")
	}
	held = take(t, held, carol, wr(150, 200))
	if c, ok := conflict(held, alice, rd(200, 200)); !ok || c.Start != 150 || c.Type != proto.LockWrite {
		t.Fatalf("a read lock over another's write lock: conflict %+v, %v", c, ok)
	}
}

func TestAnOwnerNeverConflictsWithItself(t *testing.T) {
	held := take(t, nil, alice, rd(0, 99))
	held = take(t, held, alice, wr(0, 99)) // upgrade in place
	wantRanges(t, held, alice, wr(0, 99))
	held = take(t, held, alice, rd(0, 99)) // and back
	wantRanges(t, held, alice, rd(0, 99))
}

func TestUnlockingTheMiddleSplitsALock(t *testing.T) {
	held := take(t, nil, alice, wr(0, 99))
	held = applyLock(held, alice, un(40, 59))
	wantRanges(t, held, alice, wr(0, 39), wr(60, 99))
	if _, ok := conflict(held, bob, wr(40, 59)); ok {
		t.Fatal("the unlocked middle is still locked")
	}
}

func TestChangingTheTypeOfPartOfALockSplitsIt(t *testing.T) {
	held := take(t, nil, alice, wr(0, 99))
	held = take(t, held, alice, rd(10, 19))
	wantRanges(t, held, alice, wr(0, 9), rd(10, 19), wr(20, 99))
}

func TestAdjacentLocksOfOneTypeMerge(t *testing.T) {
	held := take(t, nil, alice, wr(0, 9))
	held = take(t, held, alice, wr(20, 29))
	held = take(t, held, alice, wr(10, 19))
	wantRanges(t, held, alice, wr(0, 29))
	held = take(t, held, alice, rd(30, proto.LockEnd))
	wantRanges(t, held, alice, wr(0, 29), rd(30, proto.LockEnd))
	// Another owner's adjacent lock stays its own.
	held = take(t, nil, alice, rd(0, 9))
	held = take(t, held, carol, rd(10, 19))
	wantRanges(t, held, alice, rd(0, 9))
	wantRanges(t, held, carol, rd(10, 19))
}

func TestUnlockingEverythingLeavesNothing(t *testing.T) {
	held := take(t, nil, alice, wr(0, 9))
	held = take(t, held, alice, rd(100, 199))
	held = take(t, held, bob, rd(100, 199))
	held = applyLock(held, alice, un(0, proto.LockEnd))
	wantRanges(t, held, alice)
	wantRanges(t, held, bob, rd(100, 199))
}

func TestPosixAndFlockLocksNeverMeet(t *testing.T) {
	flock := proto.LockOwner{Session: 2, Owner: 99, Flock: true}
	held := take(t, nil, alice, wr(0, proto.LockEnd))
	held = take(t, held, flock, wr(0, proto.LockEnd))
	if _, ok := conflict(held, proto.LockOwner{Session: 3, Owner: 5, Flock: true}, rd(0, proto.LockEnd)); !ok {
		t.Fatal("flock locks do not exclude each other")
	}
}

func TestOnlyTheHoldersOwnClientSeesItsPid(t *testing.T) {
	l := wr(0, 9)
	l.Pid = 4242
	held := take(t, nil, alice, l)
	if c, _ := conflict(held, carol, wr(0, 0)); c.Pid != 4242 {
		t.Fatalf("a process on the same client sees pid %d, want 4242", c.Pid)
	}
	if c, _ := conflict(held, bob, wr(0, 0)); c.Pid != 0 {
		t.Fatalf("a process on another client sees pid %d, want 0", c.Pid)
	}
}

func TestASilentSessionLosesOnlyItsLocks(t *testing.T) {
	held := take(t, nil, alice, rd(0, 9))
	held = take(t, held, carol, rd(0, 9))
	held = take(t, held, bob, rd(0, 9))
	kept := dropSession(held, alice.Session)
	wantRanges(t, kept, alice)
	wantRanges(t, kept, carol)
	wantRanges(t, kept, bob, rd(0, 9))
	if len(held) != 3 {
		t.Fatal("dropSession changed its input")
	}
}

func TestLockRecordsRoundTrip(t *testing.T) {
	held := take(t, nil, alice, wr(0, 9))
	held = take(t, held, proto.LockOwner{Session: 7, Owner: 8, Flock: true}, rd(0, proto.LockEnd))
	got, err := decodeLocks(encodeLocks(held))
	if err != nil || !reflect.DeepEqual(got, held) {
		t.Fatalf("decoded %+v, %v; want %+v", got, err, held)
	}
	if _, err := decodeLocks(encodeLocks(held)[:30]); err == nil {
		t.Fatal("a truncated record decoded")
	}
}
