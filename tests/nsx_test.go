package tests

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"tandemfs/internal/testcluster"
)

// A namespace exerciser, the directory-tree counterpart of fsx_test.go
// (in the spirit of fsstress): random creates, mkdirs, unlinks, rmdirs,
// renames (over files, over empty and non-empty directories, into a
// directory's own subtree, between hard links of one file), hard links,
// symlinks and rewrites through one mount, each answer (success or the
// POSIX error) checked against a model of the tree. Every so often the
// whole tree is walked and compared, through this mount at once and
// through a second mount (another client host) within a second, the time
// the change stream takes to reach its kernel.
//
// TANDEM_NSX_OPS sets the number of operations (default 1500) and
// TANDEM_NSX_SEED the seed.

func TestRandomNamespaceOperationsAgreeWithAModelOfTheTree(t *testing.T) {
	c := testcluster.Start(t)
	other := secondMount(t, c)
	const top = "nsx"
	if err := os.Mkdir(filepath.Join(c.Mount(), top), 0o755); err != nil {
		t.Fatal(err)
	}
	seed := envSeed(t, "TANDEM_NSX_SEED")
	t.Logf("seed %d (repeat with TANDEM_NSX_SEED=%d)", seed, seed)
	x := &nsx{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x7ee)),
		base: filepath.Join(c.Mount(), top), root: &nsDir{entries: map[string]*nsEntry{}}}
	n := envCount(t, "TANDEM_NSX_OPS", 1500)
	for x.ops = 0; x.ops < n; x.ops++ {
		x.step()
		if x.ops%100 == 99 {
			x.compareTree(x.base, 0)
			x.compareTree(filepath.Join(other, top), time.Second)
		}
	}
	x.compareTree(x.base, 0)
	x.compareTree(filepath.Join(other, top), time.Second)
}

type nsDir struct{ entries map[string]*nsEntry }

// nsEntry is one name: a directory, a regular file (shared by its hard
// links) or a symlink.
type nsEntry struct {
	dir    *nsDir
	file   *nsFile
	target string
}

type nsFile struct {
	data  []byte
	links int
}

// nsPlace is a name in a directory of the model, and its path.
type nsPlace struct {
	parent *nsDir
	name   string
	rel    string // below the exerciser's top directory
}

func (p nsPlace) entry() *nsEntry { return p.parent.entries[p.name] }

type nsx struct {
	t    *testing.T
	seed uint64
	rng  *rand.Rand
	base string
	root *nsDir
	ops  int
	hist []string
}

// nsNames are few, so that names collide.
var nsNames = []string{"a", "b", "c", "d", "e", "f", "g", "h"}

func (x *nsx) step() {
	switch r := x.rng.IntN(100); {
	case r < 18:
		x.create()
	case r < 28:
		x.mkdir()
	case r < 40:
		x.unlink()
	case r < 48:
		x.rmdir()
	case r < 72:
		x.rename()
	case r < 80:
		x.link()
	case r < 86:
		x.symlink()
	default:
		x.rewrite()
	}
}

func (x *nsx) note(format string, args ...any) {
	x.hist = append(x.hist, fmt.Sprintf("%5d ", x.ops)+fmt.Sprintf(format, args...))
	if len(x.hist) > 40 {
		x.hist = x.hist[1:]
	}
}

func (x *nsx) fail(format string, args ...any) {
	x.t.Helper()
	x.t.Fatalf("after %d operations (seed %d): %s\nlast operations:\n%s", x.ops, x.seed,
		fmt.Sprintf(format, args...), strings.Join(x.hist, "\n"))
}

// expect checks an operation's answer: nil, or the errno want.
func (x *nsx) expect(what string, err error, want syscall.Errno) {
	x.t.Helper()
	switch {
	case want == 0 && err != nil:
		x.fail("%s: %v, want success", what, err)
	case want != 0 && !errors.Is(err, want):
		x.fail("%s: %v, want %v", what, err, want)
	}
}

// dirs lists every directory of the model with its path, the top first.
func (x *nsx) dirs() (ds []*nsDir, rels []string) {
	var walk func(d *nsDir, rel string)
	walk = func(d *nsDir, rel string) {
		ds, rels = append(ds, d), append(rels, rel)
		for _, name := range sortedNames(d) {
			if e := d.entries[name]; e.dir != nil {
				walk(e.dir, filepath.Join(rel, name))
			}
		}
	}
	walk(x.root, "")
	return ds, rels
}

