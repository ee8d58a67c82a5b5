package fuse

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// readaheadKB is the kernel readahead window asked for on the mount. FUSE
// only ever lowers the default of 128 KiB, which makes the kernel read in
// 128 KiB requests; 1 MiB lets each request carry a whole default chunk
// (measured with dd on a 2 GiB file: 600 MB/s at 128 KiB, 730-880 at 1 MiB,
// less again at 4 MiB and above, where requests queue behind each other).
const readaheadKB = 1024

// setReadahead sets read_ahead_kb of the backing device of the FUSE mount
// at dir (an absolute path without symlinks), as `blockdev --setra` would
// for a disk. Failure only costs speed.
//
// The device number comes from /proc/self/mountinfo, not from a stat of
// dir: that stat is a request to this very process, made as it starts
// serving. Over io_uring such a request was once never answered, leaving
// the process unkillable (CI, 2026-11-27), and while it is in flight an
// unmount of the new mount fails with EBUSY.
func setReadahead(dir string, kb int) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	defer f.Close()
	dev, ok := fuseMountDevice(f, dir)
	if !ok {
		return
	}
	os.WriteFile(fmt.Sprintf("/sys/class/bdi/%s/read_ahead_kb", dev), []byte(fmt.Sprintf("%d\n", kb)), 0o644)
}

// fuseMountDevice returns the device number ("major:minor") of the last
// FUSE mount at dir listed in mountinfo (proc(5)): the one on top, where
// several are stacked.
func fuseMountDevice(mountinfo io.Reader, dir string) (dev string, ok bool) {
	dir = filepath.Clean(dir)
	sc := bufio.NewScanner(mountinfo)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		// ID parent major:minor root mount-point options [optional...] - fstype source super-options
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" && i >= 6 {
				sep = i
				break
			}
		}
		if sep < 0 || sep+1 >= len(fields) {
			continue
		}
		fstype := fields[sep+1]
		if (fstype == "fuse" || strings.HasPrefix(fstype, "fuse.")) && unescapeMountPath(fields[4]) == dir {
			dev, ok = fields[2], true
		}
	}
	return dev, ok
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space,
// \011, \012, \134) in a path.
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
