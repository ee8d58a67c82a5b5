package bench

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
	"tandemfs/internal/testenv"
)

// readOnlyDir returns a directory nobody may create files in. Permission
// bits do not stop root, so as root it mounts a read-only tmpfs, and
// skips the test where that is not allowed.
func readOnlyDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if os.Geteuid() != 0 {
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(dir, 0o755) })
		return dir
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_RDONLY, "size=1m"); err != nil {
		testenv.Unavailable(t, "cannot mount a read-only tmpfs as root: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, 0) })
	return dir
}
