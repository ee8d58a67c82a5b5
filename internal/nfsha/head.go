// Package nfsha makes an NFS gateway head highly available: for each
// service address it asks the metadata leader for a lease, serves the
// address while it holds one, and stops serving, on its own clock,
// before the lease can have run out at the leader (meta/nfslease.go).
// The address itself is added to an interface with netlink and announced
// with gratuitous ARP (address.go), so that clients reach the new head
// after a failover without changing anything, and the connections clients
// had to the old head are reset so that they reconnect (tickle.go).
package nfsha

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"tandemfs/internal/client"
	"tandemfs/internal/proto"
)

// DefaultLease is how long a lease lasts. A dead head's address moves
// after at most a lease, plus a standby's poll (a sixth of it) and the
// fence: under 5 s, against NSS-HA's 30-60 s.
const DefaultLease = 3 * time.Second

// Service is one service address a head may serve.
type Service struct {
	Address   string // host:port clients use
	Interface string // where the address is added ("" : the address is local already)
	Prefix    int    // its prefix length there (default: a host address, /32 or /128)
}

// Serve starts serving a listener on a service address while valid
// reports true, and calls connected after each connection it accepts.
type Serve func(svc Service, l net.Listener, valid func() bool, connected func()) Serving

// Serving is a service address being served.
type Serving interface {
	Stop()             // close the listener and every connection
	Clients() []string // the remote IP:port of each open connection
}

// Config configures a head.
type Config struct {
	Head     string // this head's ID (fence agents are keyed by it)
	HeadAddr string // how an administrator reaches this head (status)
	Client   *client.Client
	Services []Service
	Lease    time.Duration // default DefaultLease
	Serve    Serve
	Logf     func(format string, args ...any)
}

// Run keeps cfg's service addresses until ctx ends, then gives back the
// leases it holds.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Head == "" || cfg.Client == nil || cfg.Serve == nil || len(cfg.Services) == 0 {
		return errors.New("nfsha: a head needs an ID, a client, a server and a service address")
	}
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	var wg sync.WaitGroup
	for _, svc := range cfg.Services {
		k := &keeper{cfg: &cfg, svc: svc, start: time.Now(), connected: make(chan struct{}, 1)}
		wg.Add(1)
		go func() {
			defer wg.Done()
			k.run(ctx)
		}()
	}
	wg.Wait()
	return nil
}

// keeper holds one service address for a head.
type keeper struct {
	cfg   *Config
	svc   Service
	start time.Time    // the monotonic base of deadline
	until atomic.Int64 // ns after start until which the lease is valid here; 0: none

	connected chan struct{} // a client connected: report it now

	mu       sync.Mutex
	holding  bool
	serving  Serving
	stopTick chan struct{} // closed when it stops serving: ends the tickles
	reported []string      // the clients the leader has from this head
	timer    *time.Timer
}

// valid reports whether this head may still answer on the address.
func (k *keeper) valid() bool { return time.Since(k.start) < time.Duration(k.until.Load()) }

func (k *keeper) run(ctx context.Context) {
	if err := removeAddress(k.svc); err != nil {
		k.cfg.Logf("nfs ha: %s: removing a leftover address: %v", k.svc.Address, err)
	}
	for {
		k.ask(ctx, false)
		wait := k.cfg.Lease / 6 // a standby's poll
		if k.isHolding() {
			wait = k.cfg.Lease / 4 // the holder's renewal
		}
		if !k.sleep(ctx, wait) {
			k.giveBack()
			return
		}
	}
}

// sleep waits until the next request is due, or less when a client has
// connected (so that a head cut off a moment later has reported it; a
// connection that ends is reported with the next renewal); false when
// ctx ends.
func (k *keeper) sleep(ctx context.Context, wait time.Duration) bool {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
	case <-k.connected:
	}
	return true
}

// clientConnected wakes the keeper to report a new connection.
func (k *keeper) clientConnected() {
	select {
	case k.connected <- struct{}{}:
	default:
	}
}

// clients lists the holder's client connections (at most
// proto.MaxNFSClients), sorted, and whether the leader has another list.
func (k *keeper) clients() ([]string, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.holding {
		return nil, false
	}
	now := k.serving.Clients()
	slices.Sort(now)
	now = now[:min(len(now), proto.MaxNFSClients)]
	return now, !slices.Equal(now, k.reported)
}

