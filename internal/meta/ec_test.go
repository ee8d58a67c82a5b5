package meta_test

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"tandemfs/internal/client"
	"tandemfs/internal/meta"
	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
)

// Erasure-coded files in the metadata service: a directory's pattern
// names K+M, a new file in it gets one target on each of K+M servers, and
// its stripes' versions are recorded with its size, all or none, by
// compare-and-set on the version each was built on.

// registerServers registers n storage servers of targets targets each
// (no process behind them: the metadata service only records them).
func registerServers(t *testing.T, svc *meta.Service, from, n, targets int) {
	t.Helper()
	registerRackServers(t, svc, from, n, targets, func(int) string { return "" })
}

// registerRackServers is registerServers with server i in rack rack(i).
func registerRackServers(t *testing.T, svc *meta.Service, from, n, targets int, rack func(i int) string) {
	t.Helper()
	raw := rpc.NewClient(svc.Addr(), testSecret)
	defer raw.Close()
	for i := from; i < from+n; i++ {
		req := proto.RegisterServerReq{UUID: fmt.Sprintf("server-%d", i), Addr: fmt.Sprintf("127.0.0.1:%d", 1000+i), Rack: rack(i)}
		for j := 0; j < targets; j++ {
			req.Targets = append(req.Targets, proto.TargetInfo{UUID: fmt.Sprintf("target-%d-%d", i, j), Path: "/t", TotalBytes: 1 << 30, FreeBytes: 1 << 30})
		}
		if err := raw.Call(proto.OpRegisterServer, req.Encode, nil); err != nil {
			t.Fatal(err)
		}
	}
}

