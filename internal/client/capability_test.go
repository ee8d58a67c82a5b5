package client

import "testing"

// When the absence of security.capability may be believed (capability.go).

func TestAnAbsenceAskedForBeforeAChangeIsNotBelieved(t *testing.T) {
	st := &fileState{}
	epoch := st.capabilityEpoch()
	st.forgetCapability() // another client's change, seen meanwhile
	st.learnCapabilityAbsent(epoch)
	if st.capabilityAbsent() {
		t.Fatal("believed an answer given before the change was seen")
	}
	st.learnCapabilityAbsent(st.capabilityEpoch())
	if !st.capabilityAbsent() {
		t.Fatal("did not believe an answer asked for after the change")
	}
}

func TestAChangeForgetsTheAbsence(t *testing.T) {
	st := &fileState{}
	st.learnCapabilityAbsent(st.capabilityEpoch())
	st.forgetCapability()
	if st.capabilityAbsent() {
		t.Fatal("still believed absent after a change")
	}
}

func TestACreatedFileKnowsItHasNoCapabilityUnlessChangedSince(t *testing.T) {
	c := &nsCache{lastIno: map[uint64]uint64{}}
	if c.changedSince(7, 10) {
		t.Fatal("no change seen, yet changedSince")
	}
	c.lastIno[7] = 10 // the create itself
	if c.changedSince(7, 10) {
		t.Fatal("the create's own change counted as a later one")
	}
	c.lastIno[7] = 11
	if !c.changedSince(7, 10) {
		t.Fatal("a later change was not noticed")
	}
	c.lastIno, c.floor = map[uint64]uint64{}, 20
	if !c.changedSince(7, 10) {
		t.Fatal("changes below the floor are forgotten, so one may have been missed")
	}
}
