package fuse

import (
	"fmt"
	"os"
)

// readaheadKB is the kernel readahead window asked for on the mount. FUSE
// only ever lowers the default of 128 KiB, which makes the kernel read in
// 128 KiB requests; 1 MiB lets each request carry a whole default chunk
// (measured with dd on a 2 GiB file: 600 MB/s at 128 KiB, 730-880 at 1 MiB,
// less again at 4 MiB and above, where requests queue behind each other).
const readaheadKB = 1024

// setReadahead sets read_ahead_kb of the backing device dev ("major:minor")
// of a FUSE mount, as `blockdev --setra` would for a disk. Failure only
// costs speed.
func setReadahead(dev string, kb int) {
	os.WriteFile(fmt.Sprintf("/sys/class/bdi/%s/read_ahead_kb", dev), []byte(fmt.Sprintf("%d\n", kb)), 0o644)
}
