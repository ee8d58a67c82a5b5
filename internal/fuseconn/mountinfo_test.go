package fuseconn

import (
	"strings"
	"testing"
)

// A sample of /proc/self/mountinfo: the root file system, a FUSE mount
// under a path with a space, and two TandemFS mounts stacked on one
// directory.
const sampleMountinfo = `22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
98 22 0:52 / /var/tmp/a\040b rw,nosuid,nodev,relatime shared:50 - fuse.tandem tandem rw,user_id=0,group_id=0,default_permissions,allow_other
99 22 0:53 / /mnt/t rw,nosuid,nodev,relatime shared:51 - fuse.tandem tandem rw,user_id=0,group_id=0
100 99 0:54 / /mnt/t rw,nosuid,nodev,relatime shared:52 - fuse.tandem tandem rw,user_id=0,group_id=0
101 22 0:55 / /mnt/plain rw,relatime - tmpfs tmpfs rw
`

func TestTheMountsDeviceIsFoundInMountinfoWithoutTouchingTheMount(t *testing.T) {
	cases := []struct {
		dir, dev string
		ok       bool
	}{
		{"/var/tmp/a b", "0:52", true}, // octal escapes undone
		{"/mnt/t", "0:54", true},       // the mount on top of the stack
		{"/mnt/t/", "0:54", true},      // cleaned
		{"/mnt/plain", "", false},      // not FUSE
		{"/", "", false},               // not FUSE
		{"/mnt/none", "", false},       // not a mount point
	}
	for _, c := range cases {
		dev, ok := FindFUSE(strings.NewReader(sampleMountinfo), c.dir)
		if dev != c.dev || ok != c.ok {
			t.Errorf("FindFUSE(%q) = %q, %v; want %q, %v", c.dir, dev, ok, c.dev, c.ok)
		}
	}
}

func TestMountinfoEscapesAreUndone(t *testing.T) {
	for in, want := range map[string]string{
		`/a\040b`:       "/a b",
		`/tab\011x`:     "/tab\tx",
		`/back\134s`:    `/back\s`,
		`/plain`:        "/plain",
		`/short\04`:     `/short\04`, // too short to be an escape
		`/notoctal\9zz`: `/notoctal\9zz`,
	} {
		if got := unescapeMountPath(in); got != want {
			t.Errorf("unescapeMountPath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestAConnectionIsNamedByTheKernelsDeviceNumber(t *testing.T) {
	for dev, want := range map[string]uint64{"0:38": 38, "0:1048575": 1048575, "8:1": 8<<20 | 1} {
		if got, err := connectionID(dev); err != nil || got != want {
			t.Errorf("connectionID(%q) = %d, %v; want %d", dev, got, err, want)
		}
	}
	for _, bad := range []string{"", "38", "a:b", "0:-1", "4096:0"} {
		if _, err := connectionID(bad); err == nil {
			t.Errorf("connectionID(%q) took a malformed device number", bad)
		}
	}
}
