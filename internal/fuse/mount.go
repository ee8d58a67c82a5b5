package fuse

import (
	"fmt"
	"os"

	gofuse "github.com/hanwen/go-fuse/v2/fuse"

	"tandemfs/internal/client"
)

// MountOptions tune the kernel side of a mount.
type MountOptions struct {
	Debug bool
}

// Mount mounts c at dir and returns the running server; call Wait to serve
// until unmounted, and Unmount to detach.
func Mount(c *client.Client, dir string, o MountOptions) (*gofuse.Server, error) {
	root := os.Geteuid() == 0
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
		// With KILLPRIV_V2 the kernel tells us when a write must clear
		// set-user-ID bits instead of asking for security.capability
		// before every single write (a round trip per write).
		ExtraCapabilities: gofuse.CAP_HANDLE_KILLPRIV_V2,
	}
	srv, err := gofuse.NewServer(New(c), dir, opts)
	if err != nil {
		return nil, fmt.Errorf("mounting %s: %w", dir, err)
	}
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		srv.Unmount()
		return nil, fmt.Errorf("mounting %s: %w", dir, err)
	}
	return srv, nil
}
