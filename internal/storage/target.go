package storage

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
)

// FormatVersion is the on-disk format this engine writes and reads.
const FormatVersion = 1

// MaxChunkSize bounds a chunk: offsets inside a chunk are 32-bit on the wire.
const MaxChunkSize = 1 << 32

// DefaultMaxOpenChunks is the default bound of a target's cache of open
// chunks (each holds two descriptors: data and sidecar).
const DefaultMaxOpenChunks = 1024

// Options tune how a target is opened. The zero value is usable.
type Options struct {
	// FS is the file system under the target; nil means the real one.
	FS FS
	// MaxOpenChunks bounds the open-chunk cache (DefaultMaxOpenChunks if 0).
	MaxOpenChunks int
	// Logf receives log lines (corruption reports, recovery steps);
	// nil means the standard logger.
	Logf func(format string, args ...any)
	// FinishFormat lets OpenTarget format again a directory whose format
	// was interrupted: chunk directories that hold no chunk, and no
	// target.json. For a chain's store (chains.go), which a server makes
	// on its own and whose identity nothing else records; a target that
	// lost its target.json is refused either way.
	FinishFormat bool
}

// targetMeta is the contents of target.json.
type targetMeta struct {
	Format   int    `json:"format"`
	UUID     string `json:"uuid"`
	TargetID uint32 `json:"target_id,omitempty"`
	// Replacement marks a new disk formatted in place of a dead target
	// (FormatReplacement), until its first registration: its chains must
	// copy everything to it.
	Replacement bool `json:"replacement,omitempty"`
}

// Target is the chunk engine of one storage target. It is safe for
// concurrent use: operations on different chunks run in parallel, writes to
// one chunk are serialized, and reads of a chunk run alongside each other.
type Target struct {
	dir  string
	fs   FS
	logf func(format string, args ...any)
	lock io.Closer

	metaMu      sync.Mutex // serializes target.json rewrites
	uuid        string
	id          atomic.Uint32
	replacement atomic.Bool

	cache  *chunkCache
	closed atomic.Bool
	// noDropBehind is set once the kernel or file system refused a write
	// with RWF_DONTCACHE (dropbehind.go).
	noDropBehind atomic.Bool
	// behind flushes the file system behind large writes (flushbehind.go).
	behind flushBehind

	// inoLocks order opening chunk files against Delete: opening takes
	// the shared side of the ino's stripe, Delete the exclusive side, so
	// no handle to a deleted file can enter the cache.
	inoLocks [64]sync.RWMutex

	// dirty records chunk directories holding files created since their
	// last SyncDir, so that Sync makes new chunks survive power loss.
	dirtyMu sync.Mutex
	dirty   map[uint64]dirState
	// dirSyncs serialize the directory syncs of an ino's stripe, so that
	// a Sync that finds nothing dirty because another took the mark
	// returns only after that other's SyncDir ended.
	dirSyncs [64]sync.Mutex

	// lost are chunks listed as absent (ListBucket) until their chain's
	// resync copied them whole (lostchunks.go).
	lostMu sync.Mutex
	lost   map[chunkKey]bool
}

type dirState uint8

const (
	dirtyInoDir    dirState = 1 << iota // entries in chunks/hh/ino changed
	dirtyParentDir                      // chunks/hh/ino itself was created
)

// OpenTarget opens the target in directory dir, which must exist. The first
// open of an empty directory formats it with a new UUID.
func OpenTarget(dir string, opts Options) (*Target, error) {
	t := &Target{dir: filepath.Clean(dir), fs: opts.FS, logf: opts.Logf, dirty: map[uint64]dirState{}}
	if t.fs == nil {
		t.fs = OSFS{}
	}
	if t.logf == nil {
		t.logf = log.Printf
	}
	max := opts.MaxOpenChunks
	if max <= 0 {
		max = DefaultMaxOpenChunks
	}
	t.cache = newChunkCache(max)

	names, err := t.fs.ReadDirNames(t.dir)
	if err != nil {
		return nil, fmt.Errorf("target directory: %w", err)
	}
	if t.lock, err = t.fs.Lock(filepath.Join(t.dir, "lock")); err != nil {
		return nil, fmt.Errorf("target %s: %w", t.dir, err)
	}
	if err := t.loadOrFormat(names, opts.FinishFormat); err != nil {
		t.lock.Close()
		return nil, fmt.Errorf("target %s: %w", t.dir, err)
	}
	return t, nil
}

