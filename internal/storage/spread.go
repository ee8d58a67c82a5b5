package storage

import (
	"os"

	"golang.org/x/sys/unix"
)

// Spreading a target's chunk files over the disk.
//
// A target keeps its chunks in chunks/hh/ino/ (hh the bucket, see
// inventory.go), and ext4 puts a new file in its directory's block group
// and a new subdirectory in its parent's, so every chunk file of a target
// would share the group of the target's directory. On ext4 without a
// journal that group becomes slow to create files in once many files in it
// were deleted: ext4 then avoids reusing an inode freed in the last minute
// or five, and every create walks past all of them (find_inode_bit and
// recently_deleted in fs/ext4/ialloc.c). Measured on the development VM,
// whose root file system has no journal: 6,500-8,000 creates/s in a group
// that a previous run had just emptied, and 28,000-50,000/s with the same
// files spread as below (python, 8,000 files in 64 subdirectories, four
// runs each, alternated). A resync creates two files per chunk on the
// returning member, and there the walk took about a fifth of the machine's
// CPU (perf).
//
// So a new target marks its chunks directory as the top of a directory
// hierarchy (chattr +T, FS_TOPDIR_FL): ext4's Orlov allocator then places
// each bucket directory in a different block group, as it does for
// directories under the root, and the chunk files, and the deletes, of
// different buckets land in different groups. File systems without the
// flag (XFS, tmpfs, btrfs) refuse or ignore it; they spread directories
// their own way.

// fsTopDirFlag is FS_TOPDIR_FL of linux/fs.h, which x/sys/unix lacks.
const fsTopDirFlag = 0x00020000

// topDirMarker is an FS that can ask the file system to spread the
// subdirectories of a directory over the disk.
type topDirMarker interface {
	MarkTopDir(name string) error
}

// markTopDir sets the top-directory hint on dir where fsys supports it;
// an error means only that the hint is not there (the target works the
// same without it), so callers may ignore it.
func markTopDir(fsys FS, dir string) error {
	m, ok := fsys.(topDirMarker)
	if !ok {
		return nil
	}
	return m.MarkTopDir(dir)
}

// MarkTopDir sets FS_TOPDIR_FL on the directory name.
func (OSFS) MarkTopDir(name string) error {
	d, err := os.Open(name)
	if err != nil {
		return err
	}
	defer d.Close()
	fd := int(d.Fd())
	flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	if err != nil {
		return &os.PathError{Op: "get inode flags", Path: name, Err: err}
	}
	if flags&fsTopDirFlag != 0 {
		return nil
	}
	if err := unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(flags|fsTopDirFlag)); err != nil {
		return &os.PathError{Op: "set inode flags", Path: name, Err: err}
	}
	return nil
}
