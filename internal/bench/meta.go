package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
)

// metaTreeRoot is worker w's own directory (mdtest -u, unique per task).
func metaTreeRoot(s *Spec, w int) string {
	return filepath.Join(s.Root, fmt.Sprintf("mdtest_tree.%d", w))
}

// metaLeaves lists worker w's leaf directories: with -z Depth and
// -b Branch there are Branch^Depth of them, and with -L only they hold files.
func metaLeaves(s *Spec, w int) []string {
	level := []string{metaTreeRoot(s, w)}
	for range s.Depth {
		next := make([]string, 0, len(level)*s.Branch)
		for _, dir := range level {
			for b := range s.Branch {
				next = append(next, filepath.Join(dir, "d"+strconv.Itoa(b)))
			}
		}
		level = next
	}
	return level
}

// forEachFile calls fn on each of worker w's files (-I Items per leaf),
// in the same order in every phase, counting each as one operation.
func forEachFile(ctx context.Context, s *Spec, w int, c *Counter, fn func(path string) error) (WorkerResult, error) {
	var r WorkerResult
	for _, leaf := range metaLeaves(s, w) {
		for i := range s.Items {
			if err := ctx.Err(); err != nil {
				return r, err
			}
			if err := fn(filepath.Join(leaf, fmt.Sprintf("file.mdtest.%d.%d", w, i))); err != nil {
				return r, err
			}
			r.Ops++
			c.add(1, 0)
		}
	}
	return r, nil
}

// metaTree builds the directories before the timed phases; mdtest times
// tree creation separately and -F leaves it out of the file figures.
func metaTree(ctx context.Context, s *Spec, w int, _ *Counter) (WorkerResult, error) {
	for _, leaf := range metaLeaves(s, w) {
		if err := ctx.Err(); err != nil {
			return WorkerResult{}, err
		}
		if err := os.MkdirAll(leaf, 0o755); err != nil {
			return WorkerResult{}, err
		}
	}
	return WorkerResult{}, nil
}

// metaCreate creates each file exclusively, writes FileSize bytes
// (mdtest -w) and, with -y, fsyncs it before closing. Like mdtest, an
// empty file is not fsynced: -y only applies after a write.
func metaCreate(ctx context.Context, s *Spec, w int, c *Counter) (WorkerResult, error) {
	buf := make([]byte, s.FileSize)
	fill(buf, w)
	r, err := forEachFile(ctx, s, w, c, func(path string) error {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		if len(buf) == 0 {
			return f.Close()
		}
		if _, err := f.Write(buf); err != nil {
			f.Close()
			return err
		}
		if s.Fsync {
			return syncClose(f)
		}
		return f.Close()
	})
	r.Bytes = r.Ops * s.FileSize
	return r, err
}

// metaStat is mdtest's stat phase.
func metaStat(ctx context.Context, s *Spec, w int, c *Counter) (WorkerResult, error) {
	return forEachFile(ctx, s, w, c, func(path string) error {
		_, err := os.Lstat(path)
		return err
	})
}

// metaRead opens each file, reads FileSize bytes (mdtest -e) and closes
// it; for empty files it is open and close only.
func metaRead(ctx context.Context, s *Spec, w int, c *Counter) (WorkerResult, error) {
	buf := make([]byte, s.FileSize)
	r, err := forEachFile(ctx, s, w, c, func(path string) error {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if n, err := io.ReadFull(f, buf); err != nil {
			return shortRead(path, uint64(n), s.FileSize, err)
		}
		return f.Close()
	})
	r.Bytes = r.Ops * s.FileSize
	return r, err
}

// metaRemove is mdtest's removal phase: files only, the tree stays
// until cleanup as -F does not time directory removal.
func metaRemove(ctx context.Context, s *Spec, w int, c *Counter) (WorkerResult, error) {
	return forEachFile(ctx, s, w, c, os.Remove)
}

// removeMeta removes a worker's tree, with any files a failed run left.
func removeMeta(_ context.Context, s *Spec, w int, _ *Counter) (WorkerResult, error) {
	return WorkerResult{}, os.RemoveAll(metaTreeRoot(s, w))
}
