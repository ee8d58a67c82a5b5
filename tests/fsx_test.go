package tests

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"tandemfs/internal/testcluster"
)

// An exerciser in the style of fsx (Apple's, and xfstests' generic/070 and
// friends): random operations on one file through two mounts of one
// cluster, each result checked against a model of the file kept in
// memory. It mixes what real programs mix: buffered and O_DIRECT writes
// and reads, shared mmap reads and writes, truncates up and down, appends,
// fallocate, fsync, reopening, and moving to the other mount (another client host)
// after a close. The file grows and shrinks across the inline limit and
// across the chunks and chains of a small stripe, where the client's
// write-behind, block cache, readahead and the inline-to-chunks move meet.
//
// TANDEM_FSX_OPS sets the number of operations (default 1500) and
// TANDEM_FSX_SEED the seed; a failure names the seed and the operations
// that led to it, so a run can be repeated exactly.

func TestRandomOperationsAgreeWithAModelOfTheFile(t *testing.T) {
	c := testcluster.Start(t)
	mounts := [2]string{c.Mount(), secondMount(t, c)}
	for _, layout := range []struct{ name, chunk, count string }{
		{"default stripe", "", ""},
		{"64K chunks over 3 chains", "64K", "3"},
	} {
		t.Run(layout.name, func(t *testing.T) {
			dir := "fsx-" + strings.ReplaceAll(layout.name, " ", "-")
			if err := os.Mkdir(filepath.Join(mounts[0], dir), 0o755); err != nil {
				t.Fatal(err)
			}
			if layout.chunk != "" {
				out, err := runTandem(t, "stripe", "set", "--chunk-size", layout.chunk, "--count", layout.count,
					filepath.Join(mounts[0], dir))
				if err != nil {
					t.Fatalf("stripe set: %v\n%s", err, out)
				}
			}
			x := newFSX(t, [2]string{filepath.Join(mounts[0], dir, "f"), filepath.Join(mounts[1], dir, "f")})
			defer x.closeAll()
			x.run(envCount(t, "TANDEM_FSX_OPS", 1500))
			x.moveToOtherMount()
		})
	}
}

// The same operations while each storage server in turn, and the
// metadata leader of three replicas, is killed (kill -9) and restarted:
// the operations in flight block through the failover and then complete,
// and every result still agrees with the model, also those read from a
// resynced copy.
func TestRandomOperationsAgreeWithAModelAcrossServerCrashes(t *testing.T) {
	c := testcluster.Start(t, testcluster.WithMetaReplicas(3))
	mounts := [2]string{c.Mount(), secondMount(t, c)}
	if err := os.Mkdir(filepath.Join(mounts[0], "fsx"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Small chunks over every chain, so that the file has chunks
	// wherever a server is lost.
	if out, err := runTandem(t, "stripe", "set", "--chunk-size", "64K", "--count", "4", filepath.Join(mounts[0], "fsx")); err != nil {
		t.Fatalf("stripe set: %v\n%s", err, out)
	}
	x := newFSX(t, [2]string{filepath.Join(mounts[0], "fsx", "f"), filepath.Join(mounts[1], "fsx", "f")})
	defer x.closeAll()
	n := max(envCount(t, "TANDEM_FSX_OPS", 1500)/4, 50)
	x.run(n)
	for _, victim := range []string{"storage2", "metadata leader", "storage1"} {
		name := victim
		if victim == "metadata leader" {
			name = leaderReplica(t, c)
		}
		c.KillProcess(name)
		x.note("killed %s (%s)", victim, name)
		x.longest = 0
		x.run(n)
		t.Logf("%s (%s) killed: the longest of the next %d operations took %v", victim, name, n, x.longest)
		c.Up()
		x.note("restarted %s", name)
		deadline := time.Now().Add(90 * time.Second)
		for !allServing(t, c) {
			if time.Now().After(deadline) {
				x.fail("%s not resynced within 90 s", name)
			}
			x.run(20)
		}
		x.note("every chain serving again")
		x.moveToOtherMount()
	}
}

const (
	fsxPage    = 4096
	fsxMaxIO   = 256 << 10 // the largest single read or write
	fsxHistory = 40        // operations shown when one fails
)

// fsxSpans are the sizes the file wanders within, one at a time: around
// the inline limit (4 KiB), over a few 64 KiB chunks, over many of them.
var fsxSpans = []int{12 << 10, 400 << 10, 3 << 20}

type fsx struct {
	t     *testing.T
	seed  uint64
	rng   *rand.Rand
	paths [2]string // the file through each mount
	on    int       // the mount the handles are open on
	f     *os.File  // buffered, read-write
	d     *os.File  // O_DIRECT, read-write; opened when first needed
	model []byte    // what the file must hold
	span  int       // offsets and sizes stay below it
	buf   []byte    // page-aligned, for O_DIRECT
	ops   int
	hist  []string
	// longest is the longest operation so far.
	longest time.Duration
}

func newFSX(t *testing.T, paths [2]string) *fsx {
	seed := envSeed(t, "TANDEM_FSX_SEED")
	t.Logf("seed %d (repeat with TANDEM_FSX_SEED=%d)", seed, seed)
	buf, err := syscall.Mmap(-1, 0, fsxMaxIO, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Munmap(buf) })
	x := &fsx{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x5eed)), paths: paths, buf: buf, span: fsxSpans[0]}
	f, err := os.OpenFile(paths[0], os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	x.f = f
	return x
}

