package hamatrix

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"tandemfs/internal/netlab"
)

// status is the part of `tandem status --json` the matrix reads.
type status struct {
	// NFS is the NFS gateway (nfs_test.go), if any.
	NFS *struct {
		Address string `json:"address"`
		Active  string `json:"active"`
	} `json:"nfs"`
	Meta struct {
		Replicas []struct {
			Addr  string `json:"addr"`
			State string `json:"state"`
		} `json:"replicas"`
	} `json:"meta"`
	Servers []struct {
		ID   uint32 `json:"id"`
		Addr string `json:"addr"`
	} `json:"servers"`
	Targets []struct {
		ID     uint32 `json:"id"`
		Server uint32 `json:"server"`
		Path   string `json:"path"`
		State  string `json:"state"`
	} `json:"targets"`
	Chains []chain `json:"chains"`
	// Caches are the targets' flash caches (cluster option cache).
	Caches []struct {
		Path  string `json:"path"`
		Dirty uint64 `json:"dirty_bytes"`
	} `json:"caches"`
	Resyncs []struct {
		Chain   uint32 `json:"chain"`
		Target  uint32 `json:"target"`
		Percent uint32 `json:"percent"`
		Copied  uint64 `json:"chunks_copied"`
	} `json:"resyncs"`
	Fencing []struct {
		Server  uint32 `json:"server"`
		Fenced  bool   `json:"fenced"`
		Summary string `json:"summary"`
	} `json:"fencing"`
	// ECRepair and ECScrub are the erasure-coding rows' (ec_test.go).
	ECRepair *struct {
		Degraded     uint64 `json:"degraded_stripes"`
		RebuiltBytes uint64 `json:"rebuilt_bytes"`
	} `json:"ec_repair"`
	ECScrub *struct {
		Running     bool   `json:"running"`
		Files       uint64 `json:"files"`
		Stripes     uint64 `json:"stripes"`
		Missing     uint64 `json:"missing_shards"`
		Mismatched  uint64 `json:"mismatched_shards"`
		Rebuilt     uint64 `json:"rebuilt_shards"`
		Unreachable uint64 `json:"unreachable_shards"`
		Ended       string `json:"ended"`
	} `json:"ec_scrub"`

	Time  time.Time `json:"time"`  // when the leader answered, from a watch
	Error string    `json:"error"` // a watch's round without a leader

	at     time.Time                // when the answer came
	leader string                   // the address of the replica that answered
	hostOf func(addr string) string // lab host of a server address
}

// chain is one chain of the cluster map: members head first, each with its
// state (serving, syncing, offline).
type chain struct {
	ID      uint32   `json:"id"`
	Version uint32   `json:"version"`
	Targets []uint32 `json:"targets"`
	States  []string `json:"states"`
}

// head is the target that serves the chain: its first serving member.
func (c chain) head() uint32 {
	for i, s := range c.States {
		if s == "serving" {
			return c.Targets[i]
		}
	}
	return 0
}

func (c chain) String() string {
	ms := make([]string, len(c.Targets))
	for i, t := range c.Targets {
		ms[i] = fmt.Sprintf("%d:%s", t, c.States[i])
	}
	return fmt.Sprintf("chain %d v%d [%s]", c.ID, c.Version, strings.Join(ms, " "))
}

func (st *status) String() string {
	if st == nil {
		return "none"
	}
	var cs []string
	for _, c := range st.replicated() {
		cs = append(cs, c.String())
	}
	var ts []string
	for _, t := range st.Targets {
		ts = append(ts, fmt.Sprintf("%d@%s:%s", t.ID, st.hostOfServer(t.Server), t.State))
	}
	for _, r := range st.Resyncs {
		cs = append(cs, fmt.Sprintf("resync chain %d -> target %d %d%% (%d chunks copied)", r.Chain, r.Target, r.Percent, r.Copied))
	}
	return fmt.Sprintf("leader %s; targets %s; %s", st.leader, strings.Join(ts, " "), strings.Join(cs, "; "))
}

