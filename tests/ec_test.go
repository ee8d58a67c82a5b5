package tests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"tandemfs/internal/fuse"
	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
	"tandemfs/internal/testcluster"
	"tandemfs/internal/testenv"
)

// Erasure-coded directories through a FUSE mount (docs/architecture.md,
// "Erasure coding"): files coded 4+2 over six servers read back what was
// written, whatever way it was written, with any two servers gone, and a
// stripe with three gone fails with EIO instead of wrong bytes.

// ecModel is a file as written, to compare with what the mount reads.
type ecModel struct {
	path string
	data []byte
}

func (m *ecModel) writeAt(t *testing.T, f *os.File, off int64, b []byte) {
	t.Helper()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatalf("%s: write of %d at %d: %v", m.path, len(b), off, err)
	}
	if end := int(off) + len(b); end > len(m.data) {
		m.data = append(m.data, make([]byte, end-len(m.data))...)
	}
	copy(m.data[off:], b)
}

func (m *ecModel) truncate(t *testing.T, size int) {
	t.Helper()
	if err := os.Truncate(m.path, int64(size)); err != nil {
		t.Fatal(err)
	}
	if size < len(m.data) {
		m.data = m.data[:size]
	} else {
		m.data = append(m.data, make([]byte, size-len(m.data))...)
	}
}

func (m *ecModel) check(t *testing.T) {
	t.Helper()
	got, err := os.ReadFile(m.path)
	if err != nil {
		t.Fatalf("%s: %v", m.path, err)
	}
	if !bytes.Equal(got, m.data) {
		at := 0
		for at < min(len(got), len(m.data)) && got[at] == m.data[at] {
			at++
		}
		t.Fatalf("%s: read %d bytes, want %d; first difference at %d", m.path, len(got), len(m.data), at)
	}
}

// checkDirect is check reading with O_DIRECT, past the page cache and
// the client's block cache, so that the shards are read.
func (m *ecModel) checkDirect(t *testing.T) {
	t.Helper()
	if got := readWholeDirect(t, m.path); !bytes.Equal(got, m.data) {
		t.Fatalf("%s: O_DIRECT read %d bytes, want %d (or other bytes)", m.path, len(got), len(m.data))
	}
}

func seededBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// ecFiles writes files of every shape into dir: empty, inline, just past
// inline, a stripe less one byte, exactly a stripe, several stripes and a
// tail, one rewritten in the middle across stripes, one appended to in
// small pieces, a sparse one, and truncated ones.
func ecFiles(t *testing.T, r *rand.Rand, dir string, stripe int) []*ecModel {
	t.Helper()
	var files []*ecModel
	create := func(name string) (*ecModel, *os.File) {
		m := &ecModel{path: filepath.Join(dir, name)}
		f, err := os.Create(m.path)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m)
		return m, f
	}
	for name, size := range map[string]int{"empty": 0, "inline": 100, "past-inline": 5000,
		"stripe-less-one": stripe - 1, "stripe": stripe, "stripes-and-tail": 3*stripe + 12345} {
		m, f := create(name)
		m.writeAt(t, f, 0, seededBytes(r, size))
		f.Close()
	}
	m, f := create("rewritten")
	m.writeAt(t, f, 0, seededBytes(r, 4*stripe))
	f.Close()
	f, _ = os.OpenFile(m.path, os.O_RDWR, 0)
	m.writeAt(t, f, int64(stripe-1000), seededBytes(r, stripe+2000)) // across two stripes, keeping their ends
	m.writeAt(t, f, 17, []byte("a small write into the first stripe"))
	f.Close()

	m, f = create("appended")
	for i := 0; i < 40; i++ {
		m.writeAt(t, f, int64(len(m.data)), seededBytes(r, 1+r.IntN(30000)))
	}
	f.Close()

	m, f = create("sparse")
	m.writeAt(t, f, int64(3*stripe+500), seededBytes(r, 1000))
	f.Close()

	// Six of them, so that the first data shard of one of them lies on
	// each server (the first server rotates with the inode number): a
	// read rebuilding a cut stripe must use what its shards were encoded
	// with, not the cut length.
	for i := 0; i < 6; i++ {
		m, f = create(fmt.Sprintf("truncated-%d", i))
		m.writeAt(t, f, 0, seededBytes(r, 3*stripe))
		f.Close()
		m.truncate(t, stripe+777)
		m.truncate(t, 2*stripe) // grows again: zeros, not the old bytes
	}

	m, f = create("direct-sync")
	f.Close()
	f, err := os.OpenFile(m.path, os.O_RDWR|syscall.O_SYNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		m.writeAt(t, f, int64(r.IntN(2*stripe)), seededBytes(r, 4096))
	}
	f.Close()
	return files
}

