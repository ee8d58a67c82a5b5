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
	var reportedGen uint64
	var reported time.Time
	for ctx.Err() == nil {
		req := c.ns.watchReq()
		req.Session = c.session
		req.Opens = c.openReport(reportedGen, reported)
		if c.fileLeases.count() > 0 {
			// Answered soon enough to renew the file leases
			// before they end (proto/lease.go).
			req.WaitMs = proto.FileLeaseWatchMs
		}
		sent := time.Now()
		var reply proto.WatchReply
		// A leader that hangs must not hold the watch for the RPC
		// timeout: past watchHealthy the watch counts as lost, and the
		// caches in front of this client are told so now, not later.
		call, cancelCall := context.WithTimeout(ctx, watchWait+watchHealthy)
		err := c.callLeaderContext(call, proto.OpWatch, req.Encode, func(d *wire.Dec) error { reply.Decode(d); return nil })
		cancelCall()
		pause := watchBatch
		if err == nil && req.Opens != nil {
			reportedGen, reported = req.Opens.Gen, sent
		}
		if err != nil {
			reported = time.Time{} // the next leader may not have it
			c.endLeases(^uint64(0))
			if c.ns.lost() {
				c.forgetAllCapabilities()
				c.invalidator().InvalidateAll()
			}
			pause = 100 * time.Millisecond
		} else {
			news, all := c.ns.apply(&reply)
			c.pass(news, all)
			// A lease this reply ended has a change waiting for the
			// next request, which tells the leader it is taken in.
			if c.watched(&reply, all) || len(reply.Events) == 0 && !reply.Lost {
				pause = 0
			}
			if !all {
				c.fileLeases.resumed(reply.Upto)
				c.fileLeases.renewed(sent)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
}

// Invalidator is told of the changes other clients make, so that a cache
// in front of this client (the kernel's, for a FUSE mount) can drop what
// they make stale.
type Invalidator interface {
	InvalidateInode(ino uint64)
	InvalidateEntry(parent uint64, name string)
	// InvalidateAll: the change stream was lost; anything may have
	// changed.
	InvalidateAll()
	// ForgetAbsent: the lease on directory dir ended, and with it the
	// absences of names it vouched for (AbsentFor).
	ForgetAbsent(dir uint64)
	// ForgetAllAbsent: every lease ended.
	ForgetAllAbsent()
}

type noInvalidator struct{}

func (noInvalidator) InvalidateInode(uint64)         {}
func (noInvalidator) InvalidateEntry(uint64, string) {}
func (noInvalidator) InvalidateAll()                 {}
func (noInvalidator) ForgetAbsent(uint64)            {}
func (noInvalidator) ForgetAllAbsent()               {}

// SetInvalidator registers the cache in front of this client.
func (c *Client) SetInvalidator(inv Invalidator) { c.inv.Store(&inv) }

func (c *Client) invalidator() Invalidator {
	if p := c.inv.Load(); p != nil {
		return *p
	}
	return noInvalidator{}
}

// pass hands the changes other clients made to the invalidator, and
// reloads the cluster map when it changed: calls stuck on a failed head
// end and go to the new one without waiting for the next periodic reload.
func (c *Client) pass(news []proto.ChangeEvent, all bool) {
	inv := c.invalidator()
	if all {
		c.forgetAllCapabilities()
		inv.InvalidateAll()
	}
	reload := false
	for _, ev := range news {
		if ev.MapChanged() {
			reload = true
		} else if ev.Parent == 0 {
			// The kernel first: it keeps its own "no capability"
			// mark until it fetches the attributes again.
			inv.InvalidateInode(ev.Ino)
			c.forgetCapability(ev.Ino)
		} else {
			inv.InvalidateEntry(ev.Parent, ev.Name)
		}
	}
	if reload {
		c.refreshMap()
	}
}