func (k *keeper) isHolding() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.holding
}

// ask asks for (or renews) the lease. The local deadline counts from
// before the request left, so it ends before the leader's, which counts
// from when the leader granted it; a tenth is kept back for clocks that
// run at different rates.
func (k *keeper) ask(ctx context.Context, release bool) {
	sent := time.Since(k.start)
	callCtx, cancel := context.WithTimeout(ctx, k.cfg.Lease/2)
	defer cancel()
	req := &proto.NFSLeaseReq{Head: k.cfg.Head, HeadAddr: k.cfg.HeadAddr,
		Address: k.svc.Address, Duration: int64(k.cfg.Lease), Release: release}
	if !release {
		req.Clients, req.SetClients = k.clients()
	}
	reply, err := k.cfg.Client.NFSLease(callCtx, req)
	switch {
	case err != nil:
		if k.isHolding() {
			k.cfg.Logf("nfs ha: %s: renewing the lease: %v (serving until it runs out)", k.svc.Address, err)
		}
	case reply.Granted:
		k.extend(sent + k.cfg.Lease*9/10)
		if req.SetClients {
			k.setReported(req.Clients)
		}
		if !k.isHolding() && !k.take(reply.Epoch, reply.Clients) {
			k.until.Store(0)
			k.ask(ctx, true) // another head may serve it
		}
	case k.isHolding():
		k.lose(fmt.Sprintf("head %s holds it now", reply.Holder))
	}
}

// extend moves the local deadline and the timer that stops serving at it.
func (k *keeper) extend(until time.Duration) {
	k.until.Store(int64(until))
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.timer != nil {
		k.timer.Stop()
	}
	k.timer = time.AfterFunc(until-time.Since(k.start), func() {
		if !k.valid() {
			k.lose("its lease ran out before it could renew it")
		}
	})
}

func (k *keeper) setReported(clients []string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.reported = clients
}

// take starts serving: the address on its interface, a listener, the
// announcement, and the resets of the last holder's client connections
// (tickle.go).
func (k *keeper) take(epoch uint64, lastClients []string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.holding {
		return true
	}
	if err := addAddress(k.svc); err != nil {
		k.cfg.Logf("nfs ha: %s: adding the address: %v (giving the lease back)", k.svc.Address, err)
		return false
	}
	l, err := listen(k.svc.Address)
	if err != nil {
		k.cfg.Logf("nfs ha: %s: %v (giving the lease back)", k.svc.Address, err)
		return false
	}
	k.serving = k.cfg.Serve(k.svc, l, k.valid, k.clientConnected)
	k.holding, k.reported, k.stopTick = true, nil, make(chan struct{})
	announce(k.svc, k.cfg.Logf)
	go tickle(k.svc, lastClients, k.stopTick, k.cfg.Logf)
	k.cfg.Logf("nfs ha: serving %s (lease epoch %d)", k.svc.Address, epoch)
	return true
}

// lose stops serving at once and takes the address off the interface.
func (k *keeper) lose(why string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.holding {
		return
	}
	k.until.Store(0)
	k.serving.Stop()
	close(k.stopTick)
	k.holding, k.serving, k.reported = false, nil, nil
	if err := removeAddress(k.svc); err != nil {
		k.cfg.Logf("nfs ha: %s: removing the address: %v", k.svc.Address, err)
	}
	k.cfg.Logf("nfs ha: stopped serving %s: %s", k.svc.Address, why)
}

// giveBack stops serving and hands the lease back, so that a standby
// takes the address at once instead of after the lease.
func (k *keeper) giveBack() {
	if !k.isHolding() {
		return
	}
	k.lose("the head is stopping")
	k.ask(context.Background(), true)
}

// listen binds the service address, retrying briefly: the old holder's
// socket may close a moment after its lease ended.
func listen(addr string) (net.Listener, error) {
	var err error
	for i := 0; i < 20; i++ {
		var l net.Listener
		if l, err = net.Listen("tcp", addr); err == nil {
			return l, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, fmt.Errorf("listening on the service address: %w", err)
}
