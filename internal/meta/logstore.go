package meta

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"

	"tandemfs/internal/wire"
)

// logStore keeps the Raft log and Raft's stable state (current term, vote)
// in a Pebble store of their own, written with fsync. It replaces
// raft-boltdb: a B+tree commit costs several fsyncs, a Pebble commit one
// WAL append and one fdatasync, and the commit latency of the log is the
// latency of every metadata change.
//
// Keys: "l" + big-endian index → encoded raft.Log; "s" + name → stable value.
type logStore struct {
	db   *pebble.DB
	lazy *lazySyncFS // nil when every commit is fsynced

	mu          sync.Mutex
	first, last uint64 // cached bounds of the log; 0,0 when empty
}

// errKeyNotFound is the error hashicorp/raft expects (by message) from a
// StableStore asked for a key that was never set.
var errKeyNotFound = errors.New("not found")

// openLogStore opens the log in dir. With syncEvery > 0 commits reach the
// operating system before they return and are fsynced in groups (see
// lazySyncFS); with syncEvery <= 0 each commit is fsynced.
func openLogStore(dir string, syncEvery time.Duration, logf func(string, ...any)) (*logStore, error) {
	s := &logStore{}
	opts := &pebble.Options{Logger: quietLogger{logf}}
	opts.FS = newWALPrefillFS(vfs.Default, logf)
	if syncEvery > 0 {
		s.lazy = newLazySyncFS(opts.FS, syncEvery)
		opts.FS = s.lazy
	}
	db, err := pebble.Open(dir, opts)
	if err != nil {
		if s.lazy != nil {
			s.lazy.close()
		}
		return nil, fmt.Errorf("opening raft log %s: %w", dir, err)
	}
	s.db = db
	if err := s.loadBounds(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *logStore) Close() error {
	err := s.db.Close()
	if s.lazy != nil {
		s.lazy.close()
	}
	return err
}

// syncNow makes every committed entry durable on disk.
func (s *logStore) syncNow() error {
	if s.lazy == nil {
		return nil
	}
	return s.lazy.syncNow()
}

func logKey(i uint64) []byte {
	k := make([]byte, 9)
	k[0] = 'l'
	binary.BigEndian.PutUint64(k[1:], i)
	return k
}

var logLo, logHi = []byte{'l'}, []byte{'m'}

func (s *logStore) loadBounds() error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: logLo, UpperBound: logHi})
	if err != nil {
		return err
	}
	defer it.Close()
	s.first, s.last = 0, 0
	if it.First() {
		s.first = binary.BigEndian.Uint64(it.Key()[1:])
	}
	if it.Last() {
		s.last = binary.BigEndian.Uint64(it.Key()[1:])
	}
	return it.Error()
}

func (s *logStore) FirstIndex() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first, nil
}

func (s *logStore) LastIndex() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last, nil
}

func (s *logStore) GetLog(index uint64, l *raft.Log) error {
	v, c, err := s.db.Get(logKey(index))
	if errors.Is(err, pebble.ErrNotFound) {
		return raft.ErrLogNotFound
	}
	if err != nil {
		return err
	}
	defer c.Close()
	return decodeLog(v, l)
}

func (s *logStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (s *logStore) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	b := s.db.NewBatch()
	defer b.Close()
	for _, l := range logs {
		b.Set(logKey(l.Index), encodeLog(l), nil)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return err
	}
	s.mu.Lock()
	if s.first == 0 {
		s.first = logs[0].Index
	}
	if last := logs[len(logs)-1].Index; last > s.last {
		s.last = last
	}
	s.mu.Unlock()
	return nil
}

func (s *logStore) DeleteRange(min, max uint64) error {
	if err := s.db.DeleteRange(logKey(min), logKey(max+1), pebble.Sync); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loadBounds()
}

func stableKey(k []byte) []byte { return append([]byte{'s'}, k...) }

// Set stores Raft's term and vote. Unlike log entries these are fsynced
// at once even in group-sync mode: a vote forgotten in a power failure
// could let a replica vote twice in one term and elect two leaders.
// They change only at elections, so this costs nothing in steady state.
func (s *logStore) Set(k, v []byte) error {
	if err := s.db.Set(stableKey(k), v, pebble.Sync); err != nil {
		return err
	}
	return s.syncNow()
}

func (s *logStore) Get(k []byte) ([]byte, error) {
	v, found, err := get(s.db, stableKey(k))
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, errKeyNotFound
	}
	return v, nil
}

func (s *logStore) SetUint64(k []byte, v uint64) error { return s.Set(k, u64Bytes(v)) }

func (s *logStore) GetUint64(k []byte) (uint64, error) {
	v, err := s.Get(k)
	if err != nil {
		return 0, err
	}
	return decodeU64(v), nil
}

func encodeLog(l *raft.Log) []byte {
	e := wire.NewEnc(make([]byte, 0, 40+len(l.Data)+len(l.Extensions)))
	e.U64(l.Index)
	e.U64(l.Term)
	e.U8(uint8(l.Type))
	e.Bytes(l.Data)
	e.Bytes(l.Extensions)
	e.I64(l.AppendedAt.UnixNano())
	return e.B
}

func decodeLog(b []byte, l *raft.Log) error {
	d := wire.NewDec(b)
	l.Index = d.U64()
	l.Term = d.U64()
	l.Type = raft.LogType(d.U8())
	l.Data = append([]byte(nil), d.Bytes(1<<30)...)
	l.Extensions = append([]byte(nil), d.Bytes(1<<30)...)
	l.AppendedAt = time.Unix(0, d.I64())
	if err := d.Finish(); err != nil {
		return fmt.Errorf("raft log entry: %w", err)
	}
	return nil
}
