package epoch

import (
	"context"
	"errors"
	"testing"

	"tandemfs/internal/proto"
)

func chain(id, version uint32) proto.Chain { return proto.Chain{ID: id, Version: version} }

func TestAnEpochLastsUntilItsChainChanges(t *testing.T) {
	var s Set
	s.Update([]proto.Chain{chain(1, 5), chain(2, 7)})
	ctx1, ctx2 := s.Context(1, 5), s.Context(2, 7)
	if ctx1.Err() != nil || ctx2.Err() != nil {
		t.Fatal("current epochs must not have ended")
	}
	s.Update([]proto.Chain{chain(1, 5), chain(2, 7)})
	if ctx1.Err() != nil || ctx2.Err() != nil {
		t.Fatal("a reload without changes ended an epoch")
	}
	s.Update([]proto.Chain{chain(1, 6), chain(2, 7)})
	if !errors.Is(context.Cause(ctx1), ErrChainChanged) {
		t.Fatalf("chain 1 changed but its epoch goes on (cause %v)", context.Cause(ctx1))
	}
	if ctx2.Err() != nil {
		t.Fatal("chain 2 did not change but its epoch ended")
	}
	if s.Context(1, 6).Err() != nil {
		t.Fatal("the new epoch of chain 1 has ended")
	}
}

func TestAnOldVersionHasNoEpoch(t *testing.T) {
	var s Set
	s.Context(3, 2)
	if s.Context(3, 1).Err() == nil {
		t.Fatal("a version other than the known one got a live context")
	}
}

func TestAVanishedChainEndsItsEpoch(t *testing.T) {
	var s Set
	ctx := s.Context(4, 1)
	s.Update(nil)
	if ctx.Err() == nil {
		t.Fatal("the chain is gone but its epoch goes on")
	}
}

// A caller still routed by an old version after an Update must not leave
// behind an epoch that ends every caller of the current version.
func TestALateCallerOfAnOldVersionLeavesNoTrace(t *testing.T) {
	var s Set
	s.Update([]proto.Chain{chain(1, 3)})
	s.Context(1, 3)
	s.Update([]proto.Chain{chain(1, 4)})
	if s.Context(1, 3).Err() == nil {
		t.Fatal("version 3 is over but got a live context")
	}
	if err := s.Context(1, 4).Err(); err != nil {
		t.Fatalf("the current version got an ended context: %v", context.Cause(s.Context(1, 4)))
	}
}
