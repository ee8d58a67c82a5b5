package fuse

import (
	"fmt"

	gofuse "github.com/hanwen/go-fuse/v2/fuse"

	"tandemfs/internal/fuseconn"
)

// Aborting the mount's own FUSE connection before the process ends.
//
// go-fuse's ring pumps (third_party/go-fuse/fuse/ring_stall_linux.go)
// open a file on this very mount from this process, and the kernel's
// path walk asks the file system for the root's attributes on the way,
// which the client may answer only after the metadata service does. A
// request the kernel has handed to a ring worker cannot be interrupted,
// not even by SIGKILL: its thread waits for the answer. A process that
// ends with such a request out never ends: its thread waits for an answer
// only the process could give, and the connection stays open as long as
// the process holds its descriptors, which it does until that thread is
// gone. Seen on 2026-11-28: the metadata service killed under a create
// loop, the mount detached lazily and sent SIGTERM, and the mount was left
// with nine threads in D state and its main thread a zombie until the
// connection was aborted by hand through fusectl. So before the process
// ends for good, it aborts its connection: every request still out fails
// (ENOTCONN to the applications, which a lazily detached or forcibly
// stopped mount gives them anyway) and every thread can end.

// Mounted is a running mount.
type Mounted struct {
	*gofuse.Server
	// where is the mount point, absolute and without symbolic links.
	where string
	// dev is the mount's device number, "major:minor", which names its
	// connection under fusectl.
	dev string
}

// Attached reports whether the mount is still in this process's mount
// namespace, where an unmount can reach it (not detached lazily).
func (m *Mounted) Attached() bool {
	dev, ok := fuseconn.Device(m.where)
	return ok && dev == m.dev
}

// Abort ends the mount's FUSE connection: the kernel fails every request
// still out or to come. For a process about to end, see above.
func (m *Mounted) Abort() error {
	if m.dev == "" {
		return fmt.Errorf("the mount's device number is unknown")
	}
	return fuseconn.Abort(m.dev)
}
