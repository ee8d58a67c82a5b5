package fuse

import (
	"fmt"
	"os"
	"strings"
)

// The kernel round trip of every request, over /dev/fuse or over
// io_uring.
//
// Measured on the 2-core development VM (2026-11-26): a request whose
// reply wakes the caller on another CPU costs about 55 µs there, one that
// stays on the caller's CPU about 3 µs (a wake-up across CPUs is an
// inter-processor interrupt, which a virtual machine pays dearly for).
// Over /dev/fuse the kernel hands a request to whichever reader thread
// waits first, on any CPU; FUSE over io_uring (Linux 6.14+) queues it on
// the CPU of the caller, where go-fuse's ring workers (pinned, one set
// per CPU) serve it (third_party/go-fuse/fuse/ring_linux.go).

// IoUringMode says whether a mount serves the kernel over io_uring.
type IoUringMode string

const (
	// IoUringOn serves over io_uring where the kernel has it, turning
	// the fuse module's enable_uring parameter on first (root), and
	// over /dev/fuse elsewhere: the default.
	IoUringOn IoUringMode = "on"
	// IoUringOff keeps to /dev/fuse.
	IoUringOff IoUringMode = "off"
)

// What the ring costs (docs/benchmarks.md, the notes of 2026-11-26):
// large sequential reads lose 15-20 % (the reply's data is copied once
// more, into the ring's buffer), against about half again as many
// creates and several times the small random reads. A CPU's queue whose
// every entry waits long (lock waits) could hold up later requests of
// that CPU for good; the ring's watch (in go-fuse, ring_stall_linux.go)
// gets them served.

// EnableUringParam is the fuse module's machine-wide switch for FUSE over
// io_uring.
const EnableUringParam = "/sys/module/fuse/parameters/enable_uring"

// ParseIoUringMode checks a --io-uring value ("" is on).
func ParseIoUringMode(s string) (IoUringMode, error) {
	switch m := IoUringMode(s); m {
	case "":
		return IoUringOn, nil
	case IoUringOn, IoUringOff:
		return m, nil
	}
	return "", fmt.Errorf("--io-uring %q: want on or off", s)
}

// prepareIoUring reports whether to ask the kernel for io_uring, turning
// the module parameter on first. logf tells of what it did or could not
// do.
func prepareIoUring(mode IoUringMode, logf func(string, ...any)) bool {
	if mode != IoUringOn {
		return false
	}
	cur, err := os.ReadFile(EnableUringParam)
	if err != nil {
		logf("FUSE over io_uring: this kernel has no %s (Linux 6.14+ built with CONFIG_FUSE_IO_URING); serving over /dev/fuse", EnableUringParam)
		return false
	}
	if strings.TrimSpace(string(cur)) == "Y" {
		return true
	}
	if err := os.WriteFile(EnableUringParam, []byte("Y\n"), 0o644); err != nil {
		logf("FUSE over io_uring: turning on %s: %v; serving over /dev/fuse", EnableUringParam, err)
		return false
	}
	logf("FUSE over io_uring: turned on %s", EnableUringParam)
	return true
}

// EnableUring turns the fuse module's machine-wide enable_uring parameter
// on (root); changed says it was off. `tandem up` does so before starting
// its mount, to say that it did and to let `tandem down` turn it back.
func EnableUring() (changed bool, err error) {
	cur, err := os.ReadFile(EnableUringParam)
	if err != nil {
		return false, err
	}
	if strings.TrimSpace(string(cur)) == "Y" {
		return false, nil
	}
	return true, os.WriteFile(EnableUringParam, []byte("Y\n"), 0o644)
}

// DisableUring turns the parameter off. Mounts still served over
// io_uring then fail their next ring command: call it only when no FUSE
// mount is left.
func DisableUring() error {
	return os.WriteFile(EnableUringParam, []byte("N\n"), 0o644)
}