func (t *Target) loadOrFormat(names []string, finishFormat bool) error {
	b, err := ReadFile(t.fs, filepath.Join(t.dir, "target.json"))
	switch {
	case err == nil:
		var m targetMeta
		if err := json.Unmarshal(b, &m); err != nil {
			return fmt.Errorf("target.json: %v", err)
		}
		if m.Format != FormatVersion {
			return fmt.Errorf("target.json: format version %d, this build reads %d", m.Format, FormatVersion)
		}
		if m.UUID == "" {
			return errors.New("target.json: no uuid")
		}
		t.uuid = m.UUID
		t.id.Store(m.TargetID)
		t.replacement.Store(m.Replacement)
		return nil
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	// Refuse to adopt a directory that holds chunks but lost its identity:
	// a new UUID would make the metadata service see a new, empty target.
	if slices.Contains(names, "chunks") {
		empty, err := t.holdsNoChunks()
		if !finishFormat || err != nil || !empty {
			return errors.New("has a chunks directory but no target.json; refusing to re-format it")
		}
		t.logf("storage: %s: finishing an interrupted format (chunk directories without chunks, no target.json)", t.dir)
	}
	t.uuid = newUUID()
	if err := t.makeChunkDirs(); err != nil {
		return err
	}
	return t.writeMeta(0)
}

// FormatReplacement formats the empty directory dir as target id with the
// given UUID: a new disk that takes the place of a dead one. Its server,
// restarted with dir among its targets, registers it under the old
// identity; it rejoins the old target's replicated chains and is resynced
// from the other members (what lived only on the dead disk is lost).
func FormatReplacement(dir, uuid string, id uint32) error {
	names, err := OSFS{}.ReadDirNames(dir)
	if err != nil {
		return fmt.Errorf("replacement target: %w", err)
	}
	if len(names) > 0 {
		return fmt.Errorf("replacement target %s is not empty (%d entries): use an empty directory on the new disk", dir, len(names))
	}
	if uuid == "" || len(uuid) > 64 || id == 0 {
		return fmt.Errorf("replacement target: bad identity %q/%d", uuid, id)
	}
	t := &Target{dir: filepath.Clean(dir), fs: OSFS{}, uuid: uuid}
	t.replacement.Store(true)
	if err := t.makeChunkDirs(); err != nil {
		return err
	}
	return t.writeMeta(id)
}

// holdsNoChunks reports whether every entry of the chunks directory is an
// empty directory.
func (t *Target) holdsNoChunks() (bool, error) {
	chunks := filepath.Join(t.dir, "chunks")
	buckets, err := t.fs.ReadDirNames(chunks)
	if err != nil {
		return false, err
	}
	for _, b := range buckets {
		inside, err := t.fs.ReadDirNames(filepath.Join(chunks, b))
		// Anything inside a bucket (a file's directory of chunks) means
		// chunks were written; an entry that is not a directory fails to
		// list, and is not an interrupted format either.
		if err != nil || len(inside) > 0 {
			return false, err
		}
	}
	return true, nil
}

func (t *Target) makeChunkDirs() error {
	chunks := filepath.Join(t.dir, "chunks")
	if err := t.fs.Mkdir(chunks, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	markTopDir(t.fs, chunks) // a hint only (spread.go): without it, all works the same
	for i := 0; i < 256; i++ {
		if err := t.fs.MkdirAll(filepath.Join(chunks, fmt.Sprintf("%02x", i)), 0o755); err != nil {
			return err
		}
	}
	return t.fs.SyncDir(chunks)
}

func (t *Target) writeMeta(id uint32) error {
	b, err := json.MarshalIndent(targetMeta{Format: FormatVersion, UUID: t.uuid, TargetID: id, Replacement: t.replacement.Load()}, "", "  ")
	if err != nil {
		return err
	}
	return WriteFileAtomic(t.fs, filepath.Join(t.dir, "target.json"), append(b, '\n'))
}

// newUUID returns a random (version 4) UUID.
func newUUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// UUID is the target's permanent identity.
func (t *Target) UUID() string { return t.uuid }

// Dir is the target's directory.
func (t *Target) Dir() string { return t.dir }

// ID is the target ID the metadata service assigned, 0 if none yet.
func (t *Target) ID() uint32 { return t.id.Load() }

// Replacement reports whether the target is a new disk in place of a dead
// one that has not registered yet.
func (t *Target) Replacement() bool { return t.replacement.Load() }

// ClearReplacement records that the replacement disk has registered (its
// chains have taken it in for a full copy).
func (t *Target) ClearReplacement() error {
	t.metaMu.Lock()
	defer t.metaMu.Unlock()
	if !t.replacement.Load() {
		return nil
	}
	t.replacement.Store(false)
	if err := t.writeMeta(t.id.Load()); err != nil {
		t.replacement.Store(true)
		return fmt.Errorf("target %s: %w", t.dir, err)
	}
	return nil
}

// SetID records the target ID the metadata service assigned, durably, so a
// restarted server serves under it before it has re-registered.
func (t *Target) SetID(id uint32) error {
	t.metaMu.Lock()
	defer t.metaMu.Unlock()
	if t.id.Load() == id {
		return nil
	}
	if err := t.writeMeta(id); err != nil {
		return fmt.Errorf("target %s: recording target id %d: %w", t.dir, id, err)
	}
	t.id.Store(id)
	return nil
}

// Capacity reports the size of the file system holding the target and the
// bytes still available to it.
func (t *Target) Capacity() (total, free uint64, err error) {
	return t.fs.Statfs(t.dir)
}

// Close closes the target's files and releases its lock. Operations still
// running finish; later ones fail.
func (t *Target) Close() error {
	if t.closed.Swap(true) {
		return nil
	}
	t.cache.closeAll()
	return t.lock.Close()
}

func (t *Target) inoLock(ino uint64) *sync.RWMutex { return &t.inoLocks[ino%uint64(len(t.inoLocks))] }

// inoDir is chunks/<ino%256 in hex>/<ino>.
func (t *Target) inoDir(ino uint64) string {
	const hex = "0123456789abcdef"
	b := make([]byte, 0, len(t.dir)+40)
	b = append(b, t.dir...)
	b = append(b, "/chunks/"...)
	b = append(b, hex[ino>>4&0xf], hex[ino&0xf], '/')
	b = strconv.AppendUint(b, ino, 10)
	return string(b)
}

func (t *Target) dataPath(ino, idx uint64) string {
	return t.inoDir(ino) + "/" + strconv.FormatUint(idx, 10)
}

func (t *Target) markDirty(ino uint64, s dirState) {
	t.dirtyMu.Lock()
	t.dirty[ino] |= s
	t.dirtyMu.Unlock()
}

// errClosed is returned by operations on a closed target.
var errClosed = fmt.Errorf("target closed: %w", syscall.ESHUTDOWN)
