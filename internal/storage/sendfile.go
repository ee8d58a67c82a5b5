package storage

import (
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// Sending chunk data without reading it. A resync's head used to read each
// piece into memory (a copy out of the page cache, and a checksum check of
// every block) and write it to the member's socket (a second copy): on the
// 2-core test VM that was half of the head's CPU during a resync under the
// failure matrix's load (docs/ha.md). SendPiece instead hands the chunk's
// file to the caller, which sends the bytes with sendfile(2) together with
// the head's checksum entries for them; the member checks every block
// against those entries before writing it (WriteChecked), so a block
// damaged on the head's disk or on the way is still refused, as the head's
// own check refused it before.

// errNoSendfile says a file cannot be sent from; the caller reads instead.
var errNoSendfile = errors.New("this file system's files cannot be sent with sendfile")

// fileSender is a File the kernel can send bytes from to a socket: send
// runs with its descriptor, which stays open meanwhile.
type fileSender interface {
	SendFrom(send func(fd int) error) error
}

func (f *osFile) SendFrom(send func(fd int) error) error {
	rc, err := f.File.SyscallConn()
	if err != nil {
		return err
	}
	var sendErr error
	if err := rc.Control(func(fd uintptr) { sendErr = send(int(fd)) }); err != nil {
		return err
	}
	return sendErr
}

// SendPiece runs send under chunk (ino, idx)'s read lock with the
// descriptor of its data file, the length n of the chunk's piece of at
// most max bytes at off (a block boundary), and the checksum entries of
// the piece's blocks, and returns n. A missing chunk, or one that ends at
// or before off, has no piece: n is 0 and send does not run. Where the
// target's file system cannot send from its files the error wraps
// errNoSendfile, and the caller reads with Read instead.
func (t *Target) SendPiece(ino, idx uint64, off int64, max int, send func(fd, n int, sums []byte) error) (int, error) {
	if off < 0 || off&blockMask != 0 || max <= 0 {
		return 0, syscall.EINVAL
	}
	k := chunkKey{ino, idx}
	var n int
	err := t.withChunk(k, false, false, func(ch *chunk) error {
		if ch == nil || off >= ch.size {
			return nil
		}
		s, ok := ch.data.(fileSender)
		if !ok {
			return errNoSendfile
		}
		n = int(min(int64(max), ch.size-off))
		eb := getBuf(int(blocksIn(int64(n))) * entrySize)
		defer putBuf(eb)
		if err := ch.readEntries(*eb, off/BlockSize); err != nil {
			return err
		}
		return s.SendFrom(func(fd int) error { return send(fd, n, *eb) })
	})
	return n, t.chunkErr("send", k, err)
}

// OpenPiece is SendPiece for a reader that checks the bytes itself: it
// returns a new descriptor of the chunk's data file, which the caller
// closes, the length n of the piece of at most max bytes at off, and the
// checksum entries of its blocks appended to sums. A chunk without a piece
// there gives n 0 and fd -1. The descriptor stays valid whatever happens
// to the chunk; bytes read from it after a write changed them do not
// match the entries, and the reader then reads again (OpChunkRead).
func (t *Target) OpenPiece(ino, idx uint64, off int64, max int, sums []byte) (fd, n int, _ []byte, err error) {
	fd = -1
	n, err = t.SendPiece(ino, idx, off, max, func(src, _ int, entries []byte) error {
		d, err := unix.FcntlInt(uintptr(src), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("dup: %w", err)
		}
		fd, sums = d, append(sums, entries...)
		return nil
	})
	if err != nil && fd >= 0 {
		unix.Close(fd)
		fd = -1
	}
	return fd, n, sums, err
}

// isHole reports whether the n bytes at off of the file fd hold no data
// at all (SEEK_DATA finds none before their end): a hole, which a copy can
// leave out. Where the file system cannot tell, it is not a hole.
func isHole(fd int, off int64, n int) bool {
	d, err := unix.Seek(fd, off, unix.SEEK_DATA)
	return err == unix.ENXIO || (err == nil && d >= off+int64(n))
}