// replicated are the chains with two members or more.
func (st *status) replicated() []chain {
	var out []chain
	for _, c := range st.Chains {
		if len(c.Targets) > 1 {
			out = append(out, c)
		}
	}
	return out
}

// allServing reports whether every member of every replicated chain serves.
func (st *status) allServing() bool {
	for _, c := range st.replicated() {
		for _, s := range c.States {
			if s != "serving" {
				return false
			}
		}
	}
	return true
}

// anyOffline reports whether a member of a replicated chain is offline:
// its server has been failed over.
func (st *status) anyOffline() bool {
	for _, c := range st.replicated() {
		if slices.Contains(c.States, "offline") {
			return true
		}
	}
	return false
}

// versions are the replicated chains' versions by chain ID.
func (st *status) versions() map[uint32]uint32 {
	out := map[uint32]uint32{}
	for _, c := range st.replicated() {
		out[c.ID] = c.Version
	}
	return out
}

// heads are the replicated chains' heads by chain ID.
func (st *status) heads() map[uint32]uint32 {
	out := map[uint32]uint32{}
	for _, c := range st.replicated() {
		out[c.ID] = c.head()
	}
	return out
}

// onlineServers counts the servers all of whose targets are online.
func (st *status) onlineServers() int {
	n := 0
	for _, s := range st.Servers {
		online := false
		for _, t := range st.Targets {
			if t.Server == s.ID {
				online = t.State == "online"
				if !online {
					break
				}
			}
		}
		if online {
			n++
		}
	}
	return n
}

// degraded counts the coded stripes written without a shard, waiting for
// the leader to rebuild it.
func (st *status) degraded() uint64 {
	if st.ECRepair == nil {
		return 0
	}
	return st.ECRepair.Degraded
}

// rebuiltBytes is what the leader rebuilt of coded stripes since it took
// over.
func (st *status) rebuiltBytes() uint64 {
	if st.ECRepair == nil {
		return 0
	}
	return st.ECRepair.RebuiltBytes
}

// targetsOut reports whether every target of the hosts' storage servers
// is out of service (offline or failed).
func (st *status) targetsOut(hosts []string) bool {
	n := 0
	for _, t := range st.Targets {
		if slices.Contains(hosts, st.hostOfServer(t.Server)) {
			if t.State == "online" {
				return false
			}
			n++
		}
	}
	return n > 0
}

// replicasUp counts the metadata replicas that lead or follow.
func (st *status) replicasUp() int {
	n := 0
	for _, r := range st.Meta.Replicas {
		if r.State == "leader" || r.State == "follower" {
			n++
		}
	}
	return n
}

// hostOfServer names the lab host of a storage server.
func (st *status) hostOfServer(id uint32) string {
	for _, s := range st.Servers {
		if s.ID == id && st.hostOf != nil {
			return st.hostOf(s.Addr)
		}
	}
	return fmt.Sprintf("server%d", id)
}

// hostOfTarget names the lab host of a target.
func (st *status) hostOfTarget(id uint32) string {
	for _, t := range st.Targets {
		if t.ID == id {
			return st.hostOfServer(t.Server)
		}
	}
	return fmt.Sprintf("target%d", id)
}

// targetPath is the directory of a target.
func (st *status) targetPath(id uint32) string {
	for _, t := range st.Targets {
		if t.ID == id {
			return t.Path
		}
	}
	return ""
}

// servingHosts are the hosts that still have a serving member in some
// replicated chain.
func (st *status) servingHosts() []string {
	var out []string
	for _, c := range st.replicated() {
		for i, s := range c.States {
			if h := st.hostOfTarget(c.Targets[i]); s == "serving" && !slices.Contains(out, h) {
				out = append(out, h)
			}
		}
	}
	slices.Sort(out)
	return out
}

