package storage

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// copyTree copies a target directory (without its lock) to dst: the image
// a crash at this moment would leave on disk, page cache included.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if fi.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if fi.Name() == "lock" {
			return nil
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(filepath.Join(dst, rel))
		if err != nil {
			return err
		}
		defer out.Close()
		_, err = io.Copy(out, in)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func isData(path string) bool {
	return !strings.HasSuffix(path, ".sum") && strings.Contains(path, "/chunks/")
}
func isSum(path string) bool { return strings.HasSuffix(path, ".sum") }

// crashImages runs a write of p at off over a chunk holding old and returns
// the disk images a crash would leave just before the sidecar pwrite and
// just before the data pwrite, and the target after the write.
func crashImages(t *testing.T, old []byte, off int64, p []byte) (beforeSum, beforeData string, tg *Target) {
	ffs := NewFaultFS(nil)
	tg = openTestTarget(t, Options{FS: ffs})
	mustWrite(t, tg, 1, 0, 0, old)
	beforeSum, beforeData = t.TempDir(), t.TempDir()
	ffs.Inject(Fault{Ops: OpWrite, Match: isSum, Times: 1, Hook: func(Op, string) { copyTree(t, tg.Dir(), beforeSum) }})
	ffs.Inject(Fault{Ops: OpWrite, Match: isData, Times: 1, Hook: func(Op, string) { copyTree(t, tg.Dir(), beforeData) }})
	mustWrite(t, tg, 1, 0, off, p)
	return beforeSum, beforeData, tg
}

var crashCases = []struct {
	name string
	old  int
	off  int64
	n    int
}{
	{"aligned overwrite", 8 * BlockSize, BlockSize, 3 * BlockSize},
	{"unaligned overwrite", 8 * BlockSize, 1000, 3*BlockSize + 17},
	{"overwrite and extend", 3*BlockSize + 100, 2*BlockSize + 50, 5 * BlockSize},
	{"write past a hole", 2*BlockSize + 100, 6*BlockSize + 10, 1000},
}

// A process killed between the two pwrites of a write leaves the old
// contents, and they read back without a checksum error.
func TestCrashBeforeTheDataWriteReadsOld(t *testing.T) {
	for _, c := range crashCases {
		t.Run(c.name, func(t *testing.T) {
			old := pattern(1, c.old)
			_, image, _ := crashImages(t, old, c.off, pattern(2, c.n))
			tg := openTargetAt(t, image, Options{})
			assertSame(t, "after the crash", readAll(t, tg, 1, 0, 1<<20), old)

			// And the chunk takes writes again as usual.
			var want model
			want.write(0, old)
			p := pattern(3, c.n)
			mustWrite(t, tg, 1, 0, c.off+1, p)
			want.write(int(c.off+1), p)
			assertSame(t, "written after the crash", readAll(t, tg, 1, 0, 1<<20), want)
		})
	}
}

// A process killed part way through the data pwrite (which stops at a page
// boundary) leaves each block old or new, and all of them verify.
func TestCrashDuringTheDataWriteReadsOldOrNewPerBlock(t *testing.T) {
	for _, c := range crashCases {
		t.Run(c.name, func(t *testing.T) {
			old, p := pattern(1, c.old), pattern(2, c.n)
			_, image, done := crashImages(t, old, c.off, p)
			var newer model
			newer.write(0, old)
			newer.write(int(c.off), p)
			dataPath := strings.TrimPrefix(done.dataPath(1, 0), done.Dir())
			for cut := c.off &^ blockMask; cut <= int64(len(newer)); cut += BlockSize {
				// The image: new bytes up to cut, old bytes after.
				torn := append([]byte(nil), newer[:cut]...)
				if len(old) > int(cut) {
					torn = append(torn, old[cut:]...)
				}
				dir := t.TempDir()
				copyTree(t, image, dir)
				if err := os.WriteFile(dir+dataPath, torn, 0o644); err != nil {
					t.Fatal(err)
				}
				tg := openTargetAt(t, dir, Options{})
				assertSame(t, "torn at "+strconv.FormatInt(cut, 10), readAll(t, tg, 1, 0, 1<<20), torn)
				tg.Close()
			}
		})
	}
}

// If the data reaches the disk but its sidecar entries do not (a power cut
// can reorder unsynced writes), the blocks concerned fail verification:
// the engine reports EIO instead of returning bytes it cannot vouch for.
func TestDataWithoutItsChecksumsIsDetected(t *testing.T) {
	for _, c := range crashCases[:3] {
		t.Run(c.name, func(t *testing.T) {
			image, _, done := crashImages(t, pattern(1, c.old), c.off, pattern(2, c.n))
			data := done.dataPath(1, 0)
			b, err := os.ReadFile(data)
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(image+strings.TrimPrefix(data, done.Dir()), b, 0o644)
			tg := openTargetAt(t, image, Options{})
			_, err = tg.Read(1, 0, make([]byte, 1<<20), 0)
			var ce *ChecksumError
			if !errors.As(err, &ce) {
				t.Fatalf("read of new data under old checksums: %v, want a checksum error", err)
			}
		})
	}
}
