package storage

import (
	"os"
	"path/filepath"
	"testing"

	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
)

func TestServerMakesTheStoresOfItsReplicatedChainsBeforeAnyWrite(t *testing.T) {
	secret, _ := rpc.NewSecret()
	meta := startFakeMeta(t, secret, "127.0.0.1:0")
	const otherServersTarget = 999
	// Chain 900 has the first target as its head; in chain 901 the second
	// target is offline, so it has no store to make.
	meta.replicated = func(m *fakeMeta) []proto.Chain {
		if len(m.regs) == 0 {
			return nil
		}
		first, second := m.ids[m.regs[0].Targets[0].UUID], m.ids[m.regs[0].Targets[1].UUID]
		return []proto.Chain{
			{ID: 900, Version: 1, Targets: []uint32{first, otherServersTarget},
				States: []uint8{proto.MemberServing, proto.MemberServing}, SinceMs: []int64{0, 0}},
			{ID: 901, Version: 1, Targets: []uint32{otherServersTarget, second},
				States: []uint8{proto.MemberServing, proto.MemberOffline}, SinceMs: []int64{0, 0}},
		}
	}
	cfg := testConfig(t, secret, meta.addr, 2)
	ts := startServer(t, cfg)
	waitRegistered(t, ts.svc)

	lastBucket := filepath.Join(cfg.TargetDirs[0], "chains", "900", "chunks", "ff")
	waitFor(t, "the store of chain 900, with its bucket directories, on the first target", func() bool {
		_, err := os.Stat(lastBucket)
		return err == nil
	})
	if _, err := os.Stat(filepath.Join(cfg.TargetDirs[1], "chains", "901")); !os.IsNotExist(err) {
		t.Fatalf("the offline member's store of chain 901 was made (stat: %v)", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.TargetDirs[1], "chains", "900")); !os.IsNotExist(err) {
		t.Fatalf("a store of chain 900 was made on a target that is not its member (stat: %v)", err)
	}
}