// monitor follows the cluster status in the background for the whole of a
// scenario, so that changes are timed against the moment of injection. It
// runs one `tandem status --watch --json` on cli, which asks every metadata
// replica at once each round over connections it keeps, and reads the
// statuses from its log: a process started per poll cost the loaded
// machine about 40 ms of CPU each.
type monitor struct {
	proc    *netlab.Proc
	path    string // the watch's output, JSON lines
	stopped chan struct{}
	once    sync.Once

	mu    sync.Mutex
	snaps []*status
	errs  int      // rounds without a leader's answer
	off   int64    // how far path has been read
	part  []byte   // a line read only in part so far
	c     *cluster // for parseStatus
}

// pollEvery is the interval between two status rounds; the cluster's
// reactions are measured to this resolution.
const pollEvery = 150 * time.Millisecond

func startMonitor(c *cluster) *monitor {
	c.t.Helper()
	path := filepath.Join(c.dir, "logs", "cli-status-watch.jsonl")
	m := &monitor{c: c, path: path, stopped: make(chan struct{})}
	if fi, err := os.Stat(path); err == nil {
		m.off = fi.Size() // the watch of an earlier scenario
	}
	p, err := c.host("cli").Start("status watch", path, c.bin, "status", "--json", "--watch", pollEvery.String(),
		"--meta", strings.Join(c.metaAddrs(), ","), "--secret-file", c.secret)
	if err != nil {
		c.t.Fatal(err)
	}
	m.proc = p
	go func() {
		for {
			select {
			case <-m.stopped:
				return
			case <-time.After(50 * time.Millisecond):
				m.read()
			}
		}
	}()
	return m
}

// read takes in the statuses the watch wrote since the last read.
func (m *monitor) read() {
	m.mu.Lock()
	defer m.mu.Unlock()
	f, err := os.Open(m.path)
	if err != nil {
		return
	}
	defer f.Close()
	data, _ := io.ReadAll(io.NewSectionReader(f, m.off, 1<<40))
	m.off += int64(len(data))
	data = append(m.part, data...)
	end := bytes.LastIndexByte(data, '\n') + 1
	m.part = append([]byte(nil), data[end:]...)
	for _, line := range bytes.Split(data[:end], []byte("\n")) {
		if !bytes.HasPrefix(line, []byte("{")) {
			continue // an error message of the watch itself
		}
		st, err := m.c.parseStatus(line)
		if err != nil || st.Error != "" {
			m.errs++
			continue
		}
		m.snaps = append(m.snaps, st)
	}
}

// stop ends the watch and takes in its last statuses.
func (m *monitor) stop() {
	m.once.Do(func() {
		m.proc.Signal(syscall.SIGTERM)
		if err := m.proc.Wait(5 * time.Second); err == netlab.ErrTimeout {
			m.proc.Kill9()
		}
		close(m.stopped)
		m.read()
	})
}

// latest is the newest status seen, or nil.
func (m *monitor) latest() *status {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.snaps) == 0 {
		return nil
	}
	return m.snaps[len(m.snaps)-1]
}

// first returns the first status seen after since for which cond holds.
func (m *monitor) first(since time.Time, cond func(*status) bool) *status {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, st := range m.snaps {
		if st.at.After(since) && cond(st) {
			return st
		}
	}
	return nil
}

// all returns every status seen after since.
func (m *monitor) all(since time.Time) []*status {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*status
	for _, st := range m.snaps {
		if st.at.After(since) {
			out = append(out, st)
		}
	}
	return out
}

// waitFor waits until a status seen after since satisfies cond, and
// returns it, or nil after timeout.
func (m *monitor) waitFor(since time.Time, timeout time.Duration, cond func(*status) bool) *status {
	deadline := time.Now().Add(timeout)
	for {
		if st := m.first(since, cond); st != nil {
			return st
		}
		if time.Now().After(deadline) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cachesOf is the dirty bytes of each cache whose target's path shares
// the directory of target (a host's targets sit side by side); nil st
// has none.
func (st *status) cachesOf(target string) []uint64 {
	if st == nil {
		return nil
	}
	var out []uint64
	for _, k := range st.Caches {
		if filepath.Dir(k.Path) == filepath.Dir(target) {
			out = append(out, k.Dirty)
		}
	}
	return out
}