func TestErasureCodedFilesReadBackWithAnyTwoServersGone(t *testing.T) {
	c := testcluster.Start(t, testcluster.WithServers(6, 1), testcluster.WithMountFlags("--give-up", "6s"))
	dir := patternedDir(t, c, "ec", "--ec", "4+2", "--chunk-size", "64K")
	const stripe = 4 * 64 << 10
	r := rand.New(rand.NewPCG(41, 42))
	files := ecFiles(t, r, dir, stripe)
	for _, m := range files {
		m.check(t)
	}

	// Where the shards live: six servers, one shard each.
	l := fileLayout(t, filepath.Join(dir, "stripes-and-tail"))
	servers := map[uint32]bool{}
	for _, sh := range l.EC.Shards {
		servers[sh.Server] = true
	}
	if l.EC == nil || l.EC.Data != 4 || l.EC.Parity != 2 || len(l.EC.Shards) != 6 || len(servers) != 6 {
		t.Fatalf("stripe get --json: %+v", l)
	}

	// Any two servers: every file reads back identical, and a new file
	// written meanwhile too (four shards of six).
	untilStripesWhole(t, c)
	c.KillProcess("storage2")
	c.KillProcess("storage5")
	for _, m := range files {
		m.checkDirect(t)
	}
	degraded := &ecModel{path: filepath.Join(dir, "written-degraded")}
	f, err := os.Create(degraded.path)
	if err != nil {
		t.Fatal(err)
	}
	degraded.writeAt(t, f, 0, seededBytes(r, 2*stripe+99))
	if err := f.Close(); err != nil {
		t.Fatalf("close of a file written with two servers gone: %v", err)
	}
	degraded.checkDirect(t)
	if st := ecRepairStatus(t, c); st.DegradedStripes == 0 {
		t.Fatalf("status after a write with two servers gone: %+v, want degraded stripes", st)
	}

	// A third: a stripe with three shards gone fails with EIO, not wrong
	// bytes, once the give-up time is over. (O_DIRECT: the page cache and
	// the client's block cache hold what was read before.)
	c.KillProcess("storage3")
	start := time.Now()
	f, err = os.OpenFile(filepath.Join(dir, "stripes-and-tail"), os.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.ReadAt(alignedBlock(stripe), 0)
	f.Close()
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("read with three of six servers gone: %v, want EIO", err)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Fatalf("the read failed after %v; the give-up time is 6 s", took)
	}

	// They come back: everything reads again, and the leader rebuilds the
	// shards the degraded write left out.
	c.Up()
	files = append(files, degraded)
	for _, m := range files {
		m.checkDirect(t)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		st := ecRepairStatus(t, c)
		if st.DegradedStripes == 0 && st.RebuiltShards > 0 {
			t.Logf("background repair: %+v", st)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the degraded stripes were not rebuilt in the background: %+v", st)
		}
		time.Sleep(500 * time.Millisecond)
	}

	// A disk replaced under storage1 loses its shards of a file; a repair
	// rebuilds them, and the shards the degraded write left out.
	fi, err := os.Stat(filepath.Join(dir, "stripes-and-tail"))
	if err != nil {
		t.Fatal(err)
	}
	ino := fi.Sys().(*syscall.Stat_t).Ino
	lost := removeChunks(t, filepath.Join(c.Dir(), "storage", "storage1"), ino)
	out, err := runTandem(t, "ec", "repair", "--data", c.Dir(), dir)
	if err != nil {
		t.Fatalf("ec repair: %v\n%s", err, out)
	}
	t.Logf("ec repair after %d chunks of file %d were removed:\n%s", lost, ino, out)
	if lost > 0 && !strings.Contains(out, fmt.Sprintf("stripes-and-tail: 4 stripes, %d shards rebuilt", lost)) {
		t.Errorf("the repair did not rebuild the %d removed shards:\n%s", lost, out)
	}
	// So any two other servers may go now.
	c.KillProcess("storage3")
	c.KillProcess("storage4")
	for _, m := range files {
		m.checkDirect(t)
	}
}

