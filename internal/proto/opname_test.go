package proto

import "testing"

func TestEveryOperationHasItsOwnName(t *testing.T) {
	seen := map[string]uint16{}
	for op := uint16(0); op < 1024; op++ {
		n := OpName(op)
		if n == "unknown" {
			continue
		}
		if prev, dup := seen[n]; dup {
			t.Errorf("ops %d and %d are both named %q", prev, op, n)
		}
		seen[n] = op
	}
	if len(seen) != len(opNames) {
		t.Errorf("%d named ops reachable, %d in the table", len(seen), len(opNames))
	}
	for _, op := range []uint16{OpLookup, OpFileLease, OpChunkWrite, OpScrubStart} {
		if OpName(op) == "unknown" {
			t.Errorf("op %d has no name", op)
		}
	}
	if OpName(0) != "unknown" || OpName(999) != "unknown" {
		t.Errorf("codes no service defines must be %q", "unknown")
	}
}
