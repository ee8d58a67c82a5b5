package storage

import (
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// Large writes go through the page cache with RWF_DONTCACHE (Linux 6.14
// and later, on file systems that support it, ext4 among them):
// the write returns once its data is in the page cache, as a buffered
// write does, the kernel starts writing it to the disk at once, and drops
// the pages when that is done. So a stream of writes reuses the same few
// pages instead of filling the page cache with data that readers get from
// their clients' caches, and it never waits for the disk as an O_DIRECT
// write does.
//
// Why: on the development VM a page the page cache takes fresh costs a
// fault in the hypervisor (free guest memory is handed back to the host),
// while a page just freed is cheap to take again. Python writing 1 GiB in
// 1 MiB pieces after drop_caches (2026-11-27): 0.79-2.03 ms of CPU per
// MiB buffered, 0.17-0.20 with RWF_DONTCACHE, 51 MiB cached at the end
// instead of 1.1 GiB; 256 MiB buffered cost 0.13 ms/MiB, as it fit into
// the pages drop_caches had just freed. A one-machine cluster with two
// copies (fresh clusters, alternated): fio's first sequential write of
// 256 MiB ran at 190-221 MB/s against 168-197 when only the members
// bypassed the page cache (O_DIRECT, direct.go), a 1 GiB write at 313-452
// against 222-266, and a 1 GiB resync under a client's writes at 367-438
// against 301-330. On bare metal fresh pages cost nothing extra, but a
// storage server's page cache is still better spent on small files and
// blocks than on streams its clients do not read back from it.
//
// Smaller writes keep the page cache (a 4 KiB write that is read back or
// rewritten soon gains from it); where the kernel or file system cannot
// drop behind, the target falls back to O_DIRECT for the writes that may
// bypass the page cache (direct.go) and to plain buffered writes for the
// rest, and says so once in its log.
const dropBehindMin = 64 << 10

// dropBehindWriter is a File that can write with RWF_DONTCACHE. It fails
// with an error satisfying errors.Is(err, unix.EOPNOTSUPP), having written
// nothing, where the kernel or the file system cannot.
type dropBehindWriter interface {
	WriteDropBehind(b []byte, off int64) (int, error)
}

// WriteDropBehind writes b at off with pwritev2(RWF_DONTCACHE).
func (f *osFile) WriteDropBehind(b []byte, off int64) (int, error) {
	rc, err := f.File.SyscallConn()
	if err != nil {
		return 0, err
	}
	done := 0
	var werr error
	cerr := rc.Write(func(fd uintptr) bool {
		for done < len(b) && werr == nil {
			var n int
			n, werr = unix.Pwritev2(int(fd), [][]byte{b[done:]}, off+int64(done), unix.RWF_DONTCACHE)
			if werr == unix.EINTR {
				werr = nil
				continue
			}
			if werr == nil && n == 0 {
				werr = syscall.EIO // no progress and no error: never loop forever
			}
			done += n
		}
		return true
	})
	if cerr != nil {
		return done, cerr
	}
	if werr != nil {
		return done, fmt.Errorf("pwritev2 %s (RWF_DONTCACHE): %w", f.File.Name(), werr)
	}
	return done, nil
}

// writeDropBehind writes buf at off of ch's data file with RWF_DONTCACHE
// if it is large enough and the target can; ok is false when the write
// must be made some other way (nothing was written then).
func (t *Target) writeDropBehind(ch *chunk, buf []byte, off int64) (ok bool, err error) {
	w, can := ch.data.(dropBehindWriter)
	if !can || len(buf) < dropBehindMin || t.noDropBehind.Load() {
		return false, nil
	}
	_, err = w.WriteDropBehind(buf, off)
	if errors.Is(err, unix.EOPNOTSUPP) {
		if !t.noDropBehind.Swap(true) {
			t.logf("storage: target %s: large writes fill the page cache: %v (RWF_DONTCACHE needs Linux 6.14 or later and a file system that supports it)", t.dir, err)
		}
		return false, nil
	}
	return true, err
}
