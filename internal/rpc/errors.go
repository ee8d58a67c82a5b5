package rpc

import (
	"errors"
	"fmt"
	"syscall"
)

// Error is an error reply from a server: a POSIX errno that the client can
// hand to the kernel unchanged, plus a message for logs and humans.
type Error struct {
	Errno syscall.Errno
	Msg   string
}

func (e *Error) Error() string {
	if e.Msg == "" {
		return e.Errno.Error()
	}
	return e.Msg
}

// Is lets errors.Is(err, syscall.ENOENT) match a remote ENOENT.
func (e *Error) Is(target error) bool {
	t, ok := target.(syscall.Errno)
	return ok && t == e.Errno
}

// Errorf builds an Error with a formatted message.
func Errorf(errno syscall.Errno, format string, args ...any) error {
	return &Error{Errno: errno, Msg: fmt.Sprintf(format, args...)}
}

// ErrnoOf maps any error to the errno a file system call should return.
func ErrnoOf(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var re *Error
	if errors.As(err, &re) {
		return re.Errno
	}
	var en syscall.Errno
	if errors.As(err, &en) {
		return en
	}
	return syscall.EIO
}

// NetError wraps a failure to reach a server or a connection that broke
// mid-call. The request may or may not have been executed.
type NetError struct {
	Addr string
	Err  error
}

func (e *NetError) Error() string { return fmt.Sprintf("server %s: %v", e.Addr, e.Err) }
func (e *NetError) Unwrap() error { return e.Err }

// IsNetError reports whether err is a transport failure (as opposed to an
// answer from the server), i.e. whether retrying elsewhere or later may help.
func IsNetError(err error) bool {
	var ne *NetError
	return errors.As(err, &ne)
}
