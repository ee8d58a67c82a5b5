// Package epoch gives each chain version a context that ends when the
// chain moves to another version. A call routed by a chain version waits
// under that context, so that when the chain fails over (a server hangs, or
// its network is cut and its connections just stop) the call gives up at
// once and is retried along the new chain, instead of waiting out a timeout.
package epoch

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"tandemfs/internal/proto"
)

// ErrChainChanged is the cause of an epoch's context ending.
var ErrChainChanged = errors.New("chain changed")

// Set holds the current epoch of every chain. The zero value is ready.
type Set struct {
	mu     sync.Mutex
	epochs map[uint32]*epoch
	// latest is each chain's version as of the last Update: only that
	// version gets a live epoch, so a late caller still routed by an old
	// version cannot plant an epoch that every current caller would
	// then find ended.
	latest map[uint32]uint32
}

type epoch struct {
	version uint32
	ctx     context.Context
	cancel  context.CancelCauseFunc
}

// Update records the chains of a newly loaded cluster map, ending the
// epochs of chains whose version changed or that vanished.
func (s *Set) Update(chains []proto.Chain) {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := make(map[uint32]bool, len(chains))
	latest := make(map[uint32]uint32, len(chains))
	for _, c := range chains {
		seen[c.ID] = true
		latest[c.ID] = c.Version
		if e := s.epochs[c.ID]; e != nil && e.version != c.Version {
			e.end(c.ID, c.Version)
			delete(s.epochs, c.ID)
		}
	}
	for id, e := range s.epochs {
		if !seen[id] {
			e.end(id, 0)
			delete(s.epochs, id)
		}
	}
	s.latest = latest
}

func (e *epoch) end(chain, now uint32) {
	e.cancel(fmt.Errorf("%w: chain %d moved from version %d to %d", ErrChainChanged, chain, e.version, now))
}

// Context is the context of chain at version: it ends when the chain
// leaves that version (at once if it already has, as far as Update told).
func (s *Set) Context(chain, version uint32) context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.epochs == nil {
		s.epochs = map[uint32]*epoch{}
	}
	e := s.epochs[chain]
	latest, known := s.latest[chain]
	switch {
	case known && latest != version:
		// Routed by a version that is over (or not loaded here yet).
		return ended(fmt.Errorf("%w: chain %d is at version %d, not %d", ErrChainChanged, chain, latest, version))
	case e == nil:
		ctx, cancel := context.WithCancelCause(context.Background())
		e = &epoch{version: version, ctx: ctx, cancel: cancel}
		s.epochs[chain] = e
	case e.version != version:
		return ended(fmt.Errorf("%w: chain %d is at version %d, not %d", ErrChainChanged, chain, e.version, version))
	}
	return e.ctx
}

// ended is a context that has already ended with cause.
func ended(cause error) context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	return ctx
}