// untilStripesWhole waits until the metadata service counts no degraded
// stripe. A write that ends a slow shard's call (over a second behind the
// others, as on a loaded test host) records its stripe with K+1 or more
// shards and the leader rebuilds the rest; until then that stripe
// survives one failure fewer. Tests that then take M servers away wait
// for the repair first, and say so.
func untilStripesWhole(t *testing.T, c *testcluster.Cluster) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for logged := false; ; {
		st := ecRepairStatus(t, c)
		if st.DegradedStripes == 0 {
			return
		}
		if !logged {
			t.Logf("%d stripes were written around a slow shard; waiting for their repair", st.DegradedStripes)
			logged = true
		}
		if time.Now().After(deadline) {
			t.Fatalf("the degraded stripes were not repaired in 60 s: %+v", st)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

type ecRepairJSON struct {
	DegradedStripes uint64 `json:"degraded_stripes"`
	RebuiltShards   uint64 `json:"rebuilt_shards"`
}

// ecRepairStatus is `tandem status --json`'s ec_repair.
func ecRepairStatus(t *testing.T, c *testcluster.Cluster) ecRepairJSON {
	t.Helper()
	out, err := runTandem(t, "status", "--json", "--data", c.Dir())
	if err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	var st struct {
		ECRepair *ecRepairJSON `json:"ec_repair"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	if st.ECRepair == nil {
		return ecRepairJSON{}
	}
	return *st.ECRepair
}

// removeChunks deletes file ino's chunks (and their checksums) under a
// storage server's directory, as a replaced disk loses them, and returns
// how many chunks there were.
func removeChunks(t *testing.T, root string, ino uint64) int {
	t.Helper()
	n := 0
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && filepath.Base(filepath.Dir(p)) == fmt.Sprint(ino) {
			if !strings.HasSuffix(p, ".sum") {
				n++
			}
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
		}
		return nil
	})
	return n
}

func TestErasureCodingBadInputIsRefusedWithTheReason(t *testing.T) {
	c := testcluster.Start(t, testcluster.WithServers(3, 1))
	dir := filepath.Join(c.Mount(), "d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--ec", "0+1", dir}, "data shards (K) must be 2 to 16"},
		{[]string{"--ec", "4+0", dir}, "no parity shard"},
		{[]string{"--ec", "4+2", dir}, "6 shards on a server of its own; the cluster has 3 servers"},
		{[]string{"--ec", "4+2", "--failure-domain", "rack", dir}, "6 shards in a rack of its own; the cluster has 3 racks"},
		{[]string{"--ec", "2+1", "--replicas", "2", dir}, "without --replicas"},
		{[]string{"--ec", "2+1", file}, "is not a directory"},
		{[]string{"--ec", "four", dir}, "want K+M"},
	} {
		out, err := runTandem(t, append([]string{"stripe", "set"}, tc.args...)...)
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("stripe set %v: %v, %q; want an error saying %q", tc.args, err, out, tc.want)
		}
	}
	// Nothing was set: new files are still copied.
	out, _ := runTandem(t, "stripe", "get", "--json", dir)
	if strings.Contains(out, `"ec"`) {
		t.Fatalf("a refused pattern was set: %s", out)
	}
	if out, err := runTandem(t, "stripe", "set", "--ec", "2+1", dir); err != nil {
		t.Fatalf("2+1 over three servers: %v: %s", err, out)
	}
	m := &ecModel{path: filepath.Join(dir, "coded")}
	for i := 0; i < 3; i++ { // written whole three times: one version stays
		f, err := os.Create(m.path)
		if err != nil {
			t.Fatal(err)
		}
		m.data = m.data[:0]
		m.writeAt(t, f, 0, []byte(strings.Repeat(fmt.Sprintf("erasure coded %d ", i), 100000)))
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	m.check(t)
	fi, err := os.Stat(m.path)
	if err != nil {
		t.Fatal(err)
	}
	ino := fi.Sys().(*syscall.Stat_t).Ino
	// 1.9 MB in stripes of 2 MiB: one stripe of 3 shards, once the
	// metadata service's collector has deleted the replaced versions'.
	deadline := time.Now().Add(20 * time.Second)
	for {
		n := chunkFiles(t, filepath.Join(c.Dir(), "storage"), ino)
		if n == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("file %d has %d shard chunks on the targets, want the 3 of its one version", ino, n)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// chunkFiles counts the chunk files (not checksum files) of inode ino
// under a cluster's storage directory.
func chunkFiles(t *testing.T, root string, ino uint64) int {
	t.Helper()
	n := 0
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && filepath.Base(filepath.Dir(p)) == fmt.Sprint(ino) && !strings.HasSuffix(p, ".sum") {
			n++
		}
		return nil
	})
	return n
}

// A shard whose bytes are wrong yet checksummed (written so, not rotted:
// a block's checksum cannot catch it) is found only by checking parity:
// `tandem ec repair --verify` finds which shard disagrees and rewrites it.
func TestVerifyingParityFindsAndRewritesAWrongShard(t *testing.T) {
	c := testcluster.Start(t, testcluster.WithServers(4, 1))
	// Two parity shards: one tells that a shard is wrong, two which.
	dir := patternedDir(t, c, "ec", "--ec", "2+2", "--chunk-size", "64K")
	m := &ecModel{path: filepath.Join(dir, "f")}
	f, err := os.Create(m.path)
	if err != nil {
		t.Fatal(err)
	}
	m.writeAt(t, f, 0, seededBytes(rand.New(rand.NewPCG(7, 7)), 100000))
	f.Close()
	fi, _ := os.Stat(m.path)
	ino := fi.Sys().(*syscall.Stat_t).Ino

	// `tandem scrub`: the metadata leader checks every coded file.
	corruptShard(t, c, ino, 1)
	if bytes.Equal(readWholeDirect(t, m.path), m.data) {
		t.Fatal("the file reads back right with a wrong data shard: the test changed nothing")
	}
	if out, err := runTandem(t, "scrub", "--data", c.Dir()); err != nil || !strings.Contains(out, "parity check of erasure-coded files started") {
		t.Fatalf("scrub: %v\n%s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := runTandem(t, "status", "--json", "--data", c.Dir())
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		var st struct {
			ECScrub *struct {
				Running    bool   `json:"running"`
				Mismatched uint64 `json:"mismatched_shards"`
				Rebuilt    uint64 `json:"rebuilt_shards"`
				Files      uint64 `json:"files"`
			} `json:"ec_scrub"`
		}
		json.Unmarshal([]byte(out), &st)
		if s := st.ECScrub; s != nil && !s.Running {
			if s.Files != 1 || s.Mismatched != 1 || s.Rebuilt != 1 {
				t.Fatalf("the parity check ended: %+v, want 1 file, 1 wrong shard rebuilt", *s)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the parity check did not end: %s", out)
		}
		time.Sleep(300 * time.Millisecond)
	}
	m.checkDirect(t)

	// `tandem ec repair --verify` on a path.
	corruptShard(t, c, ino, 0)
	if bytes.Equal(readWholeDirect(t, m.path), m.data) {
		t.Fatal("the file reads back right with a wrong data shard: the test changed nothing")
	}
	out, err := runTandem(t, "ec", "repair", "--data", c.Dir(), dir)
	if err != nil || !strings.Contains(out, "0        0           0") {
		t.Fatalf("a repair without --verify reads no shard whole and finds nothing: %v\n%s", err, out)
	}
	out, err = runTandem(t, "ec", "repair", "--verify", "--data", c.Dir(), dir)
	if err != nil {
		t.Fatalf("ec repair --verify: %v\n%s", err, out)
	}
	if !strings.Contains(out, "1        0        1           1") {
		t.Fatalf("ec repair --verify did not find and rewrite one shard:\n%s", out)
	}
	m.checkDirect(t)
}

// corruptShard writes other bytes over data shard j of stripe 0 of file
// ino through its storage server, as a bug would: its checksums follow,
// so only parity tells.
func corruptShard(t *testing.T, c *testcluster.Cluster, ino uint64, j int) {
	t.Helper()
	cl, secret := libraryClient(t, c)
	n, err := cl.GetAttr(ino)
	if err != nil {
		t.Fatal(err)
	}
	ss, err := cl.ECStripes(ino, 0)
	if err != nil || len(ss) == 0 {
		t.Fatalf("stripes of file %d: %v, %v", ino, ss, err)
	}
	m := cl.ClusterMap()
	target := n.Chains[j]
	var addr string
	var version uint32
	for _, ch := range m.Chains {
		if ch.ID == target {
			version = ch.Version
		}
	}
	for _, tg := range m.Targets {
		for _, srv := range m.Servers {
			if tg.ID == target && srv.ID == tg.Server {
				addr = srv.Addr
			}
		}
	}
	sc := rpc.NewClient(addr, secret)
	defer sc.Close()
	w := proto.ChunkWriteReq{Chunk: proto.ChunkRef{Routing: proto.Routing{Target: target, Chain: target, Version: version}, Ino: ino,
		Index: proto.ECChunkIndex(ss[0].Gen, 0)}, Data: bytes.Repeat([]byte("wrong"), 4000), Sync: true}
	if err := sc.CallData(proto.OpChunkWrite, w.EncodeHead, w.Data, nil); err != nil {
		t.Fatal(err)
	}
}

// readWholeDirect reads a whole file with O_DIRECT.
func readWholeDirect(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return readAllDirect(t, f)
}

// readAllDirect reads f, opened with O_DIRECT, from its start to its end.
func readAllDirect(t *testing.T, f *os.File) []byte {
	t.Helper()
	var got []byte
	buf := alignedBlock(1 << 20)
	for {
		n, err := f.ReadAt(buf, int64(len(got)))
		got = append(got, buf[:n]...)
		if n == 0 || err != nil {
			if err != nil && !errors.Is(err, io.EOF) {
				t.Fatal(err)
			}
			return got
		}
	}
}

// With --failure-domain rack a file's shards go one per rack: a whole
// rack may fail.
func TestShardsOnePerRackSurviveTheLossOfARack(t *testing.T) {
	c := testcluster.Start(t, testcluster.WithServers(6, 1), testcluster.WithRacks(3), testcluster.WithMountFlags("--give-up", "6s"))
	dir := patternedDir(t, c, "racked", "--ec", "2+1", "--failure-domain", "rack", "--chunk-size", "64K")
	r := rand.New(rand.NewPCG(3, 3))
	var files []*ecModel
	for i := 0; i < 4; i++ {
		m := &ecModel{path: filepath.Join(dir, fmt.Sprintf("f%d", i))}
		f, err := os.Create(m.path)
		if err != nil {
			t.Fatal(err)
		}
		m.writeAt(t, f, 0, seededBytes(r, 300000))
		f.Close()
		files = append(files, m)
		l := fileLayout(t, m.path)
		racks := map[string]bool{}
		for _, sh := range l.EC.Shards {
			racks[sh.Rack] = true
		}
		if l.EC == nil || l.EC.FailureDomain != "rack" || len(l.EC.Shards) != 3 || len(racks) != 3 {
			t.Fatalf("%s: layout %+v, want its 3 shards in 3 racks", m.path, l.EC)
		}
	}
	// rack1 holds storage1 and storage4 (tandem up labels in turn).
	untilStripesWhole(t, c)
	c.KillProcess("storage1")
	c.KillProcess("storage4")
	for _, m := range files {
		m.checkDirect(t)
	}
}

// A server silent past --ec-rebuild-after is retired: each coded file's
// shard there moves to a server the file does not use yet and is rebuilt
// there in the background, so that M more servers may fail afterwards.
func TestShardsOfAServerGoneForGoodAreRebuiltElsewhere(t *testing.T) {
	c := testcluster.Start(t, testcluster.WithServers(7, 1), testcluster.WithECRebuildAfter(4*time.Second),
		testcluster.WithMountFlags("--give-up", "6s"))
	dir := patternedDir(t, c, "ec", "--ec", "4+2", "--chunk-size", "64K")
	r := rand.New(rand.NewPCG(9, 9))
	var files []*ecModel
	for i := 0; i < 7; i++ {
		m := &ecModel{path: filepath.Join(dir, fmt.Sprintf("f%d", i))}
		f, err := os.Create(m.path)
		if err != nil {
			t.Fatal(err)
		}
		m.writeAt(t, f, 0, seededBytes(r, 1<<20+i*1000))
		f.Close()
		files = append(files, m)
	}
	gone := c.Layout.Servers[0].Listen // storage1
	c.KillProcess("storage1")
	deadline := time.Now().Add(90 * time.Second)
	for {
		out, err := runTandem(t, "status", "--json", "--data", c.Dir())
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		var st struct {
			ECRepair *struct {
				Degraded   uint64 `json:"degraded_stripes"`
				Evacuating uint64 `json:"evacuating_files"`
				Rebuilt    uint64 `json:"rebuilt_shards"`
			} `json:"ec_repair"`
		}
		json.Unmarshal([]byte(out), &st)
		if e := st.ECRepair; e != nil && e.Rebuilt > 0 && e.Degraded == 0 && e.Evacuating == 0 {
			t.Logf("after storage1 went: %+v", *e)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the shards on storage1 were not rebuilt elsewhere: %s", out)
		}
		time.Sleep(time.Second)
	}
	for _, m := range files {
		l := fileLayout(t, m.path)
		servers := map[uint32]bool{}
		for _, sh := range l.EC.Shards {
			if sh.Addr == gone {
				t.Fatalf("%s still has shard %d on storage1 (%s)", m.path, sh.Shard, gone)
			}
			servers[sh.Server] = true
		}
		if len(servers) != 6 {
			t.Fatalf("%s: shards on %d servers, want 6: %+v", m.path, len(servers), l.EC)
		}
	}
	// Two more may go now.
	c.KillProcess("storage2")
	c.KillProcess("storage3")
	for _, m := range files {
		m.checkDirect(t)
	}
}

// Shards written, then more than M of their targets gone before the
// fsync that makes them durable: the fsync waits for them, as a write
// does, instead of failing, and succeeds once they are back (a crashed
// server's writes are still in its host's page cache). The writer is a
// process of its own: this one restarts the servers, and a process
// holding a file of the mount open cannot start another while the file's
// writes wait (exec closes the descriptor in the child, and the kernel
// sends FUSE a flush, which waits for them).
func TestAnFsyncWaitsWhenMoreThanMShardTargetsWentAfterTheWrite(t *testing.T) {
	testenv.RequireCommand(t, "python3")
	c := testcluster.Start(t, testcluster.WithServers(6, 1), testcluster.WithMountFlags("--give-up", "60s"))
	dir := patternedDir(t, c, "ec", "--ec", "4+2", "--chunk-size", "64K")
	const stripe = 4 * 64 << 10
	m := &ecModel{path: filepath.Join(dir, "f"), data: seededBytes(rand.New(rand.NewPCG(7, 8)), 6*stripe)}
	src := filepath.Join(t.TempDir(), "src")
	if err := os.WriteFile(src, m.data, 0o644); err != nil {
		t.Fatal(err)
	}
	// Whole stripes are sent as they fill (the fifth pushes the first
	// out); the fsync waits for a line on stdin.
	writer := exec.Command("python3", "-c", `
import os, sys
fd = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, open(sys.argv[1], "rb").read())
print("written", flush=True)
sys.stdin.readline()
os.fsync(fd)
os.close(fd)
print("synced", flush=True)
`, src, m.path)
	stdin, _ := writer.StdinPipe()
	stdout, _ := writer.StdoutPipe()
	var stderr strings.Builder
	writer.Stderr = &stderr
	if err := writer.Start(); err != nil {
		t.Fatal(err)
	}
	defer writer.Process.Kill()
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || lines.Text() != "written" {
		t.Fatalf("the writer did not write: %s", stderr.String())
	}
	time.Sleep(time.Second)
	for _, p := range []string{"storage1", "storage2", "storage3"} {
		c.KillProcess(p)
	}
	fmt.Fprintln(stdin)
	synced := make(chan error, 1)
	go func() {
		if !lines.Scan() || lines.Text() != "synced" {
			synced <- fmt.Errorf("fsync failed: %s", stderr.String())
			return
		}
		synced <- writer.Wait()
	}()
	select {
	case err := <-synced:
		t.Fatalf("fsync with three of six servers gone returned at once (%v); it must wait for them", err)
	case <-time.After(3 * time.Second):
	}
	c.Up()
	select {
	case err := <-synced:
		if err != nil {
			t.Fatalf("after the servers came back: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("fsync still waits a minute after the servers came back")
	}
	m.checkDirect(t)
}

// tandem ec convert rewrites a file of copies as erasure coded and back,
// online: every byte reads back the same after each swap, the layout is
// the new one, and a file open for writing is refused with the reason.
func TestConvertingFilesBetweenCopiesAndErasureCodingKeepsEveryByte(t *testing.T) {
	// A new leader judges which files clients hold open after the
	// session timeout: 3 s here, not a minute.
	c := testcluster.Start(t, testcluster.WithServers(6, 1), testcluster.WithSessionTimeout(3*time.Second))
	dir := patternedDir(t, c, "data", "--replicas", "2", "--chunk-size", "64K")
	m := &ecModel{path: filepath.Join(dir, "f")}
	f, err := os.Create(m.path)
	if err != nil {
		t.Fatal(err)
	}
	m.writeAt(t, f, 0, seededBytes(rand.New(rand.NewPCG(3, 4)), 3<<20+12345))
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	// Each conversion, then the old layout's chunks deleted (the targets
	// hold what the new layout costs), and every byte the same.
	for _, step := range []struct {
		flags   []string
		data    int // 0: copies
		perByte float64
	}{
		{[]string{"--ec", "4+2"}, 4, 1.5},
		{[]string{"--ec", "2+2"}, 2, 2}, // onto the same targets, under a new generation
		{[]string{"--replicas", "2"}, 0, 2},
	} {
		args := append([]string{"ec", "convert", "--data", c.Dir()}, step.flags...)
		if out, err := runTandem(t, append(args, dir)...); err != nil {
			t.Fatalf("ec convert %v: %v\n%s", step.flags, err, out)
		}
		l := fileLayout(t, m.path)
		if (step.data == 0 && (l.EC != nil || l.Replicas != 2)) || (step.data > 0 && (l.EC == nil || l.EC.Data != step.data)) {
			t.Fatalf("after ec convert %v the layout is %+v", step.flags, l)
		}
		m.checkDirect(t)
		waitOldLayoutDeleted(t, c, int64(step.perByte*float64(len(m.data))))
		m.checkDirect(t)
	}

	// Open for writing, and written: refused, and nothing changes.
	f, err = os.OpenFile(m.path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m.writeAt(t, f, 1<<20, []byte("written while open"))
	out, err := runTandem(t, "ec", "convert", "--data", c.Dir(), "--ec", "4+2", m.path)
	if err == nil || !strings.Contains(out, "open for writing") {
		t.Fatalf("ec convert of a file open for writing: %v\n%s", err, out)
	}
	if l := fileLayout(t, m.path); l.EC != nil {
		t.Fatalf("a refused conversion changed the layout: %+v", l)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	m.checkDirect(t)
}

// waitOldLayoutDeleted waits until the targets hold at most want bytes
// (and a MiB of slack), once a conversion's old layout is deleted.
func waitOldLayoutDeleted(t *testing.T, c *testcluster.Cluster, want int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for used := targetBytes(t, c); used > want+1<<20; used = targetBytes(t, c) {
		if time.Now().After(deadline) {
			t.Fatalf("the targets hold %d bytes, want at most %d: the layout a conversion replaced was not deleted", used, want+1<<20)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// targetBytes sums the chunk files on every target of the cluster.
func targetBytes(t *testing.T, c *testcluster.Cluster) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(filepath.Join(c.Dir(), "storage"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(path, ".sum") || !strings.Contains(path, "chunks") {
			return err
		}
		if fi, err := d.Info(); err == nil {
			n += fi.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A writer that comes along while a file is being converted is not lost:
// its announcement aborts the conversion, which starts again or gives way
// (the file is then open for writing), and either way the file holds the
// writer's bytes.
func TestAWriterDuringAConversionIsNotLost(t *testing.T) {
	c := testcluster.Start(t, testcluster.WithServers(6, 1), testcluster.WithSessionTimeout(3*time.Second))
	dir := patternedDir(t, c, "data", "--replicas", "2")
	m := &ecModel{path: filepath.Join(dir, "big")}
	f, err := os.Create(m.path)
	if err != nil {
		t.Fatal(err)
	}
	m.writeAt(t, f, 0, seededBytes(rand.New(rand.NewPCG(5, 6)), 128<<20))
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // the leader's session timeout: it judges open files from now
	conv := exec.Command(testcluster.Binary(t), "ec", "convert", "--data", c.Dir(), "--ec", "4+2", m.path)
	var out strings.Builder
	conv.Stderr = &out
	progress, _ := conv.StdoutPipe()
	if err := conv.Start(); err != nil {
		t.Fatal(err)
	}
	// The first progress line: the copy has begun.
	lines := bufio.NewScanner(progress)
	if !lines.Scan() {
		t.Fatalf("ec convert printed nothing: %s", out.String())
	}
	out.WriteString(lines.Text() + "\n")
	f, err = os.OpenFile(m.path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	m.writeAt(t, f, 5<<20+123, []byte("written during the conversion"))
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	for lines.Scan() {
		out.WriteString(lines.Text() + "\n")
	}
	err = conv.Wait()
	t.Logf("ec convert (%v):\n%s", err, out.String())
	if err != nil && !strings.Contains(out.String(), "open for writing") && !strings.Contains(out.String(), "written to during") {
		t.Fatalf("ec convert failed otherwise than by giving way to the writer: %v", err)
	}
	m.checkDirect(t)
}

// patternedDir makes directory name on c's mount and sets its pattern
// with `tandem stripe set` and flags.
func patternedDir(t *testing.T, c *testcluster.Cluster, name string, flags ...string) string {
	t.Helper()
	dir := filepath.Join(c.Mount(), name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	args := append(append([]string{"stripe", "set"}, flags...), dir)
	if out, err := runTandem(t, args...); err != nil {
		t.Fatalf("stripe set %v: %v\n%s", flags, err, out)
	}
	return dir
}

// A shard on a slow disk is read around: a shard read that has not
// answered after the hedge delay (four times the recent shard reads, 30 to
// 500 ms) is raced by a rebuild from the other shards, so a disk that
// takes 1.5 s a read costs the whole file less than one of its reads, and
// the bytes are right.
func TestAReadDoesNotWaitForASlowShard(t *testing.T) {
	t.Setenv("TANDEM_METRICS", "127.0.0.1:0")
	c := testcluster.Start(t, testcluster.WithServers(3, 1), testcluster.WithFaultFiles())
	dir := patternedDir(t, c, "ec", "--ec", "2+1", "--chunk-size", "64K")
	path := filepath.Join(dir, "f")
	want := randBytes(8 * 2 * 64 << 10) // eight stripes
	mustWrite(t, path, want)

	slow := serverOfShard(t, c, path, 0)
	setFaults(t, c.FaultFile(slow), `[{"path": "/", "ops": "read", "delay": "1500ms"}]`)
	t0 := time.Now()
	got := readWholeDirect(t, path)
	took := time.Since(t0)
	if !bytes.Equal(got, want) {
		t.Fatal("the file read around a slow shard differs from what was written")
	}
	if took > 1200*time.Millisecond {
		t.Fatalf("reading eight stripes with data shard 0 on a disk 1.5 s slow took %v: the reads waited for it", took)
	}
	if wins := scrapeMetrics(t, c, "mount").sum("tandem_client_ec_hedge_wins_total"); wins < 1 {
		t.Fatalf("the read took %v but the mount counts %v hedged reads won by a rebuild", took, wins)
	}
	t.Logf("read %d bytes around a slow shard in %v", len(got), took)
}

// A target the mount holds suspect (a rebuild beat its slow read moments
// ago) is skipped only while the others can do without it: with M other
// servers gone, a read of its shard asks it again at once instead of
// failing until the suspicion lapses (3 s; the mount gives up after 1 s).
func TestASuspectShardIsAskedWhenTooFewOthersAnswer(t *testing.T) {
	t.Setenv("TANDEM_METRICS", "127.0.0.1:0")
	c := testcluster.Start(t, testcluster.WithServers(6, 1), testcluster.WithFaultFiles(),
		testcluster.WithMountFlags("--give-up", "1s"))
	dir := patternedDir(t, c, "ec", "--ec", "4+2", "--chunk-size", "64K")
	path := filepath.Join(dir, "f")
	want := randBytes(2 * 4 * 64 << 10)
	mustWrite(t, path, want)
	untilStripesWhole(t, c)

	slow := serverOfShard(t, c, path, 0)
	setFaults(t, c.FaultFile(slow), `[{"path": "/", "ops": "read", "delay": "1500ms"}]`)
	first := alignedBlock(64 << 10) // data shard 0 of stripe 0
	readDirectAt(t, path, first, 0)
	hedged := time.Now()
	if wins := scrapeMetrics(t, c, "mount").sum("tandem_client_ec_hedge_wins_total"); wins < 1 {
		t.Fatalf("the slow shard's read was not beaten by a rebuild (%v hedges won): nothing is suspect", wins)
	}
	setFaults(t, c.FaultFile(slow), `[]`)
	gone := 0
	for _, s := range c.Layout.Servers {
		if s.Name != slow && gone < 2 {
			c.KillProcess(s.Name)
			gone++
		}
	}
	got := alignedBlock(64 << 10)
	t0 := time.Now()
	readDirectAt(t, path, got, 0)
	t.Logf("read with two servers gone and the suspect asked: %v (%v since the hedge)", time.Since(t0), time.Since(hedged))
	if !bytes.Equal(got, want[:64<<10]) || !bytes.Equal(first, want[:64<<10]) {
		t.Fatal("the shard read back other bytes")
	}
}

// readDirectAt fills buf from path at off with O_DIRECT.
func readDirectAt(t *testing.T, path string, buf []byte, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.ReadAt(buf, off); err != nil {
		t.Fatalf("read %s at %d: %v", path, off, err)
	}
}

// serverOfShard is the name of the storage server that holds shard j of
// erasure-coded file path.
func serverOfShard(t *testing.T, c *testcluster.Cluster, path string, j int) string {
	t.Helper()
	l := fileLayout(t, path)
	if l.EC == nil || len(l.EC.Shards) <= j {
		t.Fatalf("stripe get --json %s: no shard %d: %+v", path, j, l)
	}
	for _, s := range c.Layout.Servers {
		if s.Listen == l.EC.Shards[j].Addr {
			return s.Name
		}
	}
	t.Fatalf("no server of the cluster listens at %s, shard %d's address", l.EC.Shards[j].Addr, j)
	return ""
}

// A file held open across conversions (copies, then 4+2, 2+2 and copies
// again) reads the same bytes through the same descriptor after every
// swap, hole included, and a descriptor opened before a swap writes into
// the new layout: the open state follows the file's layout as long as it
// has nothing of its own unwritten.
func TestAFileHeldOpenAcrossConversionsReadsAndWritesTheNewLayout(t *testing.T) {
	c := testcluster.Start(t, testcluster.WithServers(6, 1), testcluster.WithSessionTimeout(3*time.Second))
	dir := patternedDir(t, c, "data", "--replicas", "2", "--chunk-size", "64K")
	m := &ecModel{path: filepath.Join(dir, "f")}
	r := rand.New(rand.NewPCG(7, 8))
	f, err := os.Create(m.path)
	if err != nil {
		t.Fatal(err)
	}
	m.writeAt(t, f, 0, seededBytes(r, 300<<10))
	m.writeAt(t, f, 700<<10, seededBytes(r, 333<<10+777)) // a hole between
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // the leader judges open files from now

	block := alignedBlock(4096)
	perByte := []float64{1.5, 2, 2} // what each layout costs on the targets
	for i, flags := range [][]string{{"--ec", "4+2"}, {"--ec", "2+2"}, {"--replicas", "2"}} {
		reader, err := os.OpenFile(m.path, os.O_RDONLY|syscall.O_DIRECT, 0)
		if err != nil {
			t.Fatal(err)
		}
		writer, err := os.OpenFile(m.path, os.O_WRONLY|syscall.O_DIRECT, 0)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(2500 * time.Millisecond) // the mount reports its open files every 2 s
		args := append([]string{"ec", "convert", "--data", c.Dir()}, flags...)
		if out, err := runTandem(t, append(args, m.path)...); err != nil {
			t.Fatalf("ec convert %v: %v\n%s", flags, err, out)
		}
		if got := readAllDirect(t, reader); !bytes.Equal(got, m.data) {
			t.Fatalf("after ec convert %v the descriptor open before it reads other bytes", flags)
		}
		copy(block, seededBytes(r, len(block)))
		off := int64(64<<10*i + 500<<10) // in the hole, then past it
		if _, err := writer.WriteAt(block, off); err != nil {
			t.Fatalf("after ec convert %v a write through a descriptor open before it: %v", flags, err)
		}
		copy(m.data[off:], block)
		if err := writer.Close(); err != nil {
			t.Fatalf("after ec convert %v, close of a descriptor written: %v", flags, err)
		}
		if got := readAllDirect(t, reader); !bytes.Equal(got, m.data) {
			t.Fatalf("after ec convert %v and a write, the descriptor open before both reads other bytes", flags)
		}
		reader.Close()
		m.checkDirect(t)
		// The next conversion waits until no client holds the file
		// open with the layout this one replaced, and that is deleted.
		waitOldLayoutDeleted(t, c, int64(perByte[i]*float64(len(m.data))))
	}
}

// A file small enough to be kept inline in the metadata is converted too:
// it stays inline, and the conversion gives it the layout it takes when
// it grows out of the metadata, so that a directory converted to erasure
// coding does not keep copies of its small files once they grow.
func TestAFileKeptInlineIsConvertedToTheLayoutItGrowsInto(t *testing.T) {
	c := testcluster.Start(t, testcluster.WithServers(6, 1), testcluster.WithSessionTimeout(3*time.Second))
	dir := patternedDir(t, c, "data", "--replicas", "2", "--chunk-size", "64K")
	m := &ecModel{path: filepath.Join(dir, "small")}
	r := rand.New(rand.NewPCG(9, 10))
	mustWrite(t, m.path, nil)
	f, err := os.OpenFile(m.path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	m.writeAt(t, f, 0, seededBytes(r, 1000))
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // the leader judges open files from now

	out, err := runTandem(t, "ec", "convert", "--data", c.Dir(), "--ec", "4+2", dir)
	if err != nil || !strings.Contains(out, "kept inline") {
		t.Fatalf("ec convert of a directory holding an inline file: %v\n%s", err, out)
	}
	l := fileLayout(t, m.path)
	if l.EC == nil || l.EC.Data != 4 || l.EC.Parity != 2 || l.Inline == false {
		t.Fatalf("after ec convert an inline file has the layout %+v, want inline and 4+2", l)
	}
	m.check(t)

	f, err = os.OpenFile(m.path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	m.writeAt(t, f, 1000, seededBytes(r, 4<<20))
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if l := fileLayout(t, m.path); l.EC == nil || l.EC.Data != 4 || len(l.EC.Shards) != 6 || l.Inline {
		t.Fatalf("grown out of the metadata, the converted file has the layout %+v, want 4+2 on targets", l)
	}
	m.checkDirect(t)
	if used, want := targetBytes(t, c), int64(1.5*float64(len(m.data)))+1<<20; used > want {
		t.Fatalf("the grown file costs %d bytes on the targets, want at most %d (coded 4+2, not copies)", used, want)
	}
}

// fileLayout is `tandem stripe get --json path`.
func fileLayout(t *testing.T, path string) fuse.Layout {
	t.Helper()
	out, err := runTandem(t, "stripe", "get", "--json", path)
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var l fuse.Layout
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return l
}

// A sparse file keeps its holes through conversions: stripes and chunks
// that hold only zeros are not written (they read as zeros all the same),
// so a 64 MiB file with 1 MiB of data costs about 1 MiB of it.
func TestAConvertedSparseFileKeepsItsHoles(t *testing.T) {
	c := testcluster.Start(t, testcluster.WithServers(6, 1), testcluster.WithSessionTimeout(3*time.Second))
	dir := patternedDir(t, c, "data", "--replicas", "2", "--chunk-size", "64K")
	m := &ecModel{path: filepath.Join(dir, "sparse")}
	f, err := os.Create(m.path)
	if err != nil {
		t.Fatal(err)
	}
	m.writeAt(t, f, 10<<20+5, seededBytes(rand.New(rand.NewPCG(11, 12)), 1<<20))
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	m.truncate(t, 64<<20)
	time.Sleep(3 * time.Second) // the leader judges open files from now

	for _, step := range []struct {
		flags   []string
		perByte float64
	}{{[]string{"--ec", "4+2"}, 1.5}, {[]string{"--replicas", "2"}, 2}} {
		args := append([]string{"ec", "convert", "--data", c.Dir()}, step.flags...)
		if out, err := runTandem(t, append(args, m.path)...); err != nil {
			t.Fatalf("ec convert %v: %v\n%s", step.flags, err, out)
		}
		m.checkDirect(t)
		// 1 MiB of data, and the stripes or chunks it touches.
		waitOldLayoutDeleted(t, c, int64(step.perByte*(1<<20+2*256<<10)))
	}
}

// 8+3, three parity shards: eleven servers, one shard of each stripe on
// each, and files of every shape read back identical with any three of
// them gone.
func TestEightPlusThreeFilesReadBackWithThreeServersGone(t *testing.T) {
	c := testcluster.Start(t, testcluster.WithServers(11, 1), testcluster.WithMountFlags("--give-up", "6s"))
	dir := patternedDir(t, c, "ec", "--ec", "8+3", "--chunk-size", "64K")
	files := ecFiles(t, rand.New(rand.NewPCG(83, 83)), dir, 8*64<<10)
	l := fileLayout(t, filepath.Join(dir, "stripes-and-tail"))
	servers := map[uint32]bool{}
	for _, sh := range l.EC.Shards {
		servers[sh.Server] = true
	}
	if l.EC.Data != 8 || l.EC.Parity != 3 || len(l.EC.Shards) != 11 || len(servers) != 11 {
		t.Fatalf("an 8+3 file's layout: %+v", l.EC)
	}
	untilStripesWhole(t, c)
	for _, name := range []string{"storage3", "storage7", "storage11"} {
		c.KillProcess(name)
	}
	for _, m := range files {
		m.checkDirect(t)
	}
}

// A shard on a slow disk does not hold up writes either: once K+1 shards
// of a stripe are written (so that it still survives another failure),
// the last get a grace of a second, then the stripe is recorded without
// them (and repaired), and the slow target is skipped for a while. Eight
// stripes written and synced take less than one write to the slow disk,
// and read back whole.
func TestAWriteDoesNotWaitForASlowShard(t *testing.T) {
	c := testcluster.Start(t, testcluster.WithServers(6, 1), testcluster.WithFaultFiles())
	dir := patternedDir(t, c, "ec", "--ec", "4+2", "--chunk-size", "64K")
	path := filepath.Join(dir, "f")
	mustWrite(t, path, randBytes(5000)) // past inline: its shards are on the targets
	slow := serverOfShard(t, c, path, 0)
	setFaults(t, c.FaultFile(slow), `[{"path": "/", "ops": "write", "delay": "3s"}]`)

	want := randBytes(8 * 4 * 64 << 10) // eight stripes
	t0 := time.Now()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(want); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	took := time.Since(t0)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if took > 2500*time.Millisecond {
		t.Fatalf("writing eight stripes with a shard's disk 3 s slow took %v: the writes waited for it", took)
	}
	setFaults(t, c.FaultFile(slow), `[]`)
	if got := readWholeDirect(t, path); !bytes.Equal(got, want) {
		t.Fatal("the file written around a slow shard reads back other bytes")
	}
	t.Logf("wrote and synced %d bytes around a slow shard in %v", len(want), took)
}
