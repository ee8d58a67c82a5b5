package cluster

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"tandemfs/internal/nfsha"
	fenceagents "tandemfs/scripts/fence"
)

// NFSLayout is a one-machine cluster's NFS gateway: two heads holding one
// service address on a loopback alias, as NSS-HA's pair holds its service
// IP, and the exports they serve.
type NFSLayout struct {
	Address string   `json:"address"` // host:port clients mount
	Heads   []string `json:"heads"`
	Exports []string `json:"exports"`
}

// DefaultNFSExport is what `tandem up --nfs` exports: everything, to this
// machine, writable, with root as root (the tests and benchmarks copy as
// root).
const DefaultNFSExport = "/ 127.0.0.0/8(rw,no_root_squash)"

// nfsAlias is the loopback address the service address lives on.
const nfsAlias = "127.0.0.10"

func (o *Options) nfsLayout(l *Layout) error {
	if !o.NFS || l.NFS != nil {
		return nil
	}
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	_, port, _ := net.SplitHostPort(ports[0])
	exports := o.NFSExports
	if len(exports) == 0 {
		exports = []string{DefaultNFSExport}
	}
	l.NFS = &NFSLayout{Address: net.JoinHostPort(nfsAlias, port), Heads: []string{"nfs1", "nfs2"}, Exports: exports}
	return saveLayout(o.Dir, l)
}

// nfsFenceConfig writes, unless the administrator gave a fence config, one
// that fences a head by killing it (fence_tandem_kill and its PID file),
// and returns its path; "" without an NFS gateway.
func (o *Options) nfsFenceConfig(l *Layout) (string, error) {
	if l.NFS == nil || o.FenceConfig != "" {
		return o.FenceConfig, nil
	}
	agent := filepath.Join(o.Dir, "run", "fence_tandem_kill")
	if err := os.WriteFile(agent, fenceagents.Kill, 0o700); err != nil {
		return "", err
	}
	type agentJSON struct {
		Name    string            `json:"name"`
		Command string            `json:"command"`
		Options map[string]string `json:"options"`
	}
	servers := map[string][]agentJSON{}
	for _, h := range l.NFS.Heads {
		servers[h] = []agentJSON{{Name: "kill", Command: agent, Options: map[string]string{"pidfile": pidFile(o.Dir, h)}}}
	}
	b, _ := json.MarshalIndent(map[string]any{"timeout": "10s", "servers": servers}, "", "  ")
	path := filepath.Join(o.Dir, "nfs-fence.json")
	return path, os.WriteFile(path, append(b, '\n'), 0o600)
}

// startNFS starts the gateway's heads and waits until one serves.
func (o *Options) startNFS(l *Layout) error {
	if l.NFS == nil {
		return nil
	}
	iface := ""
	if os.Geteuid() == 0 {
		iface = "lo" // an alias there shows in `ip addr`; 127/8 is local anyway
	}
	for _, h := range l.NFS.Heads {
		args := []string{"nfs", "--meta", l.MetaAddr, "--secret-file", l.SecretFile, "--head", h,
			"--service", l.NFS.Address, "--interface", iface, "--head-addr", "this machine (" + h + ")"}
		for _, e := range l.NFS.Exports {
			args = append(args, "--export", e)
		}
		started, err := o.start(h, args, nil)
		if err != nil {
			return err
		}
		if started {
			o.progress("started NFS gateway head %s for %s", h, l.NFS.Address)
		}
	}
	return o.waitFor(l.NFS.Heads[0], "a gateway head to serve "+l.NFS.Address, func() error {
		c, err := net.Dial("tcp", l.NFS.Address)
		if err != nil {
			return fmt.Errorf("no head serves %s yet", l.NFS.Address)
		}
		return c.Close()
	})
}

// dropNFSAlias takes the service address's loopback alias away once no
// head runs.
func dropNFSAlias(l *Layout) {
	if l.NFS != nil && os.Geteuid() == 0 {
		nfsha.DropAddress(nfsha.Service{Address: l.NFS.Address, Interface: "lo"})
	}
}