// fsxOp is one kind of operation and how often it is picked.
type fsxOp struct {
	weight int
	do     func(x *fsx)
}

var fsxMix = []fsxOp{
	{20, (*fsx).write},
	{20, (*fsx).read},
	{8, (*fsx).directWrite},
	{8, (*fsx).directRead},
	{7, (*fsx).truncate},
	{5, (*fsx).mapRead},
	{5, (*fsx).mapWrite},
	{4, (*fsx).appendWrite},
	{2, (*fsx).allocate},
	{4, (*fsx).fsync},
	{4, (*fsx).reopen},
	{3, (*fsx).moveToOtherMount},
	{2, (*fsx).newSpan},
}

// run does n more random operations.
func (x *fsx) run(n int) {
	total := 0
	for _, op := range fsxMix {
		total += op.weight
	}
	for end := x.ops + n; x.ops < end; x.ops++ {
		pick := x.rng.IntN(total)
		t0 := time.Now()
		for _, op := range fsxMix {
			if pick < op.weight {
				op.do(x)
				break
			}
			pick -= op.weight
		}
		x.checkSize()
		x.longest = max(x.longest, time.Since(t0))
	}
}

// note records an operation for the failure message.
func (x *fsx) note(format string, args ...any) {
	x.hist = append(x.hist, fmt.Sprintf("%5d [mount %c] ", x.ops, 'A'+x.on)+fmt.Sprintf(format, args...))
	if len(x.hist) > fsxHistory {
		x.hist = x.hist[1:]
	}
}

func (x *fsx) fail(format string, args ...any) {
	x.t.Helper()
	x.t.Fatalf("after %d operations (seed %d): %s\nlast operations:\n%s", x.ops, x.seed,
		fmt.Sprintf(format, args...), strings.Join(x.hist, "\n"))
}

func (x *fsx) check(err error, what string) {
	x.t.Helper()
	if err != nil {
		x.fail("%s: %v", what, err)
	}
}

// pattern fills b with bytes no earlier operation wrote at those offsets:
// the operation's number and the offset, so a misplaced block shows.
func (x *fsx) pattern(b []byte, off int) {
	for i := range b {
		b[i] = byte(x.ops*7+(off+i)/509) ^ byte(off+i)
	}
}

// extent picks an offset and a length within the span.
func (x *fsx) extent(maxLen int) (off, n int) {
	off = x.rng.IntN(x.span)
	n = 1 + x.rng.IntN(min(maxLen, x.span-off))
	if x.rng.IntN(4) == 0 {
		n = 1 + x.rng.IntN(min(64, x.span-off)) // tiny ones too
	}
	return off, n
}

