package hamatrix

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The issue's resync goal is "no less than half the disk's sequential
// bandwidth while clients keep working". The disk here is whatever holds
// $TMPDIR, where every scenario's targets live, and its speed moves from
// hour to hour on a shared VM; so the matrix measures it in the same run,
// before and after the scenarios, and judges each resync against half
// the fastest figure it saw.

const (
	diskProbeSize  = 1 << 30 // bytes written per measure
	diskProbeBlock = 1 << 20 // like fio's 1 MiB sequential writes
)

// diskSpeed is one measure of the disk under $TMPDIR, in MB/s.
type diskSpeed struct {
	direct   float64 // O_DIRECT writes, then fsync
	buffered float64 // page-cache writes, then fsync (fio's end_fsync)
}

func (d diskSpeed) best() float64 { return max(d.direct, d.buffered) }

// diskBench holds the measures of one matrix run.
type diskBench struct {
	speeds []diskSpeed
	errs   []string
}

// wanted reports whether this run measures the disk: the full matrix and
// any run that writes a report do; the short form CI runs does not.
func (b *diskBench) wanted() bool {
	return fullMatrix() || os.Getenv("HA_MATRIX_REPORT") != ""
}

// measure writes diskProbeSize bytes to $TMPDIR twice (O_DIRECT and
// buffered, each made durable) and records the rates.
func (b *diskBench) measure(t *testing.T) {
	if !b.wanted() {
		return
	}
	var s diskSpeed
	var err error
	if s.direct, err = writeRate(true); err == nil {
		s.buffered, err = writeRate(false)
	}
	if err != nil {
		b.errs = append(b.errs, err.Error())
		t.Logf("measuring the disk: %v", err)
		return
	}
	b.speeds = append(b.speeds, s)
	t.Logf("the disk under %s wrote %.0f MB/s with O_DIRECT, %.0f MB/s buffered with an fsync at the end", os.TempDir(), s.direct, s.buffered)
}

// half is the goal for a resync: half the fastest rate measured; 0 when
// nothing was measured.
func (b *diskBench) half() float64 {
	var best float64
	for _, s := range b.speeds {
		best = max(best, s.best())
	}
	return best / 2
}

// text says what was measured, for the report.
func (b *diskBench) text() string {
	if len(b.speeds) == 0 {
		if len(b.errs) > 0 {
			return "The disk could not be measured: " + strings.Join(b.errs, "; ")
		}
		return ""
	}
	var parts []string
	for _, s := range b.speeds {
		parts = append(parts, fmt.Sprintf("%.0f MB/s with O_DIRECT and %.0f MB/s buffered with an fsync at the end", s.direct, s.buffered))
	}
	return fmt.Sprintf("The disk under the targets ($TMPDIR), measured before and after the scenarios by writing %d MiB in %d KiB writes: %s. Half the fastest figure, the goal for a resync: %.0f MB/s.",
		diskProbeSize>>20, diskProbeBlock>>10, strings.Join(parts, "; then "), b.half())
}

// writeRate writes diskProbeSize bytes to a new file in $TMPDIR, fsyncs
// it and removes it, and returns the rate in MB/s.
func writeRate(direct bool) (float64, error) {
	buf, err := syscall.Mmap(-1, 0, diskProbeBlock, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil { // page-aligned, as O_DIRECT needs
		return 0, err
	}
	defer syscall.Munmap(buf)
	for i := range buf {
		buf[i] = byte(i*7 + 1) // not a page of zeroes
	}
	flags := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if direct {
		flags |= syscall.O_DIRECT
	}
	path := filepath.Join(os.TempDir(), fmt.Sprintf("hamatrix-disk-%d", os.Getpid()))
	f, err := os.OpenFile(path, flags, 0o600)
	if err != nil {
		return 0, err
	}
	defer os.Remove(path)
	defer f.Close()
	start := time.Now()
	for off := 0; off < diskProbeSize; off += diskProbeBlock {
		if _, err := f.Write(buf); err != nil {
			return 0, fmt.Errorf("writing %s: %w", path, err)
		}
	}
	if err := f.Sync(); err != nil {
		return 0, fmt.Errorf("fsync of %s: %w", path, err)
	}
	return float64(diskProbeSize) / 1e6 / time.Since(start).Seconds(), nil
}
