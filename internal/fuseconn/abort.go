package fuseconn

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// fusectlDir is where fusectl is usually mounted.
const fusectlDir = "/sys/fs/fuse/connections"

// Abort ends the FUSE connection of the mount with device dev
// ("major:minor"): the kernel fails every request still out or to come,
// and the serving process's threads that wait for one of them can end.
// It writes to the connection's abort file under fusectl, which it mounts
// at its usual place first where nothing is mounted there (as on the
// development VM; systemd mounts it at boot elsewhere) and leaves there:
// a mount in a place of its own could outlive a process that ends as soon
// as the abort takes effect. That takes root.
func Abort(dev string) error {
	id, err := connectionID(dev)
	if err != nil {
		return err
	}
	if err := writeAbort(fusectlDir, id); err == nil {
		return nil
	}
	if err := unix.Mount("fusectl", fusectlDir, "fusectl", 0, ""); err != nil && err != unix.EBUSY {
		return fmt.Errorf("mounting fusectl at %s to abort FUSE connection %d: %w", fusectlDir, id, err)
	}
	return writeAbort(fusectlDir, id)
}

func writeAbort(dir string, id uint64) error {
	return os.WriteFile(filepath.Join(dir, strconv.FormatUint(id, 10), "abort"), []byte("1\n"), 0o200)
}

// connectionID is the name fusectl gives the connection of the FUSE mount
// with device dev: the kernel's device number, major<<20 | minor.
func connectionID(dev string) (uint64, error) {
	maj, min, ok := strings.Cut(dev, ":")
	major, err1 := strconv.ParseUint(maj, 10, 12)
	minor, err2 := strconv.ParseUint(min, 10, 20)
	if !ok || err1 != nil || err2 != nil {
		return 0, fmt.Errorf("device number %q is not major:minor", dev)
	}
	return major<<20 | minor, nil
}
