package fuse

import "testing"

func TestIoUringModeIsOnOrOffAndOnByDefault(t *testing.T) {
	for in, want := range map[string]IoUringMode{"": IoUringOn, "off": IoUringOff, "on": IoUringOn} {
		if got, err := ParseIoUringMode(in); err != nil || got != want {
			t.Errorf("ParseIoUringMode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"auto", "yes", "ON"} {
		if _, err := ParseIoUringMode(bad); err == nil {
			t.Errorf("ParseIoUringMode(%q) took it", bad)
		}
	}
}

func TestOffNeverAsksTheKernelForTheRing(t *testing.T) {
	if prepareIoUring(IoUringOff, t.Logf) {
		t.Fatal("--io-uring off asked for io_uring")
	}
}
