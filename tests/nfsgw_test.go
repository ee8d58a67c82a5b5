package tests

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	nfsc "github.com/willscott/go-nfs-client/nfs"
	nfsrpc "github.com/willscott/go-nfs-client/nfs/rpc"

	"tandemfs/internal/testcluster"
)

// gateway is a `tandem nfs` process serving a test cluster.
type gateway struct {
	addr string // host:port of MOUNT and NFS
	cmd  *exec.Cmd
	log  string
}

// startGateway runs `tandem nfs` for c with the given export lines, and
// stops it (SIGTERM) when the test ends.
func startGateway(t *testing.T, c *testcluster.Cluster, exports ...string) *gateway {
	t.Helper()
	g := &gateway{log: filepath.Join(c.Dir(), fmt.Sprintf("nfs-%d.log", time.Now().UnixNano()))}
	args := []string{"nfs", "--meta", c.Layout.MetaAddr, "--secret-file", c.Layout.SecretFile, "--listen", "127.0.0.1:0"}
	for _, e := range exports {
		args = append(args, "--export", e)
	}
	g.cmd = exec.Command(testcluster.Binary(t), args...)
	logf, err := os.Create(g.log)
	if err != nil {
		t.Fatal(err)
	}
	pr, pw, _ := os.Pipe()
	g.cmd.Stdout, g.cmd.Stderr = logf, pw
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	t.Cleanup(g.stop)
	serving := regexp.MustCompile(`serving NFSv3 on (\S+)`)
	found := make(chan string, 1)
	go func() {
		defer logf.Close()
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			fmt.Fprintln(logf, sc.Text())
			if m := serving.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
	}()
	select {
	case g.addr = <-found:
	case <-time.After(30 * time.Second):
		t.Fatalf("tandem nfs did not start; its log: %s", readFile(t, g.log))
	}
	return g
}

func (g *gateway) stop() {
	if g.cmd.ProcessState != nil {
		return
	}
	g.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { g.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		g.cmd.Process.Kill()
		<-done
	}
}

func (g *gateway) port() string {
	_, p, _ := net.SplitHostPort(g.addr)
	return p
}

// url is a libnfs URL of path on the gateway.
func (g *gateway) url(path string) string {
	return fmt.Sprintf("nfs://127.0.0.1%s?version=3&nfsport=%s&mountport=%s&auto-traverse-mounts=0", path, g.port(), g.port())
}

// nfsMount mounts export as uid/gid with the Go NFS client, over one
// connection for MOUNT and NFS (no portmapper).
func (g *gateway) nfsMount(t *testing.T, export string, uid, gid uint32) *nfsc.Target {
	t.Helper()
	v, err := g.tryMount(export, uid, gid)
	if err != nil {
		t.Fatalf("mount %s as %d:%d: %v", export, uid, gid, err)
	}
	return v
}

func (g *gateway) tryMount(export string, uid, gid uint32) (*nfsc.Target, error) {
	// The library binds a random local port of its own and tries again
	// on a port in use only for privileged ones: here, up to ten times.
	rc, err := nfsrpc.DialTCP("tcp", g.addr, false)
	for i := 0; i < 10 && errors.Is(err, syscall.EADDRINUSE); i++ {
		rc, err = nfsrpc.DialTCP("tcp", g.addr, false)
	}
	if err != nil {
		return nil, err
	}
	auth := nfsrpc.NewAuthUnix("tandem-test", uid, gid)
	auth.Gids = gid // the library lists one supplementary group: the primary
	m := &nfsc.Mount{Client: rc}
	return m.Mount(export, auth.Auth())
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return strings.TrimSpace(string(b))
}
