package client

import (
	"context"
	"time"

	"tandemfs/internal/proto"
	"tandemfs/internal/wire"
)

// watchWait is how long the leader holds a watch request without changes.
const watchWait = time.Second

// watchBatch spaces the watch requests of a client while changes keep
// coming, so a busy namespace costs each client at most one request per
// watchBatch, at the price of learning of changes that much later.
const watchBatch = 5 * time.Millisecond

// watchLoop follows the metadata leader's change stream into the
// namespace cache (nscache.go) until the client closes.
func (c *Client) watchLoop() {
	defer c.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-c.stop
		cancel()
	}()
	for ctx.Err() == nil {
		req := c.ns.watchReq()
		var reply proto.WatchReply
		err := c.callLeaderContext(ctx, proto.OpWatch, req.Encode, func(d *wire.Dec) error { reply.Decode(d); return nil })
		pause := watchBatch
		if err != nil {
			c.ns.lost()
			pause = 100 * time.Millisecond
		} else {
			c.ns.apply(&reply)
			if len(reply.Events) == 0 && !reply.Lost {
				pause = 0
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
}
