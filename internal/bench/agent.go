package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"time"

	"tandemfs/internal/rpc"
)

// Agent runs its share of the workers for a driver on another host, the
// role of an IOzone -+m client or an MPI rank's host. It trusts the
// driver with the file system, but only under ScratchPrefix directories.
type Agent struct {
	// Secret authenticates drivers: a connection must pass the same
	// mutual challenge-response as every TandemFS connection (package
	// rpc), so only holders of the secret can make this host write files.
	Secret rpc.Secret
	Log    *log.Logger // may be nil
	// IdleTimeout closes a connection whose driver has sent nothing for
	// this long, so a driver that vanished does not hold it forever.
	IdleTimeout time.Duration
}

func (a *Agent) logf(format string, args ...any) {
	if a.Log != nil {
		a.Log.Printf(format, args...)
	}
}

// Serve accepts drivers on ln until ctx ends, each connection on its own.
func (a *Agent) Serve(ctx context.Context, ln net.Listener) error {
	if len(a.Secret) == 0 {
		return usageErr("a bench agent needs a secret (--secret-file)")
	}
	ln = &rpc.AuthListener{Listener: ln, Secret: a.Secret, Logf: a.logf}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		go a.serveConn(ctx, conn)
	}
}

// serveConn answers one request at a time. A reader goroutine watches the
// connection meanwhile, so a driver that hangs up (Ctrl-C) stops the
// workers of the phase in progress.
func (a *Agent) serveConn(ctx context.Context, conn net.Conn) {
	defer conn.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	peer := conn.RemoteAddr().String()
	a.logf("driver %s connected", peer)
	reqs := make(chan request)
	go func() {
		defer cancel()
		for {
			var req request
			if err := readMessage(conn, &req, a.idle()); err != nil {
				a.logf("driver %s: %v", peer, closedOr(err))
				return
			}
			select {
			case reqs <- req:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		select {
		case req := <-reqs:
			if err := writeMessage(conn, a.handle(ctx, req), time.Minute); err != nil {
				a.logf("driver %s: %v", peer, err)
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

func (a *Agent) idle() time.Duration {
	if a.IdleTimeout > 0 {
		return a.IdleTimeout
	}
	return 2 * time.Hour
}

func closedOr(err error) error {
	if errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) {
		return errors.New("disconnected")
	}
	return err
}

func (a *Agent) handle(ctx context.Context, req request) response {
	host, _ := os.Hostname()
	resp := response{Version: ProtocolVersion, Host: host}
	if req.Version != ProtocolVersion {
		resp.Error = fmt.Sprintf("protocol version %d not supported (this agent speaks %d)", req.Version, ProtocolVersion)
		return resp
	}
	var err error
	switch req.Op {
	case opHello:
	case opDropCaches:
		if note := DropCaches(); note != "" {
			resp.Notes = []string{note}
		}
	case opPhase:
		resp.Results, err = a.phase(ctx, req)
	default:
		err = fmt.Errorf("unknown request %q", req.Op)
	}
	if err != nil {
		resp.Error = err.Error()
	}
	return resp
}

func (a *Agent) phase(ctx context.Context, req request) ([]WorkerResult, error) {
	if req.Spec == nil {
		return nil, errors.New("phase request without a spec")
	}
	s := *req.Spec
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if req.First < 0 || req.Count < 1 || req.First+req.Count > s.Workers {
		return nil, fmt.Errorf("workers %d+%d out of range for %d", req.First, req.Count, s.Workers)
	}
	a.logf("%s %s: workers %d-%d in %s", s.Test, req.Phase, req.First, req.First+req.Count-1, s.Root)
	start := time.Now()
	rs, err := runWorkers(ctx, &s, req.Phase, req.First, req.Count, nil)
	a.logf("%s %s: done in %.2fs, error: %v", s.Test, req.Phase, time.Since(start).Seconds(), err)
	return rs, err
}
