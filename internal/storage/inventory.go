package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"

	"tandemfs/internal/proto"
)

// Buckets is the number of chunk directories (chunks/00 .. chunks/ff) a
// target spreads files over: file ino lives in bucket ino mod Buckets.
const Buckets = 256

// ListBucket lists the chunks of the files in bucket b, in (ino, index)
// order, starting after (afterIno, afterIdx) unless start is set, at most
// limit of them; more reports whether the bucket holds further chunks. A
// resync walks both copies of a chain this way and compares them.
func (t *Target) ListBucket(b uint8, start bool, afterIno, afterIdx uint64, limit int) (out []proto.ChunkStat, more bool, err error) {
	if t.closed.Load() {
		return nil, false, errClosed
	}
	inos, err := t.bucketInos(b)
	if err != nil {
		return nil, false, err
	}
	for _, ino := range inos {
		if !start && ino < afterIno {
			continue
		}
		idxs, err := t.listChunks(ino)
		if err != nil {
			return nil, false, err
		}
		slices.Sort(idxs)
		for _, idx := range idxs {
			if !start && ino == afterIno && idx <= afterIdx {
				continue
			}
			if t.isLost(chunkKey{ino, idx}) {
				continue
			}
			if len(out) == limit {
				return out, true, nil
			}
			st, ok, err := t.statChunk(ino, idx)
			if err != nil {
				return nil, false, err
			}
			if ok {
				out = append(out, st)
			}
		}
	}
	return out, false, nil
}

// bucketInos lists the files with chunks in bucket b, sorted.
func (t *Target) bucketInos(b uint8) ([]uint64, error) {
	dir := filepath.Join(t.dir, "chunks", fmt.Sprintf("%02x", b))
	names, err := t.fs.ReadDirNames(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	inos := make([]uint64, 0, len(names))
	for _, n := range names {
		if ino, err := strconv.ParseUint(n, 10, 64); err == nil {
			inos = append(inos, ino)
		}
	}
	slices.Sort(inos)
	return inos, nil
}

// statChunk reports a chunk's size and the time it last changed; ok is
// false if it vanished meanwhile.
func (t *Target) statChunk(ino, idx uint64) (st proto.ChunkStat, ok bool, err error) {
	size, mtime, err := t.fs.Stat(t.dataPath(ino, idx))
	if errors.Is(err, fs.ErrNotExist) {
		return st, false, nil
	}
	if err != nil {
		return st, false, err
	}
	return proto.ChunkStat{Ino: ino, Index: idx, Size: uint64(size), MtimeMs: mtime.UnixMilli()}, true, nil
}

// StatChunk reports chunk idx of file ino: ok is false if it does not exist.
func (t *Target) StatChunk(ino, idx uint64) (proto.ChunkStat, bool, error) {
	return t.statChunk(ino, idx)
}