func mkdirIn(t *testing.T, c *client.Client, parent uint64, name string) *proto.Inode {
	t.Helper()
	n, err := c.Create(&proto.CreateReq{Parent: parent, Name: name, Mode: 0o040755})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func ecPattern(k, m uint8) proto.Stripe { return proto.Stripe{EC: proto.ECPattern{Data: k, Parity: m}} }

func wantErr(t *testing.T, err error, errno syscall.Errno, words string) {
	t.Helper()
	if !errors.Is(err, errno) || !strings.Contains(err.Error(), words) {
		t.Fatalf("got %v, want %v saying %q", err, errno, words)
	}
}

func TestAnErasureCodedPatternNeedsAServerPerShard(t *testing.T) {
	svc, c := setup(t)
	registerServers(t, svc, 0, 5, 1)
	dir := mkdirIn(t, c, proto.RootIno, "ec")
	wantErr(t, c.SetStripe(dir.Ino, ecPattern(4, 2)), syscall.EINVAL, "6 shards on a server of its own; the cluster has 5 servers")
	wantErr(t, c.SetStripe(dir.Ino, ecPattern(0, 1)), syscall.EINVAL, "no data shard")
	wantErr(t, c.SetStripe(dir.Ino, ecPattern(4, 0)), syscall.EINVAL, "no parity shard")
	wantErr(t, c.SetStripe(dir.Ino, ecPattern(17, 2)), syscall.EINVAL, "must be 2 to 16")
	both := ecPattern(2, 1)
	both.Replicas = 2
	wantErr(t, c.SetStripe(dir.Ino, both), syscall.EINVAL, "not both")

	registerServers(t, svc, 5, 1, 1)
	if err := c.SetStripe(dir.Ino, ecPattern(4, 2)); err != nil {
		t.Fatalf("4+2 with six servers: %v", err)
	}
}

func TestANewFileInAnErasureCodedDirectoryGetsOneTargetPerServer(t *testing.T) {
	svc, c := setup(t)
	registerServers(t, svc, 0, 7, 2) // 7 servers of 2 targets
	dir := mkdirIn(t, c, proto.RootIno, "ec")
	if err := c.SetStripe(dir.Ino, ecPattern(4, 2)); err != nil {
		t.Fatal(err)
	}
	sub := mkdirIn(t, c, dir.Ino, "sub")
	m := c.ClusterMap()
	serverOf := map[uint32]uint32{}
	for _, tg := range m.Targets {
		serverOf[tg.ID] = tg.Server
	}
	used := map[uint32]int{}
	for i := 0; i < 14; i++ {
		parent := dir.Ino
		if i%2 == 1 {
			parent = sub.Ino // new subdirectories inherit the pattern
		}
		n := mk(t, c, parent, fmt.Sprintf("f%d", i), 0o100644)
		if n.Stripe.EC != (proto.ECPattern{Data: 4, Parity: 2}) || len(n.Chains) != 6 {
			t.Fatalf("file %d: pattern %+v, %d chains; want 4+2 over 6", i, n.Stripe.EC, len(n.Chains))
		}
		servers := map[uint32]bool{}
		for _, ch := range n.Chains {
			if servers[serverOf[ch]] {
				t.Fatalf("file %d has two shards on server %d: chains %v", i, serverOf[ch], n.Chains)
			}
			servers[serverOf[ch]] = true
			used[ch]++
		}
	}
	if len(used) != 14 {
		t.Errorf("14 files of 6 shards used %d of the 14 targets: %v", len(used), used)
	}

	// Copies again for new files; the old ones stay coded.
	if err := c.SetStripe(dir.Ino, proto.Stripe{Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	if n := mk(t, c, dir.Ino, "copied", 0o100644); n.Stripe.EC.On() {
		t.Fatalf("a file made after --replicas: pattern %+v", n.Stripe.EC)
	}
}

func TestShardsSpreadOverRacksWhenThePatternSaysSo(t *testing.T) {
	svc, c := setup(t)
	// Six servers in two racks.
	registerRackServers(t, svc, 0, 6, 1, func(i int) string { return fmt.Sprintf("rack-%d", i%2) })
	dir := mkdirIn(t, c, proto.RootIno, "ec")
	rack := ecPattern(2, 1)
	rack.EC.Domain = proto.DomainRack
	wantErr(t, c.SetStripe(dir.Ino, rack), syscall.EINVAL, "3 shards on a rack of its own; the cluster has 2 racks")
	registerRackServers(t, svc, 6, 1, 1, func(int) string { return "rack-2" })
	if err := c.SetStripe(dir.Ino, rack); err != nil {
		t.Fatalf("2+1 over three racks: %v", err)
	}
	m := c.ClusterMap()
	rackOf := map[uint32]string{}
	for _, tg := range m.Targets {
		for _, s := range m.Servers {
			if s.ID == tg.Server {
				rackOf[tg.ID] = s.Rack
			}
		}
	}
	for i := 0; i < 6; i++ {
		n := mk(t, c, dir.Ino, fmt.Sprintf("f%d", i), 0o100644)
		racks := map[string]bool{}
		for _, ch := range n.Chains {
			racks[rackOf[ch]] = true
		}
		if len(n.Chains) != 3 || len(racks) != 3 {
			t.Fatalf("file %d: chains %v in racks %v, want one shard in each of 3 racks", i, n.Chains, racks)
		}
	}
}

func ecFile(t *testing.T, svc *meta.Service, c *client.Client) *proto.Inode {
	t.Helper()
	registerServers(t, svc, 0, 3, 1)
	dir := mkdirIn(t, c, proto.RootIno, "ec")
	p := ecPattern(2, 1)
	p.ChunkSize = 64 << 10 // stripes of 128 KiB
	if err := c.SetStripe(dir.Ino, p); err != nil {
		t.Fatal(err)
	}
	n := mk(t, c, dir.Ino, "f", 0o100644)
	// Past the inline limit and back: a file on its shards, empty.
	for _, size := range []uint64{1 << 20, 0} {
		if _, err := c.SetAttr(&proto.SetAttrReq{Ino: n.Ino, Valid: proto.SetSize, Size: size}); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

func stripes(t *testing.T, c *client.Client, ino uint64) string {
	t.Helper()
	ss, err := c.ECStripes(ino, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range ss {
		out = append(out, fmt.Sprintf("%d:g%d/%b/%d", s.Stripe, s.Gen, s.Shards, s.Length))
	}
	return strings.Join(out, " ")
}

func update(stripe uint64, gen, shards, length, base, baseLength uint32) proto.ECStripeUpdate {
	return proto.ECStripeUpdate{ECStripe: proto.ECStripe{Stripe: stripe, Gen: gen, Shards: shards, Length: length, Encoded: length},
		Base: base, BaseLength: baseLength}
}

func TestStripeVersionsAreCommittedWithTheSizeAllOrNone(t *testing.T) {
	svc, c := setup(t)
	f := ecFile(t, svc, c)
	g1, err := c.ECGen(f.Ino)
	if err != nil {
		t.Fatal(err)
	}
	g2, _ := c.ECGen(f.Ino)
	if g1 == 0 || g2 == g1 {
		t.Fatalf("write generations %d and %d: want two different ones", g1, g2)
	}
	const full = 128 << 10
	n, err := c.CommitEC(&proto.CommitWriteReq{Ino: f.Ino, Size: full + 10, Written: full + 10,
		EC: []proto.ECStripeUpdate{update(0, g1, 0b111, full, 0, 0), update(1, g1, 0b011, 10, 0, 0)}})
	if err != nil {
		t.Fatal(err)
	}
	if n.Size != full+10 {
		t.Fatalf("size %d after the commit", n.Size)
	}
	if got, want := stripes(t, c, f.Ino), fmt.Sprintf("0:g%d/111/131072 1:g%d/11/10", g1, g1); got != want {
		t.Fatalf("stripes %q, want %q", got, want)
	}

	// A writer that built stripe 0 on nothing (it read before the commit
	// above) loses, and takes nothing else with it.
	_, err = c.CommitEC(&proto.CommitWriteReq{Ino: f.Ino, Size: 3 * full,
		EC: []proto.ECStripeUpdate{update(2, g2, 0b111, full, 0, 0), update(0, g2, 0b111, full, 0, 0)}})
	wantErr(t, err, proto.ErrStripeChanged, "stripe 0")
	if got, _ := c.GetAttr(f.Ino); got.Size != full+10 || !strings.HasPrefix(stripes(t, c, f.Ino), "0:g1/") || strings.Contains(stripes(t, c, f.Ino), "2:") {
		t.Fatalf("a failed commit changed the file: size %d, stripes %s", got.Size, stripes(t, c, f.Ino))
	}
	// Built on what is recorded, it wins.
	if _, err := c.CommitEC(&proto.CommitWriteReq{Ino: f.Ino, Size: 3 * full,
		EC: []proto.ECStripeUpdate{update(2, g2, 0b111, full, 0, 0), update(0, g2, 0b110, full, g1, full)}}); err != nil {
		t.Fatal(err)
	}
	if got, want := stripes(t, c, f.Ino), fmt.Sprintf("0:g%d/110/131072 1:g%d/11/10 2:g%d/111/131072", g2, g1, g2); got != want {
		t.Fatalf("stripes %q, want %q", got, want)
	}

	// Fewer than K shards written is not a version.
	_, err = c.CommitEC(&proto.CommitWriteReq{Ino: f.Ino, EC: []proto.ECStripeUpdate{update(3, g2, 0b100, 5, 0, 0)}})
	wantErr(t, err, syscall.EINVAL, "needs at least 2")
}

func TestATruncateCutsStripesAndTheWritersBuiltOnThem(t *testing.T) {
	svc, c := setup(t)
	f := ecFile(t, svc, c)
	g, _ := c.ECGen(f.Ino)
	const full = 128 << 10
	if _, err := c.CommitEC(&proto.CommitWriteReq{Ino: f.Ino, Size: 3 * full, EC: []proto.ECStripeUpdate{
		update(0, g, 0b111, full, 0, 0), update(1, g, 0b111, full, 0, 0), update(2, g, 0b111, full, 0, 0)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetAttr(&proto.SetAttrReq{Ino: f.Ino, Valid: proto.SetSize, Size: full + 100}); err != nil {
		t.Fatal(err)
	}
	if got, want := stripes(t, c, f.Ino), fmt.Sprintf("0:g%d/111/131072 1:g%d/111/100", g, g); got != want {
		t.Fatalf("stripes after truncating to %d: %q, want %q", full+100, got, want)
	}
	// A writer that read stripe 1 whole before the truncate would bring
	// the cut bytes back: it must read it again.
	g2, _ := c.ECGen(f.Ino)
	_, err := c.CommitEC(&proto.CommitWriteReq{Ino: f.Ino, Size: 2 * full, EC: []proto.ECStripeUpdate{update(1, g2, 0b111, full, g, full)}})
	wantErr(t, err, proto.ErrStripeChanged, "stripe 1")
	if _, err := c.SetAttr(&proto.SetAttrReq{Ino: f.Ino, Valid: proto.SetSize, Size: 0}); err != nil {
		t.Fatal(err)
	}
	if got := stripes(t, c, f.Ino); got != "" {
		t.Fatalf("stripes after truncating to 0: %q", got)
	}
}

// A file of copies has no stripes; it takes write generations all the
// same (a conversion to erasure coding writes its stripes under one
// before the swap); a directory takes none.
func TestStripeCallsRefuseAFileThatIsNotErasureCoded(t *testing.T) {
	_, c := setup(t)
	n := mk(t, c, proto.RootIno, "plain", 0o100644)
	_, err := c.ECStripes(n.Ino, 0)
	wantErr(t, err, syscall.EINVAL, "not an erasure-coded file")
	if g, err := c.ECGen(n.Ino); err != nil || g == 0 {
		t.Fatalf("a generation of a file of copies: %d, %v", g, err)
	}
	d := mk(t, c, proto.RootIno, "dir", syscall.S_IFDIR|0o755)
	_, err = c.ECGen(d.Ino)
	wantErr(t, err, syscall.EINVAL, "not a regular file")
}

// Callers that name the pattern they hold are told when a conversion
// changed it: a stripe listing for a reader of the old pattern, and the
// commit of a writer that wrote the targets in the old pattern (one cut
// off past the session timeout, which no longer held the conversion
// back), fail with ErrLayoutChanged, and the commit changes nothing.
func TestCallsMadeWithAConvertedFilesOldPatternAreRefused(t *testing.T) {
	svc, c := setup(t)
	f := ecFile(t, svc, c) // coded 2+1
	now, err := c.GetAttr(f.Ino)
	if err != nil {
		t.Fatal(err)
	}
	old := now.Stripe
	old.EC.Data, old.EC.Parity = 4, 2 // as if read before a conversion to 2+1

	raw := rpc.NewClient(svc.Addr(), testSecret)
	defer raw.Close()
	r := proto.ECStripesReq{Ino: f.Ino, Count: 10, Stripe: old}
	err = raw.Call(proto.OpECStripes, r.Encode, nil)
	wantErr(t, err, proto.ErrLayoutChanged, "converted")
	r.Stripe = now.Stripe
	if err := raw.Call(proto.OpECStripes, r.Encode, nil); err != nil {
		t.Fatalf("a listing with the file's own pattern: %v", err)
	}

	_, err = c.CommitEC(&proto.CommitWriteReq{Ino: f.Ino, Size: 1 << 20, Written: 1 << 20, WroteTargets: true})
	wantErr(t, err, proto.ErrLayoutChanged, "writes since its last commit are lost")
	if n, _ := c.GetAttr(f.Ino); n.Size != 0 {
		t.Fatalf("a refused commit changed the size to %d", n.Size)
	}
	if _, err := c.CommitEC(&proto.CommitWriteReq{Ino: f.Ino, Size: 10, WroteTargets: true, WroteEC: now.Stripe.EC}); err != nil {
		t.Fatalf("a commit of a writer of the file's own pattern: %v", err)
	}
}
