package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
)

// A shard of an erasure-coded stripe has K+M-1 others: a call to a target
// that does not answer is not worth a wait. A shard call to a target that
// failed to answer lately is not made at all (its shard is read around, or
// left out of the version written) until ecSuspectFor has passed; then
// one call tries it again.
const ecSuspectFor = 3 * time.Second

// errShardUnanswered: the shard's target did not answer this call or one
// shortly before.
var errShardUnanswered = errors.New("the shard's target does not answer")

// errShardSkipped: the call was not made, its target being suspect.
var errShardSkipped = fmt.Errorf("%w lately: not asked", errShardUnanswered)

// errShardBeaten: the call was ended because another read gave the bytes.
var errShardBeaten = errors.New("another read gave the bytes first")

// suspects are chains (of one target) that did not answer lately.
type suspects struct {
	mu    sync.Mutex
	until map[uint32]time.Time
}

func (s *suspects) is(chain uint32) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Now().Before(s.until[chain])
}

func (s *suspects) mark(chain uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.until == nil {
		s.until = map[uint32]time.Time{}
	}
	s.until[chain] = time.Now().Add(ecSuspectFor)
}

func (s *suspects) clear(chain uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.until, chain)
}

// shardCall makes one shard request to the target of chain, within
// ecShardTimeout, retrying only answers that say the map moved (ESTALE,
// EAGAIN) until ecShardGiveUp. A target that does not answer, or not in
// time, is suspect for ecSuspectFor.
func (c *Client) shardCall(chain uint32, call func(ctx context.Context, rt proto.Routing, s *rpc.Client) error) error {
	return c.shardCallUnless(nil, chain, ecShardTimeout, call)
}

// shardCallUnless is shardCall with a timeout of its own (a sync of many
// chunks takes longer than a write of one) that also ends when beaten does (a
// hedged call that another beat; nil: never); a call ended that way does
// not make its target suspect, since it was not given the time to answer.
func (c *Client) shardCallUnless(beaten context.Context, chain uint32, timeout time.Duration, call func(ctx context.Context, rt proto.Routing, s *rpc.Client) error) error {
	return c.shardCallAsking(beaten, false, chain, timeout, call)
}

// shardCallAsking is shardCallUnless that, with askSuspect, calls a
// suspect target too: a rebuild that cannot find K shards without it.
func (c *Client) shardCallAsking(beaten context.Context, askSuspect bool, chain uint32, timeout time.Duration, call func(ctx context.Context, rt proto.Routing, s *rpc.Client) error) error {
	if !askSuspect && c.unanswered.is(chain) {
		return errShardSkipped
	}
	deadline := time.Now().Add(ecShardGiveUp)
	for {
		rt, s, err := c.route(chain)
		if err != nil {
			c.refreshMap()
			return err
		}
		ctx, cancel := context.WithTimeout(c.epochs.Context(rt.Chain, rt.Version), timeout)
		stopWatching := func() bool { return false }
		if beaten != nil {
			stopWatching = context.AfterFunc(beaten, cancel)
		}
		err = call(ctx, rt, s)
		timedOut := ctx.Err() != nil
		stopWatching()
		cancel()
		switch {
		case err == nil:
			c.unanswered.clear(chain)
			return nil
		case beaten != nil && beaten.Err() != nil:
			return errors.Join(errShardBeaten, err)
		case rpc.IsNetError(err) || timedOut:
			c.unanswered.mark(chain)
			return errors.Join(errShardUnanswered, err)
		case (errors.Is(err, syscall.ESTALE) || errors.Is(err, syscall.EAGAIN)) && time.Now().Before(deadline):
			c.refreshMap()
			time.Sleep(50 * time.Millisecond)
		default:
			return err
		}
	}
}
