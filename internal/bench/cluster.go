package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"tandemfs/internal/rpc"
)

// Cluster is the driver's side: it spreads a spec's workers over agents
// on client hosts, starts each phase on all of them together and waits
// for all of them, which makes every phase boundary a barrier across hosts.
type Cluster struct {
	agents []*agentConn
	// PhaseTimeout bounds one phase on one agent, so a hung file system
	// or host ends the run with an error instead of waiting forever.
	PhaseTimeout time.Duration
}

type agentConn struct {
	addr string
	host string
	mu   sync.Mutex // one request at a time on the connection
	conn net.Conn
	// lost is set once a request failed in transit: the connection could
	// then deliver a stale response, so it is closed and not used again.
	lost error
}

func (a *agentConn) name() string {
	if a.host == "" {
		return "agent " + a.addr
	}
	return fmt.Sprintf("agent %s (%s)", a.addr, a.host)
}

// dialTimeout bounds connecting and the hello exchange.
const dialTimeout = 10 * time.Second

// Dial connects to every agent and checks that it speaks this protocol.
// The error names each agent that is unreachable or incompatible.
func Dial(ctx context.Context, addrs []string, secret rpc.Secret) (*Cluster, error) {
	if len(addrs) == 0 {
		return nil, usageErr("no agent address given")
	}
	c := &Cluster{PhaseTimeout: time.Hour}
	var errs []error
	for _, addr := range addrs {
		a, err := dialAgent(ctx, addr, secret)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		c.agents = append(c.agents, a)
	}
	if err := errors.Join(errs...); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func dialAgent(ctx context.Context, addr string, secret rpc.Secret) (*agentConn, error) {
	conn, err := rpc.DialAuth(addr, secret, dialTimeout)
	if errors.Is(err, rpc.ErrAuth) {
		return nil, fmt.Errorf("agent %s refused us: %w (give driver and agent the same --secret-file)", addr, err)
	}
	if err != nil {
		return nil, fmt.Errorf("agent %s is unreachable: %w (is `tandem bench agent --listen %s` running there?)",
			addr, err, addr)
	}
	a := &agentConn{addr: addr, conn: conn}
	resp, err := a.call(ctx, request{Op: opHello}, dialTimeout)
	if err != nil {
		conn.Close()
		return nil, err
	}
	a.host = resp.Host
	return a, nil
}

// call sends one request and waits for its response. Cancelling ctx
// breaks the connection, which tells the agent to stop its workers.
func (a *agentConn) call(ctx context.Context, req request, timeout time.Duration) (response, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var resp response
	if a.lost != nil {
		return resp, fmt.Errorf("%s: connection lost earlier: %w", a.name(), a.lost)
	}
	req.Version = ProtocolVersion
	stop := context.AfterFunc(ctx, func() { a.conn.SetDeadline(time.Now()) })
	err := writeMessage(a.conn, req, dialTimeout)
	if err == nil {
		err = readMessage(a.conn, &resp, timeout)
	}
	stop()
	if ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		a.lost = err
		a.conn.Close()
		return resp, fmt.Errorf("%s: %s: %w", a.name(), req.Op, err)
	}
	switch {
	case resp.Version != ProtocolVersion:
		return resp, fmt.Errorf("%s speaks protocol version %d, this driver %d", a.name(), resp.Version, ProtocolVersion)
	case resp.Error != "":
		return resp, fmt.Errorf("%s: %s", a.name(), resp.Error)
	}
	return resp, nil
}

// Close hangs up on every agent.
func (c *Cluster) Close() error {
	var errs []error
	for _, a := range c.agents {
		if a.lost == nil {
			errs = append(errs, a.conn.Close())
		}
	}
	return errors.Join(errs...)
}

// Agents implements Executor.
func (c *Cluster) Agents() []string {
	addrs := make([]string, len(c.agents))
	for i, a := range c.agents {
		addrs[i] = a.addr
	}
	return addrs
}

// share is agent i's contiguous range of workers; agents beyond the
// worker count get none, as a 1-thread point of a sweep uses one client.
func share(workers, agents, i int) (first, count int) {
	first = i * workers / agents
	return first, (i+1)*workers/agents - first
}

// RunPhase implements Executor. The counter is updated only when the
// agents report, as they do not stream progress.
func (c *Cluster) RunPhase(ctx context.Context, s Spec, phase string, counter *Counter) ([]WorkerResult, error) {
	results := make([][]WorkerResult, len(c.agents))
	errs := make([]error, len(c.agents))
	var wg sync.WaitGroup
	for i, a := range c.agents {
		first, count := share(s.Workers, len(c.agents), i)
		if count == 0 {
			continue
		}
		wg.Go(func() {
			req := request{Op: opPhase, Spec: &s, Phase: phase, First: first, Count: count}
			resp, err := a.call(ctx, req, c.PhaseTimeout)
			results[i], errs[i] = resp.Results, err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	all := slices.Concat(results...)
	for _, r := range all {
		counter.add(r.Ops, r.Bytes)
	}
	return all, nil
}

// DropCaches implements Executor: every client host drops its own cache.
func (c *Cluster) DropCaches(ctx context.Context) []string {
	var notes []string
	for _, a := range c.agents {
		resp, err := a.call(ctx, request{Op: opDropCaches}, time.Minute)
		if err != nil {
			notes = append(notes, err.Error())
		}
		for _, n := range resp.Notes {
			notes = append(notes, fmt.Sprintf("%s: %s", a.name(), n))
		}
	}
	return notes
}
