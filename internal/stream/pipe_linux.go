package stream

import (
	"os"
	"syscall"
)

// fSetPipeSize is F_SETPIPE_SZ, which package syscall does not define.
const fSetPipeSize = 1031

// GrowPipe enlarges the kernel buffer of f, if f is a pipe, to 1 MiB (or as
// much as the system allows an unprivileged process). With the default 64
// KiB buffer every 1 MiB write wakes the reader sixteen times, and
// `tandem stream gen | tandem stream check` spends more time switching than
// generating and checking; a 1 MiB buffer doubles its throughput. Failure is
// harmless and ignored: the pipe just stays small.
func GrowPipe(f *os.File) {
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		return
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	// Control, not Fd: Fd would switch the file to blocking mode.
	rc.Control(func(fd uintptr) {
		for size := 1 << 20; size >= 128<<10; size >>= 1 {
			if _, _, errno := syscall.Syscall(syscall.SYS_FCNTL, fd, fSetPipeSize, uintptr(size)); errno == 0 {
				return
			}
		}
	})
}
