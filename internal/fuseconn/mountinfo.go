// Package fuseconn finds FUSE mounts without touching them, and aborts
// their kernel connections.
//
// Both matter when the process serving a mount is stuck or being stopped:
// a stat(2) of the mount point is a request to that process, which may
// never answer, while /proc/self/mountinfo and fusectl do not involve it.
package fuseconn

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Device returns the device number ("major:minor") of the FUSE mount at
// dir (absolute, without symbolic links) from /proc/self/mountinfo.
func Device(dir string) (dev string, ok bool) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", false
	}
	defer f.Close()
	return FindFUSE(f, dir)
}

// FindFUSE returns the device number ("major:minor") of the last
// FUSE mount at dir listed in mountinfo (proc(5)): the one on top, where
// several are stacked.
func FindFUSE(mountinfo io.Reader, dir string) (dev string, ok bool) {
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
