// Package nfs serves a TandemFS file system over NFSv3, with the MOUNT
// protocol on the same TCP port, so that hosts that cannot run the FUSE
// client (login nodes, appliances, other operating systems) reach it.
//
// The gateway is a TandemFS client (internal/client): it talks to the
// metadata service and the storage targets itself, with no FUSE mount in
// between. ONC RPC and XDR come from github.com/buildbarn/go-xdr, whose
// RPC server serves the requests of one connection concurrently. File
// handles name inodes (handle.go), so any gateway head answers any
// handle; the permission checks the kernel makes for a FUSE mount are made
// here (access.go), ACLs included.
package nfs

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/mount"
	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv3"
	"github.com/buildbarn/go-xdr/pkg/protocols/rpcv2"
	"github.com/buildbarn/go-xdr/pkg/rpcserver"

	"tandemfs/internal/client"
	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
)

// Config says what a gateway serves.
type Config struct {
	Client  *client.Client
	Secret  rpc.Secret // for the fsid (handle.go)
	Exports []Export
	Logf    func(format string, args ...any)
	// InFlight bounds the requests of one connection served at once
	// (default 64); further requests wait unread in the socket.
	InFlight int
	// PollNext is how long the goroutine that sent a reply polls the
	// gateway's connections for the next request before it lets its Go
	// processor go idle (rpc.Poller); 0: never.
	PollNext time.Duration
}

// maxRecord bounds an RPC record: a WRITE of wtmax bytes and its header.
// A longer one closes the connection before it is buffered.
const maxRecord = maxIO + 64<<10

// Server is one NFS gateway head.
type Server struct {
	cfg   Config
	c     *client.Client
	fsid  uint64
	files *openFiles
	dirs  *cookieCache
	acls  aclCache
	logf  func(format string, args ...any)

	exports []*export  // in the order configured
	byRoot  sync.Map   // export root inode -> *export
	denied  logLimiter // logs of refused clients

	polls rpc.Poller // PollNext

	mu     sync.Mutex
	conns  map[net.Conn]*listening // open connections, by the listener that took them
	closed bool
	done   chan struct{} // closed by Close
}

// export is an Export and, once resolved, the inode of its directory.
type export struct {
	Export
	root atomic.Uint64
}

// New returns a gateway serving cfg's exports. The exported paths are
// resolved when a client mounts them, so they may be created later.
func New(cfg Config) (*Server, error) {
	if cfg.Client == nil {
		return nil, errors.New("nfs: no client")
	}
	if len(cfg.Exports) == 0 {
		return nil, errors.New("nfs: nothing to export (give --export or --exports)")
	}
	if err := checkExports(cfg.Exports); err != nil {
		return nil, err
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.InFlight <= 0 {
		cfg.InFlight = 64
	}
	s := &Server{cfg: cfg, c: cfg.Client, fsid: FSID(cfg.Secret), logf: cfg.Logf,
		dirs: newCookieCache(), conns: map[net.Conn]*listening{}, done: make(chan struct{})}
	s.polls.Max = cfg.PollNext
	s.files = newOpenFiles(cfg.Client, cfg.Logf)
	for _, e := range cfg.Exports {
		s.exports = append(s.exports, &export{Export: e})
	}
	return s, nil
}

// Serve accepts connections on l until Close. Each connection's requests
// are served concurrently, up to Config.InFlight at once.
func (s *Server) Serve(l net.Listener) error {
	return s.serve(l, &listening{})
}

// listening is one listener's set of connections, for ServeAddress's stop.
type listening struct {
	valid     func() bool // nil: always
	connected func()      // nil: nothing
	stopped   bool        // guarded by Server.mu
}

// Listening is a service address served by ServeAddress.
type Listening struct {
	s   *Server
	l   net.Listener
	lst *listening
}

// ServeAddress serves l while valid reports true, for a head of a highly
// available gateway that holds l's address by a lease (internal/nfsha):
// a request is answered only if the lease is valid when it arrives and
// when its reply is ready, else its connection is closed unanswered.
// connected, if not nil, is called after each connection accepted (the
// head reports its clients to the leader: nfsha's tickle ACKs).
func (s *Server) ServeAddress(l net.Listener, valid func() bool, connected func()) *Listening {
	lst := &listening{valid: valid, connected: connected}
	go s.serve(l, lst)
	return &Listening{s: s, l: l, lst: lst}
}

// Stop closes the listener and every connection accepted on it.
func (sa *Listening) Stop() {
	sa.l.Close()
	sa.s.mu.Lock()
	defer sa.s.mu.Unlock()
	sa.lst.stopped = true
	for c, of := range sa.s.conns {
		if of == sa.lst {
			c.Close()
		}
	}
}

// Clients lists the remote addresses (IP:port) of the connections open
// on the listener, in no particular order.
func (sa *Listening) Clients() []string {
	sa.s.mu.Lock()
	defer sa.s.mu.Unlock()
	var out []string
	for c, of := range sa.s.conns {
		if of == sa.lst {
			out = append(out, c.RemoteAddr().String())
		}
	}
	return out
}

func (s *Server) serve(l net.Listener, lst *listening) error {
	defer s.polls.Track(l)()
	go func() {
		<-s.done
		l.Close()
	}()
	for {
		conn, err := l.Accept()
		if err != nil {
			if s.isClosed() || errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return err
		}
		if !s.track(conn, lst) {
			conn.Close()
			continue
		}
		if lst.connected != nil {
			lst.connected()
		}
		go s.serveConn(conn, lst.valid)
	}
}

// errLeaseLost ends a connection of a head that no longer holds its
// address.
var errLeaseLost = errors.New("this head's lease on the service address has run out")

func (s *Server) serveConn(conn net.Conn, valid func() bool) {
	defer func() {
		s.untrack(conn)
		conn.Close()
	}()
	from, _ := netip.ParseAddrPort(conn.RemoteAddr().String())
	sem := make(chan struct{}, s.cfg.InFlight)
	guard := func(svc rpcserver.Service) rpcserver.Service {
		return s.leased(conn, valid, s.limited(sem, svc))
	}
	srv := rpcserver.NewServer(map[uint32]rpcserver.Service{
		nfsv3.NFS_PROGRAM_PROGRAM_NUMBER:   guard(nfsv3.NewNfsProgramService(&nfsProgram{s: s})),
		mount.MOUNT_PROGRAM_PROGRAM_NUMBER: guard(mount.NewMountProgramService(&mountProgram{s: s})),
	}, authenticator{from: from})
	defer s.polls.Track(conn)()
	err := srv.HandleConnection(&recordGuard{r: conn, max: maxRecord}, pollingWriter{conn, &s.polls})
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, errLeaseLost) && !s.isClosed() {
		s.logf("nfs: closing the connection from %s: %v", conn.RemoteAddr(), err)
	}
}

