package storage

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// A new target asks ext4 to spread its bucket directories over the disk
// (spread.go), also through the fault-injecting file system the failure
// tests use; where the file system has no such flag the target opens all
// the same.
func TestANewTargetMarksItsChunksDirectoryAsATopDirectory(t *testing.T) {
	onEachFS(t, func(t *testing.T, tg *Target) {
		chunks := filepath.Join(tg.Dir(), "chunks")
		top, err := isTopDir(chunks)
		if unsupported(err) {
			t.Skipf("the file system under %s has no inode flags: %v", chunks, err)
		}
		if err != nil {
			t.Fatal(err)
		}
		if !top {
			t.Errorf("%s lacks FS_TOPDIR_FL", chunks)
		}
		mustWrite(t, tg, 7, 0, 0, pattern(1, 8192))
		assertSame(t, "chunk", readAll(t, tg, 7, 0, 8192), pattern(1, 8192))
	})
}

func unsupported(err error) bool {
	return errors.Is(err, syscall.ENOTTY) || errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.EINVAL)
}

// Marking is idempotent and leaves the directory's other flags alone.
func TestMarkingATopDirectoryTwiceKeepsItMarked(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "d")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := (OSFS{}).MarkTopDir(sub); unsupported(err) {
			t.Skipf("no inode flags here: %v", err)
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if top, err := isTopDir(sub); err != nil || !top {
		t.Fatalf("TopDir = %v, %v; want true", top, err)
	}
	if top, err := isTopDir(dir); err != nil || top {
		t.Fatalf("the parent: TopDir = %v, %v; want false", top, err)
	}
}

// isTopDir reports whether the directory name carries FS_TOPDIR_FL.
func isTopDir(name string) (bool, error) {
	d, err := os.Open(name)
	if err != nil {
		return false, err
	}
	defer d.Close()
	flags, err := unix.IoctlGetUint32(int(d.Fd()), unix.FS_IOC_GETFLAGS)
	if err != nil {
		return false, &os.PathError{Op: "get inode flags", Path: name, Err: err}
	}
	return flags&fsTopDirFlag != 0, nil
}
