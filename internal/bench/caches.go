package bench

import (
	"fmt"
	"os"
	"syscall"
)

// dropCachesFile is where the kernel takes orders to drop its caches.
const dropCachesFile = "/proc/sys/vm/drop_caches"

// DropCaches does `sync; echo 3 > /proc/sys/vm/drop_caches` so that a read
// phase measures the storage rather than this host's page cache. It
// returns a note saying why it could not, or "" when it did.
func DropCaches() string {
	if os.Geteuid() != 0 {
		return "page cache not dropped before reads: not running as root"
	}
	syscall.Sync()
	if err := os.WriteFile(dropCachesFile, []byte("3\n"), 0); err != nil {
		return fmt.Sprintf("page cache not dropped before reads: %v", err)
	}
	return ""
}
