package fuse

import (
	"fmt"
	"os"
	"path/filepath"

	gofuse "github.com/hanwen/go-fuse/v2/fuse"

	"tandemfs/internal/client"
	"tandemfs/internal/fuseconn"
	"tandemfs/internal/osthread"
)

// MountOptions tune the kernel side of a mount.
type MountOptions struct {
	Debug bool
	// IoUring says whether to serve the kernel over io_uring (uring.go);
	// empty means off.
	IoUring IoUringMode
	// Logf tells of the transport chosen (default: nowhere).
	Logf func(string, ...any)
}

// Mount mounts c at dir and returns the running server; call Wait to serve
// until unmounted, Unmount to detach, and Abort before the process ends
// while it is still mounted or still has users (abort.go).
func Mount(c *client.Client, dir string, o MountOptions) (*Mounted, error) {
	root := os.Geteuid() == 0
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	opts := &gofuse.MountOptions{
		FsName:        "tandem",
		Name:          "tandem",
		AllowOther:    root,
		MaxWrite:      1 << 20,
		MaxReadAhead:  1 << 20,
		MaxBackground: 64,
		// The kernel checks permissions from the attributes we return,
		// for every user, as on a local file system.
		Options: []string{"default_permissions"},
		// As root, mount with mount(2) directly: no fusermount needed.
		DirectMount: root,
		Debug:       o.Debug,
		// Never let the kernel bypass the client (FUSE passthrough):
		// TandemFS data lives on remote targets.
		DisabledCapabilities: gofuse.CAP_PASSTHROUGH,
		// Reads reply from memory; splicing them through a pipe is an
		// extra copy, and a 1 MiB reply plus its header does not fit the
		// default pipe, which made go-fuse fall back and log every read.
		DisableSplice: true,
		// With KILLPRIV_V2 the kernel tells us when a write must clear
		// set-user-ID bits instead of asking for security.capability
		// before every single write (a round trip per write).
		ExtraCapabilities: gofuse.CAP_HANDLE_KILLPRIV_V2 |
			// POSIX ACLs: the kernel enforces them and leaves the umask
			// to us, since a directory's default ACL replaces it; the
			// metadata service applies both (internal/meta/acl.go).
			gofuse.CAP_DONT_MASK | gofuse.CAP_SETXATTR_EXT,
		EnableAcl: true,
		// fcntl and flock locks are the cluster's, not this kernel's
		// alone (locks.go).
		EnableLocks: true,
		IoUring:     prepareIoUring(o.IoUring, logf),
		// A ring worker's thread is its own: the client's calls made
		// there wait for their replies in poll(2) (rpc.conn.awaitReply).
		OnIoUringWorker: osthread.Dedicate,
	}
	// Resolved before mounting: once mounted, resolving the mount point
	// would be a request to this process itself.
	where, err := absoluteRealPath(dir)
	if err != nil {
		return nil, fmt.Errorf("mounting %s: %w", dir, err)
	}
	fs := New(c)
	srv, err := gofuse.NewServer(fs, dir, opts)
	if err != nil {
		return nil, fmt.Errorf("mounting %s: %w", dir, err)
	}
	// Changes other clients make reach the kernel's caches at once.
	fs.kernel.notify = srv
	c.SetInvalidator(fs.kernel)
	go srv.Serve()
	// Not WaitMount: its poll hack opens a file on this mount, a request
	// to this process itself, which was once never answered at start-up
	// over io_uring, leaving a thread, and so the process, that could not
	// end even when killed (CI, 2026-11-27). The client never opens files
	// on its own mount, which is what the hack guards against.
	if err := srv.WaitMounted(); err != nil {
		srv.Unmount()
		return nil, fmt.Errorf("mounting %s: %w", dir, err)
	}
	// From /proc/self/mountinfo, not from a stat of the mount point: that
	// stat is a request to this very process, made as it starts serving.
	// Over io_uring such a request was once never answered, leaving the
	// process unkillable (CI, 2026-11-27), and while it is in flight an
	// unmount of the new mount fails with EBUSY.
	dev, _ := fuseconn.Device(where)
	if root && dev != "" {
		setReadahead(dev, readaheadKB)
	}
	fs.ioUring = srv.IoUring
	if opts.IoUring {
		logf("FUSE over io_uring: asked of the kernel; in use once every CPU's queue is registered (user.tandem.client shows the transport)")
	}
	return &Mounted{Server: srv, where: where, dev: dev}, nil
}

// absoluteRealPath is dir as mountinfo names a mount on it: absolute, its
// symbolic links resolved.
func absoluteRealPath(dir string) (string, error) {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	return filepath.Abs(real)
}