// alignedExtent picks a page-aligned offset and length within the span.
func (x *fsx) alignedExtent() (off, n int) {
	pages := x.span / fsxPage
	p := x.rng.IntN(pages)
	np := 1 + x.rng.IntN(min(fsxMaxIO/fsxPage, pages-p))
	return p * fsxPage, np * fsxPage
}

// store puts b at off in the model, zero-filling any gap.
func (x *fsx) store(off int, b []byte) {
	if end := off + len(b); end > len(x.model) {
		x.model = append(x.model, make([]byte, end-len(x.model))...)
	}
	copy(x.model[off:], b)
}

// expect is what a read of n bytes at off must return.
func (x *fsx) expect(off, n int) []byte {
	if off >= len(x.model) {
		return nil
	}
	return x.model[off:min(off+n, len(x.model))]
}

func (x *fsx) compare(what string, off int, got, want []byte) {
	x.t.Helper()
	if bytes.Equal(got, want) {
		return
	}
	if len(got) != len(want) {
		x.fail("%s at %d: %d bytes, want %d (file size %d)", what, off, len(got), len(want), len(x.model))
	}
	i := 0
	for got[i] == want[i] {
		i++
	}
	x.fail("%s at %d: byte %d (file offset %d) is %#x, want %#x (file size %d)",
		what, off, i, off+i, got[i], want[i], len(x.model))
}

func (x *fsx) write() {
	off, n := x.extent(fsxMaxIO)
	b := make([]byte, n)
	x.pattern(b, off)
	x.note("write %d bytes at %d", n, off)
	_, err := x.f.WriteAt(b, int64(off))
	x.check(err, "write")
	x.store(off, b)
}

func (x *fsx) read() {
	off, n := x.extent(fsxMaxIO)
	off = min(off, len(x.model)+fsxPage) // mostly inside the file, sometimes past it
	x.note("read %d bytes at %d", n, off)
	b := make([]byte, n)
	got, err := x.f.ReadAt(b, int64(off))
	if err != nil && got == n {
		err = nil
	}
	if err != nil && !errors.Is(err, io.EOF) {
		x.check(err, "read")
	}
	x.compare("read", off, b[:got], x.expect(off, n))
}

// direct opens the O_DIRECT handle on the current mount.
func (x *fsx) direct() *os.File {
	if x.d == nil {
		d, err := os.OpenFile(x.paths[x.on], os.O_RDWR|syscall.O_DIRECT, 0)
		x.check(err, "open O_DIRECT")
		x.d = d
	}
	return x.d
}

func (x *fsx) directWrite() {
	off, n := x.alignedExtent()
	b := x.buf[:n]
	x.pattern(b, off)
	x.note("O_DIRECT write %d bytes at %d", n, off)
	_, err := x.direct().WriteAt(b, int64(off))
	x.check(err, "O_DIRECT write")
	x.store(off, b)
}

func (x *fsx) directRead() {
	off, n := x.alignedExtent()
	x.note("O_DIRECT read %d bytes at %d", n, off)
	b := x.buf[:n]
	got, err := x.direct().ReadAt(b, int64(off))
	if err != nil && !errors.Is(err, io.EOF) {
		x.check(err, "O_DIRECT read")
	}
	x.compare("O_DIRECT read", off, b[:got], x.expect(off, n))
}

func (x *fsx) truncate() {
	size := x.rng.IntN(x.span + 1)
	if x.rng.IntN(5) == 0 {
		size = 0
	}
	x.note("truncate to %d (from %d)", size, len(x.model))
	x.check(x.f.Truncate(int64(size)), "truncate")
	if size < len(x.model) {
		x.model = x.model[:size]
	} else {
		x.model = append(x.model, make([]byte, size-len(x.model))...)
	}
}

func (x *fsx) mapRead() {
	if len(x.model) == 0 {
		return
	}
	off := x.rng.IntN(len(x.model))
	n := 1 + x.rng.IntN(min(fsxMaxIO, len(x.model)-off))
	x.note("mmap read %d bytes at %d", n, off)
	m, err := syscall.Mmap(int(x.f.Fd()), 0, len(x.model), syscall.PROT_READ, syscall.MAP_SHARED)
	x.check(err, "mmap for reading")
	got := append([]byte(nil), m[off:off+n]...)
	x.check(syscall.Munmap(m), "munmap")
	x.compare("mmap read", off, got, x.expect(off, n))
}

