package fence

import (
	"slices"
	"strings"
	"sync"
)

// DefaultKeep is how many outcomes per server a Log keeps unless told
// otherwise: enough to see a server that is fenced again and again.
const DefaultKeep = 8

// Log keeps the last few fence outcomes of every server in memory, for
// `tandem status`. It is safe for concurrent use; the zero Log keeps
// DefaultKeep outcomes per server.
type Log struct {
	mu      sync.Mutex
	keep    int
	servers map[string][]Outcome // by serverKey, oldest first
}

// NewLog returns a Log that keeps the last keep outcomes per server
// (DefaultKeep if keep <= 0).
func NewLog(keep int) *Log {
	return &Log{keep: keep}
}

// serverKey identifies a server in the Log: its UUID, which survives a
// change of address, or else its address.
func serverKey(s Server) string {
	if s.UUID != "" {
		return s.UUID
	}
	return s.Addr
}

// Record adds an outcome, dropping the server's oldest beyond the limit.
func (l *Log) Record(o Outcome) {
	o.Results = slices.Clone(o.Results) // the caller may reuse its slice
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.servers == nil {
		l.servers = map[string][]Outcome{}
	}
	keep := l.keep
	if keep <= 0 {
		keep = DefaultKeep
	}
	key := serverKey(o.Server)
	h := append(l.servers[key], o)
	if len(h) > keep {
		h = slices.Delete(h, 0, len(h)-keep)
	}
	l.servers[key] = h
}

// Latest returns the most recently recorded outcome of every server,
// ordered by server key.
func (l *Log) Latest() []Outcome {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Outcome, 0, len(l.servers))
	for _, h := range l.servers {
		o := h[len(h)-1]
		o.Results = slices.Clone(o.Results)
		out = append(out, o)
	}
	slices.SortFunc(out, func(a, b Outcome) int {
		return strings.Compare(serverKey(a.Server), serverKey(b.Server))
	})
	return out
}

// History returns the kept outcomes of the server with this UUID (or, for
// a server without one, this address), oldest first.
func (l *Log) History(key string) []Outcome {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.servers[key]
	out := make([]Outcome, len(h))
	for i, o := range h {
		o.Results = slices.Clone(o.Results)
		out[i] = o
	}
	return out
}