func sortedNames(d *nsDir) []string {
	names := make([]string, 0, len(d.entries))
	for n := range d.entries {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// place picks a random name in a random directory, taken or not.
func (x *nsx) place() nsPlace {
	ds, rels := x.dirs()
	i := x.rng.IntN(len(ds))
	name := nsNames[x.rng.IntN(len(nsNames))]
	return nsPlace{ds[i], name, filepath.Join(rels[i], name)}
}

// existing picks a random existing name for which keep holds.
func (x *nsx) existing(keep func(*nsEntry) bool) (nsPlace, bool) {
	var all []nsPlace
	ds, rels := x.dirs()
	for i, d := range ds {
		for _, name := range sortedNames(d) {
			if keep(d.entries[name]) {
				all = append(all, nsPlace{d, name, filepath.Join(rels[i], name)})
			}
		}
	}
	if len(all) == 0 {
		return nsPlace{}, false
	}
	return all[x.rng.IntN(len(all))], true
}

func (x *nsx) path(rel string) string { return filepath.Join(x.base, rel) }

// content is a new file's bytes: empty, inline-sized or past the inline
// limit.
func (x *nsx) content() []byte {
	b := make([]byte, []int{0, 100, 3000, 9000}[x.rng.IntN(4)]+x.rng.IntN(50))
	for i := range b {
		b[i] = byte(x.ops + i*7)
	}
	return b
}

func (x *nsx) create() {
	p := x.place()
	data := x.content()
	x.note("create %s (%d bytes)", p.rel, len(data))
	f, err := os.OpenFile(x.path(p.rel), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if p.entry() != nil {
		x.expect("create "+p.rel, err, syscall.EEXIST)
		return
	}
	x.expect("create "+p.rel, err, 0)
	_, err = f.Write(data)
	x.expect("write "+p.rel, err, 0)
	x.expect("close "+p.rel, f.Close(), 0)
	p.parent.entries[p.name] = &nsEntry{file: &nsFile{data: data, links: 1}}
}

func (x *nsx) mkdir() {
	p := x.place()
	x.note("mkdir %s", p.rel)
	err := os.Mkdir(x.path(p.rel), 0o755)
	if p.entry() != nil {
		x.expect("mkdir "+p.rel, err, syscall.EEXIST)
		return
	}
	x.expect("mkdir "+p.rel, err, 0)
	p.parent.entries[p.name] = &nsEntry{dir: &nsDir{entries: map[string]*nsEntry{}}}
}

func (x *nsx) unlink() {
	p, ok := x.existing(func(*nsEntry) bool { return true })
	if !ok {
		return
	}
	x.note("unlink %s", p.rel)
	err := syscall.Unlink(x.path(p.rel))
	e := p.entry()
	if e.dir != nil {
		x.expect("unlink of directory "+p.rel, err, syscall.EISDIR)
		return
	}
	x.expect("unlink "+p.rel, err, 0)
	drop(e)
	delete(p.parent.entries, p.name)
}

// drop accounts for a name of e going away.
func drop(e *nsEntry) {
	if e.file != nil {
		e.file.links--
	}
}

func (x *nsx) rmdir() {
	p, ok := x.existing(func(e *nsEntry) bool { return e.dir != nil || e.target != "" })
	if !ok {
		return
	}
	x.note("rmdir %s", p.rel)
	err := syscall.Rmdir(x.path(p.rel))
	e := p.entry()
	switch {
	case e.dir == nil:
		x.expect("rmdir of a symlink "+p.rel, err, syscall.ENOTDIR)
	case len(e.dir.entries) > 0:
		x.expect("rmdir of non-empty "+p.rel, err, syscall.ENOTEMPTY)
	default:
		x.expect("rmdir "+p.rel, err, 0)
		delete(p.parent.entries, p.name)
	}
}

func (x *nsx) rename() {
	src, ok := x.existing(func(*nsEntry) bool { return true })
	if !ok {
		return
	}
	dst := x.place()
	x.note("rename %s -> %s", src.rel, dst.rel)
	// rename(2) itself: os.Rename refuses any existing directory as the
	// target before asking the file system.
	err := syscall.Rename(x.path(src.rel), x.path(dst.rel))
	what := "rename " + src.rel + " -> " + dst.rel
	s, d := src.entry(), dst.entry()
	switch {
	case src.parent == dst.parent && src.name == dst.name:
		x.expect(what+" (to itself)", err, 0)
	case s.dir != nil && (dst.rel == src.rel || strings.HasPrefix(dst.rel, src.rel+"/")):
		x.expect(what+" (into its own subtree)", err, syscall.EINVAL)
	case strings.HasPrefix(src.rel, dst.rel+"/"):
		// Linux checks this before the types (do_renameat2).
		x.expect(what+" (over an ancestor)", err, syscall.ENOTEMPTY)
	case d == nil:
		x.expect(what, err, 0)
		x.move(src, dst)
	case s.dir != nil && d.dir == nil:
		x.expect(what+" (directory over non-directory)", err, syscall.ENOTDIR)
	case s.dir == nil && d.dir != nil:
		x.expect(what+" (non-directory over directory)", err, syscall.EISDIR)
	case d.dir != nil && len(d.dir.entries) > 0:
		x.expect(what+" (over a non-empty directory)", err, syscall.ENOTEMPTY)
	case s.file != nil && s.file == d.file:
		x.expect(what+" (hard links of one file: nothing happens)", err, 0)
	default:
		x.expect(what+" (replacing)", err, 0)
		drop(d)
		x.move(src, dst)
	}
}

func (x *nsx) move(src, dst nsPlace) {
	dst.parent.entries[dst.name] = src.entry()
	delete(src.parent.entries, src.name)
}

func (x *nsx) link() {
	src, ok := x.existing(func(e *nsEntry) bool { return e.file != nil })
	if !ok {
		return
	}
	dst := x.place()
	x.note("link %s -> %s", src.rel, dst.rel)
	err := os.Link(x.path(src.rel), x.path(dst.rel))
	if dst.entry() != nil {
		x.expect("link to taken name "+dst.rel, err, syscall.EEXIST)
		return
	}
	x.expect("link "+src.rel+" -> "+dst.rel, err, 0)
	f := src.entry().file
	f.links++
	dst.parent.entries[dst.name] = &nsEntry{file: f}
}

func (x *nsx) symlink() {
	p := x.place()
	target := fmt.Sprintf("../target-%d", x.ops)
	x.note("symlink %s -> %s", p.rel, target)
	err := os.Symlink(target, x.path(p.rel))
	if p.entry() != nil {
		x.expect("symlink at taken name "+p.rel, err, syscall.EEXIST)
		return
	}
	x.expect("symlink "+p.rel, err, 0)
	p.parent.entries[p.name] = &nsEntry{target: target}
}

// rewrite replaces a file's bytes through one of its names; every hard
// link shows them.
func (x *nsx) rewrite() {
	p, ok := x.existing(func(e *nsEntry) bool { return e.file != nil })
	if !ok {
		return
	}
	data := x.content()
	x.note("rewrite %s (%d bytes)", p.rel, len(data))
	x.expect("rewrite "+p.rel, os.WriteFile(x.path(p.rel), data, 0o644), 0)
	p.entry().file.data = data
}

// compareTree walks the tree under dir and compares it with the model,
// retrying for up to settle (a second mount learns of changes from the
// change stream).
func (x *nsx) compareTree(dir string, settle time.Duration) {
	x.t.Helper()
	deadline := time.Now().Add(settle)
	for {
		diff := x.diff(dir, "", x.root)
		if diff == "" {
			return
		}
		if time.Now().After(deadline) {
			x.fail("the tree under %s differs from the model (after %v): %s", dir, settle, diff)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// diff describes the first difference between the directory at dir/rel
// and d, or returns "".
func (x *nsx) diff(dir, rel string, d *nsDir) string {
	ents, err := os.ReadDir(filepath.Join(dir, rel))
	if err != nil {
		return fmt.Sprintf("readdir %s: %v", rel, err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if want := sortedNames(d); !slices.Equal(names, want) {
		return fmt.Sprintf("%s/ lists %v, want %v", rel, names, want)
	}
	for _, name := range names {
		e, p := d.entries[name], filepath.Join(dir, rel, name)
		st, err := os.Lstat(p)
		if err != nil {
			return fmt.Sprintf("lstat %s: %v", filepath.Join(rel, name), err)
		}
		if s := x.diffEntry(p, st, e); s != "" {
			return filepath.Join(rel, name) + ": " + s
		}
		if e.dir != nil {
			if s := x.diff(dir, filepath.Join(rel, name), e.dir); s != "" {
				return s
			}
		}
	}
	return ""
}

func (x *nsx) diffEntry(p string, st os.FileInfo, e *nsEntry) string {
	sys := st.Sys().(*syscall.Stat_t)
	switch {
	case e.dir != nil:
		if !st.IsDir() {
			return fmt.Sprintf("mode %v, want a directory", st.Mode())
		}
	case e.target != "":
		got, err := os.Readlink(p)
		if err != nil || got != e.target {
			return fmt.Sprintf("readlink %q (%v), want %q", got, err, e.target)
		}
	default:
		if !st.Mode().IsRegular() || st.Size() != int64(len(e.file.data)) || int(sys.Nlink) != e.file.links {
			return fmt.Sprintf("mode %v size %d nlink %d, want a file of %d bytes with %d links",
				st.Mode(), st.Size(), sys.Nlink, len(e.file.data), e.file.links)
		}
		got, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(got, e.file.data) {
			return fmt.Sprintf("read %d bytes (%v) differing from the %d written", len(got), err, len(e.file.data))
		}
	}
	return ""
}
