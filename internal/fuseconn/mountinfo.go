// Package fuseconn finds mounts, FUSE ones above all, without touching
// them, and aborts FUSE mounts' kernel connections.
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
	m, ok := findMount(mountinfo, dir, isFUSE)
	return m.Dev, ok
}

// Mount is one line of mountinfo.
type Mount struct {
	Dev    string // "major:minor"
	FSType string // "fuse.tandem", "ext4", ...
	Source string
}

// MountedAt returns the mount on top at dir (absolute, without symbolic
// links), of any type, from /proc/self/mountinfo.
func MountedAt(dir string) (Mount, bool) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return Mount{}, false
	}
	defer f.Close()
	return findMount(f, dir, func(string) bool { return true })
}

// FUSEMounts lists the mount points of every FUSE mount this process
// sees.
func FUSEMounts() []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var dirs []string
	eachMount(f, func(dir string, m Mount) {
		if isFUSE(m.FSType) {
			dirs = append(dirs, dir)
		}
	})
	return dirs
}

func isFUSE(fstype string) bool { return fstype == "fuse" || strings.HasPrefix(fstype, "fuse.") }

// findMount returns the last mount at dir whose file system type is
// wanted.
func findMount(mountinfo io.Reader, dir string, wanted func(fstype string) bool) (m Mount, ok bool) {
	dir = filepath.Clean(dir)
	eachMount(mountinfo, func(at string, mm Mount) {
		if wanted(mm.FSType) && at == dir {
			m, ok = mm, true
		}
	})
	return m, ok
}

// eachMount calls f with every mount point in mountinfo (proc(5)) and
// what is mounted there, in the file's order.
func eachMount(mountinfo io.Reader, f func(dir string, m Mount)) {
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
		if sep < 0 || sep+2 >= len(fields) {
			continue
		}
		f(unescapeMountPath(fields[4]), Mount{Dev: fields[2], FSType: fields[sep+1], Source: unescapeMountPath(fields[sep+2])})
	}
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
