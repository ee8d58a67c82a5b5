// Package pagecache answers questions about the kernel's page cache that
// tests of the storage servers ask: how many pages of a file it holds, and
// whether a file system takes writes that leave it (RWF_DONTCACHE).
package pagecache

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Resident counts the pages of the file at path in the page cache
// (mincore(2) of a mapping of it; an empty file has none).
func Resident(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return 0, err
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0, fmt.Errorf("mmap %s: %w", path, err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, (len(m)+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		return 0, fmt.Errorf("mincore %s: %w", path, errno)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n, nil
}

// CanDropBehind reports whether the kernel and the file system of dir take
// writes with RWF_DONTCACHE, by writing a probe file there.
func CanDropBehind(dir string) (bool, error) {
	f, err := os.CreateTemp(dir, ".dontcache-probe")
	if err != nil {
		return false, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	_, err = unix.Pwritev2(int(f.Fd()), [][]byte{make([]byte, 4096)}, 0, unix.RWF_DONTCACHE)
	if errors.Is(err, unix.EOPNOTSUPP) {
		return false, nil
	}
	return err == nil, err
}
