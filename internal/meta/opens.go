package meta

import (
	"sync"

	"tandemfs/internal/proto"
	"tandemfs/internal/wire"
)

// The files each client session holds open, as its clients report them
// (the contract is in proto/opens.go): what a change of a file's layout
// asks before it begins, and what the garbage of a replaced layout waits
// for. The table lives in the leader's memory only; a new leader judges
// it only once the session timeout has passed since it took over
// (judgingSessions), by when every live session has reported again.

// openTable is every session's open files.
type openTable struct {
	mu        sync.Mutex
	bySession map[uint64]*sessionOpens
}

// sessionOpens is one session's last report, and the files it has
// announced writing to since (OpOpenWrite) that no report has yet.
type sessionOpens struct {
	gen      uint64
	overflow bool
	files    map[uint64]bool   // ino → open for writing
	writing  map[uint64]uint64 // ino → the counter OpOpenWrite came with
}

func newOpenTable() *openTable { return &openTable{bySession: map[uint64]*sessionOpens{}} }

func (t *openTable) session(id uint64) *sessionOpens {
	so := t.bySession[id]
	if so == nil {
		so = &sessionOpens{files: map[uint64]bool{}, writing: map[uint64]uint64{}}
		t.bySession[id] = so
	}
	return so
}

// report replaces a session's open files with r, unless an earlier
// report arrives late; announcements r counts already are dropped (a
// file r does not list was closed since).
func (t *openTable) report(session uint64, r *proto.OpenFiles) {
	t.mu.Lock()
	defer t.mu.Unlock()
	so := t.session(session)
	if r.Gen < so.gen {
		return
	}
	so.gen, so.overflow = r.Gen, r.Overflow
	so.files = make(map[uint64]bool, len(r.Files))
	for _, f := range r.Files {
		so.files[f.Ino] = so.files[f.Ino] || f.Writing
	}
	for ino, gen := range so.writing {
		if gen <= r.Gen {
			delete(so.writing, ino)
		}
	}
}

// announceWriting records that session is about to write ino's data, as
// of its counter gen.
func (t *openTable) announceWriting(session, ino, gen uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	so := t.session(session)
	so.writing[ino] = max(so.writing[ino], gen)
}

// holders lists the live sessions that hold ino open: writers those that
// may write it, readers the others. A session that reported more files
// than a report holds counts as a writer of every file.
func (t *openTable) holders(ino uint64, live func(session uint64) bool) (writers, readers []uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, so := range t.bySession {
		if !live(id) {
			delete(t.bySession, id)
			continue
		}
		writing, open := so.files[ino]
		_, announced := so.writing[ino]
		switch {
		case so.overflow || writing || announced:
			writers = append(writers, id)
		case open:
			readers = append(readers, id)
		}
	}
	return writers, readers
}

// reset forgets every session's files (a new leader's table).
func (t *openTable) reset() {
	t.mu.Lock()
	t.bySession = map[uint64]*sessionOpens{}
	t.mu.Unlock()
}

// openWrite answers OpOpenWrite: the announcement is recorded, and a
// conversion of the file in progress aborted, before the file is read, so
// that a conversion's swap either knows of the writer or is in the reply.
func (s *Service) openWrite(r *proto.OpenWriteReq, out *wire.Enc) error {
	s.convs.mu.Lock() // not while a conversion's swap is proposed
	s.opens.announceWriting(r.Session, r.Ino, r.Gen)
	s.convs.abortLocked(r.Ino)
	s.convs.mu.Unlock()
	s.sessions.touch(r.Session)
	n, err := loadInode(s.fsm.db, r.Ino)
	if err != nil {
		return err
	}
	n.Inode.Encode(out)
	return nil
}

// fileHolders lists the sessions that hold ino open, writers and readers,
// judged only once every live session has had the time to report to
// this leader (ok false before).
func (s *Service) fileHolders(ino uint64) (writers, readers []uint64, ok bool) {
	if !s.judgingSessions() {
		return nil, nil, false
	}
	w, r := s.opens.holders(ino, func(id uint64) bool { return !s.sessionSilent(id) })
	return w, r, true
}