// mapWrite writes through a shared mapping, first growing the file to
// cover the range (a mapping cannot grow a file), then msync.
func (x *fsx) mapWrite() {
	off, n := x.extent(fsxMaxIO)
	if end := off + n; end > len(x.model) {
		x.note("truncate to %d for mmap write (from %d)", end, len(x.model))
		x.check(x.f.Truncate(int64(end)), "truncate before mmap write")
		x.model = append(x.model, make([]byte, end-len(x.model))...)
	}
	x.note("mmap write %d bytes at %d", n, off)
	m, err := syscall.Mmap(int(x.f.Fd()), 0, len(x.model), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	x.check(err, "mmap for writing")
	b := make([]byte, n)
	x.pattern(b, off)
	copy(m[off:], b)
	x.check(msync(m), "msync")
	x.check(syscall.Munmap(m), "munmap")
	x.store(off, b)
}

func msync(m []byte) error {
	_, _, e := syscall.Syscall(syscall.SYS_MSYNC, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), syscall.MS_SYNC)
	if e != 0 {
		return e
	}
	return nil
}

func (x *fsx) appendWrite() {
	_, n := x.extent(64 << 10)
	b := make([]byte, n)
	x.pattern(b, len(x.model))
	x.note("append %d bytes at %d", n, len(x.model))
	a, err := os.OpenFile(x.paths[x.on], os.O_WRONLY|os.O_APPEND, 0)
	x.check(err, "open O_APPEND")
	_, err = a.Write(b)
	x.check(err, "append")
	x.check(a.Close(), "close after append")
	x.store(len(x.model), b)
}

// allocate reserves a range with fallocate(2) mode 0: the size grows to
// cover it, and what was there stays.
func (x *fsx) allocate() {
	off, n := x.extent(fsxMaxIO)
	x.note("fallocate %d bytes at %d (size %d)", n, off, len(x.model))
	x.check(syscall.Fallocate(int(x.f.Fd()), 0, int64(off), int64(n)), "fallocate")
	if end := off + n; end > len(x.model) {
		x.model = append(x.model, make([]byte, end-len(x.model))...)
	}
}

func (x *fsx) fsync() {
	x.note("fsync")
	x.check(x.f.Sync(), "fsync")
}

// closeAll closes the handles; the file's bytes are then committed.
func (x *fsx) closeAll() {
	if x.d != nil {
		x.check(x.d.Close(), "close O_DIRECT handle")
		x.d = nil
	}
	if x.f != nil {
		x.check(x.f.Close(), "close")
		x.f = nil
	}
}

func (x *fsx) reopen() {
	x.note("close and reopen")
	x.closeAll()
	f, err := os.OpenFile(x.paths[x.on], os.O_RDWR, 0)
	x.check(err, "reopen")
	x.f = f
}

// moveToOtherMount closes the file and goes on through the other mount,
// another client host, after checking the whole file there: after a
// close, every other client sees all of it (close-to-open).
func (x *fsx) moveToOtherMount() {
	x.closeAll()
	x.on = 1 - x.on
	x.note("closed; now on the other mount, read whole")
	got, err := os.ReadFile(x.paths[x.on])
	x.check(err, "read whole file through the other mount")
	x.compare("whole file through the other mount", 0, got, x.model)
	f, err := os.OpenFile(x.paths[x.on], os.O_RDWR, 0)
	x.check(err, "open on the other mount")
	x.f = f
}

// newSpan moves the offsets to another of the spans.
func (x *fsx) newSpan() {
	x.span = fsxSpans[x.rng.IntN(len(fsxSpans))]
	x.note("offsets now below %d", x.span)
}

func (x *fsx) checkSize() {
	x.t.Helper()
	st, err := x.f.Stat()
	x.check(err, "fstat")
	if st.Size() != int64(len(x.model)) {
		x.fail("fstat size %d, want %d", st.Size(), len(x.model))
	}
}
