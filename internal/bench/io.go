package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"time"
	"unsafe"
)

// ioPath is worker w's file in the seq and rand tests (N-to-N: one each).
func ioPath(s *Spec, w int) string {
	return filepath.Join(s.Root, fmt.Sprintf("%s.%d", s.Test, w))
}

// fill gives each worker's data a distinct, non-zero pattern so that no
// layer can take it for a hole or deduplicate it across workers.
func fill(b []byte, w int) {
	for i := range b {
		b[i] = byte(i*31 + w*7 + 1)
	}
}

// seqWrite is iozone -i0 -c -e: open, write the file record by record,
// then fsync and close, all inside the timing.
func seqWrite(ctx context.Context, s *Spec, w int, c *Counter) (WorkerResult, error) {
	buf := make([]byte, s.Record)
	fill(buf, w)
	f, err := os.OpenFile(ioPath(s, w), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return WorkerResult{}, err
	}
	var r WorkerResult
	for r.Bytes < s.FileSize {
		if err := ctx.Err(); err != nil {
			f.Close()
			return r, err
		}
		n, err := f.Write(buf)
		r.Ops, r.Bytes = r.Ops+1, r.Bytes+uint64(n)
		c.add(1, uint64(n))
		if err != nil {
			f.Close()
			return r, err
		}
	}
	return r, syncClose(f)
}

func syncClose(f *os.File) error {
	err := f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// seqRead is iozone -i1 -c: read the whole file back, close included.
func seqRead(ctx context.Context, s *Spec, w int, c *Counter) (WorkerResult, error) {
	buf := make([]byte, s.Record)
	f, err := os.Open(ioPath(s, w))
	if err != nil {
		return WorkerResult{}, err
	}
	defer f.Close()
	var r WorkerResult
	for r.Bytes < s.FileSize {
		if err := ctx.Err(); err != nil {
			return r, err
		}
		n, err := io.ReadFull(f, buf)
		r.Ops, r.Bytes = r.Ops+1, r.Bytes+uint64(n)
		c.add(1, uint64(n))
		if err != nil {
			return r, shortRead(f.Name(), r.Bytes, s.FileSize, err)
		}
	}
	return r, f.Close()
}

func shortRead(path string, got, want uint64, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("read %s: file ends after %d bytes, expected %d", path, got, want)
	}
	return err
}

// removeIO is a worker's cleanup in the seq and rand tests.
func removeIO(_ context.Context, s *Spec, w int, _ *Counter) (WorkerResult, error) {
	err := os.Remove(ioPath(s, w))
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	return WorkerResult{}, err
}

// layoutChunk is the write size when laying out the random test's files.
const layoutChunk = 1 << 20

// randLayout writes each worker's file in full before the timed random
// phases (the papers ran iozone -i0 first), and probes O_DIRECT.
func randLayout(ctx context.Context, s *Spec, w int, c *Counter) (WorkerResult, error) {
	if err := os.MkdirAll(s.Root, 0o755); err != nil {
		return WorkerResult{}, err
	}
	if err := layout(ctx, ioPath(s, w), s.FileSize, w, c); err != nil {
		return WorkerResult{}, err
	}
	var r WorkerResult
	if s.Direct {
		ok, err := directWorks(ioPath(s, w), s.Record)
		if err != nil {
			return r, err
		}
		r.Buffered = !ok
	}
	return r, nil
}

func layout(ctx context.Context, path string, size uint64, w int, c *Counter) error {
	buf := make([]byte, layoutChunk)
	fill(buf, w)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	for done := uint64(0); done < size; {
		if err := ctx.Err(); err != nil {
			f.Close()
			return err
		}
		n, err := f.Write(buf[:min(uint64(len(buf)), size-done)])
		done += uint64(n)
		c.add(1, uint64(n))
		if err != nil {
			f.Close()
			return err
		}
	}
	return syncClose(f)
}

// directAlign is the buffer alignment O_DIRECT needs: a page covers every
// logical block size in use (512 B to 4 KiB).
const directAlign = 4096

// alignedBuffer returns size bytes starting on a directAlign boundary.
func alignedBuffer(size uint64) []byte {
	b := make([]byte, size+directAlign)
	off := directAlign - int(uintptr(unsafe.Pointer(&b[0]))%directAlign)
	return b[off%directAlign:][:size:size]
}

// directWorks tells whether the file system accepts O_DIRECT I/O of one
// record: tmpfs refuses the open, others refuse the transfer, both with
// EINVAL. Any other error is a real failure.
func directWorks(path string, record uint64) (bool, error) {
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_DIRECT, 0)
	if errors.Is(err, syscall.EINVAL) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	buf := alignedBuffer(record)
	if _, err = f.ReadAt(buf, 0); err == nil {
		_, err = f.WriteAt(buf, 0)
	}
	if errors.Is(err, syscall.EINVAL) {
		return false, nil
	}
	return err == nil, err
}

// randWrite is iozone -i2's random writes: one record at a time at
// record-aligned random offsets, until the duration or the op count is
// reached, then fsync and close (which also make a buffered fallback pay
// for its writes).
func randWrite(ctx context.Context, s *Spec, w int, c *Counter) (WorkerResult, error) {
	return randIO(ctx, s, w, c, os.O_WRONLY)
}

// randRead is iozone -i2's random reads.
func randRead(ctx context.Context, s *Spec, w int, c *Counter) (WorkerResult, error) {
	return randIO(ctx, s, w, c, os.O_RDONLY)
}

func randIO(ctx context.Context, s *Spec, w int, c *Counter, mode int) (WorkerResult, error) {
	flags := mode
	if s.Direct {
		flags |= syscall.O_DIRECT
	}
	f, err := os.OpenFile(ioPath(s, w), flags, 0)
	if err != nil {
		return WorkerResult{}, err
	}
	buf := alignedBuffer(s.Record)
	fill(buf, w)
	r, err := randLoop(ctx, s, w, c, f, buf, mode == os.O_WRONLY)
	if err != nil {
		f.Close()
		return r, err
	}
	if mode == os.O_WRONLY {
		return r, syncClose(f)
	}
	return r, f.Close()
}

func randLoop(ctx context.Context, s *Spec, w int, c *Counter, f *os.File, buf []byte, write bool) (WorkerResult, error) {
	// The seed depends on the worker only, so a rerun touches the same offsets.
	rng := rand.New(rand.NewPCG(s.Seed, uint64(w)))
	records := s.FileSize / s.Record
	deadline := time.Now().Add(s.Duration)
	var r WorkerResult
	for s.Ops == 0 && time.Now().Before(deadline) || s.Ops > 0 && r.Ops < s.Ops {
		if err := ctx.Err(); err != nil {
			return r, err
		}
		off := int64(rng.Uint64N(records) * s.Record)
		var err error
		if write {
			_, err = f.WriteAt(buf, off)
		} else {
			_, err = f.ReadAt(buf, off)
		}
		if err != nil {
			return r, err
		}
		r.Ops, r.Bytes = r.Ops+1, r.Bytes+s.Record
		c.add(1, s.Record)
	}
	return r, nil
}