// pollingWriter writes replies to a connection; after each, the
// goroutine that wrote it polls the gateway's connections for the next
// request (Config.PollNext).
type pollingWriter struct {
	conn  net.Conn
	polls *rpc.Poller
}

func (w pollingWriter) Write(b []byte) (int, error) {
	n, err := w.conn.Write(b)
	if err == nil {
		w.polls.Poll()
	}
	return n, err
}

// leased answers a call only while valid holds, before and after it is
// served (nil valid: always).
func (s *Server) leased(conn net.Conn, valid func() bool, svc rpcserver.Service) rpcserver.Service {
	if valid == nil {
		return svc
	}
	return func(ctx context.Context, vers, proc uint32, args io.ReadCloser, ret func(int) io.Writer) (rpcv2.AcceptedReplyData, error) {
		if !valid() {
			conn.Close()
			return nil, errLeaseLost
		}
		reply, err := svc(ctx, vers, proc, args, ret)
		if !valid() {
			conn.Close()
			return nil, errLeaseLost
		}
		return reply, err
	}
}

// limited serves at most cap(sem) requests of a connection at once: the
// next request is read only once one of them has read its arguments.
//
// A call whose arguments do not decode gets GARBAGE_ARGS (RFC 5531), and
// the connection goes on: the generated dispatcher has read the rest of
// the record by then. (Returned as an error, it would leave the
// connection open but unread.) A reply that does not encode gets
// SYSTEM_ERR.
func (s *Server) limited(sem chan struct{}, svc rpcserver.Service) rpcserver.Service {
	return func(ctx context.Context, vers, proc uint32, args io.ReadCloser, ret func(int) io.Writer) (rpcv2.AcceptedReplyData, error) {
		sem <- struct{}{}
		defer func() { <-sem }()
		answered := false
		reply, err := svc(ctx, vers, proc, args, func(n int) io.Writer { answered = true; return ret(n) })
		if err == nil {
			return reply, nil
		}
		if answered {
			s.logf("nfs: encoding the reply to procedure %d: %v", proc, err)
			return &rpcv2.AcceptedReplyData_default{Stat: rpcv2.SYSTEM_ERR}, nil
		}
		return &rpcv2.AcceptedReplyData_default{Stat: rpcv2.GARBAGE_ARGS}, nil
	}
}

// track records a connection of lst; false if the server or lst stopped.
func (s *Server) track(conn net.Conn, lst *listening) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || lst.stopped {
		return false
	}
	s.conns[conn] = lst
	return true
}

func (s *Server) untrack(conn net.Conn) {
	s.mu.Lock()
	delete(s.conns, conn)
	s.mu.Unlock()
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Close stops serving: the listener and every connection are closed at
// once (a head that lost its lease must not answer another request), and
// then the files it holds open are flushed and closed.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	for conn := range s.conns {
		conn.Close()
	}
	s.mu.Unlock()
	close(s.done)
	s.files.closeAll()
}

// resolveExport finds the inode of an export's directory.
func (s *Server) resolveExport(e *export) (*proto.Inode, error) {
	n, err := s.c.GetAttr(proto.RootIno)
	if err != nil {
		return nil, err
	}
	for _, name := range splitPath(e.Path) {
		if n, err = s.c.Lookup(n.Ino, name); err != nil {
			return nil, err
		}
	}
	if n.Mode&0o170000 != 0o040000 {
		return nil, fmt.Errorf("%s is not a directory", e.Path)
	}
	e.root.Store(n.Ino)
	s.byRoot.Store(n.Ino, e)
	return n, nil
}

func splitPath(p string) []string {
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}

// newVerifier returns 8 random bytes.
func newVerifier() [8]byte {
	var v [8]byte
	if _, err := rand.Read(v[:]); err != nil {
		binary.BigEndian.PutUint64(v[:], uint64(time.Now().UnixNano()))
	}
	return v
}

// logLimiter lets through one log line a second.
type logLimiter struct{ last atomic.Int64 }

func (l *logLimiter) allow() bool {
	now := time.Now().UnixNano()
	last := l.last.Load()
	return now-last >= int64(time.Second) && l.last.CompareAndSwap(last, now)
}
