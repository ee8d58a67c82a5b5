package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"tandemfs/internal/cluster"
	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
	"tandemfs/internal/wire"
)

// connectFlags are the ways a tool finds the metadata service: a data
// directory of `tandem up`, or an address and a secret file.
type connectFlags struct {
	dir, meta, secretFile string
}

func (c *connectFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&c.dir, "data", defaultDataDir(), "data directory of `tandem up`; $TANDEM_DATA")
	f.StringVar(&c.meta, "meta", "", "metadata service address (instead of --data)")
	f.StringVar(&c.secretFile, "secret-file", "", "cluster secret file (with --meta)")
}

// metaClients returns a client per metadata replica.
func (c *connectFlags) client() ([]*rpc.Client, error) {
	addr, secret, err := c.resolve()
	if err != nil {
		return nil, err
	}
	return metaClients(addr, secret), nil
}

// clusterStatus asks the metadata leader for the status, for tools that
// act on what it lists; it also returns the cluster secret they need.
func (c *connectFlags) clusterStatus() (*proto.StatusReply, rpc.Secret, error) {
	addr, secret, err := c.resolve()
	if err != nil {
		return nil, nil, err
	}
	st, _, err := askReplicas(metaClients(addr, secret))
	return st, secret, c.explain(err)
}

// explain turns a failure to reach the metadata service of a cluster
// started with `tandem up` into "stopped" when none of its metadata
// replicas runs.
func (c *connectFlags) explain(err error) error {
	if err == nil || c.meta != "" || !cluster.Stopped(c.dir) {
		return err
	}
	return fmt.Errorf("the cluster in %s is stopped: no metadata service runs (start it with `tandem up --data %s`)", c.dir, c.dir)
}

// metaCallTimeout is how long a tool waits for a metadata replica.
const metaCallTimeout = 10 * time.Second

// metaClients returns a client per metadata replica address.
func metaClients(addr string, secret rpc.Secret) []*rpc.Client {
	var out []*rpc.Client
	for _, a := range strings.Split(addr, ",") {
		cl := rpc.NewClient(strings.TrimSpace(a), secret)
		cl.CallTimeout = metaCallTimeout
		out = append(out, cl)
	}
	return out
}

// resolve returns the metadata replicas' addresses (comma-separated) and
// the cluster secret.
func (c *connectFlags) resolve() (string, rpc.Secret, error) {
	addr, secretFile := c.meta, c.secretFile
	if addr == "" {
		l, err := cluster.LoadLayout(c.dir)
		if err != nil {
			return "", nil, err
		}
		addr, secretFile = l.MetaAddr, l.SecretFile
	}
	if secretFile == "" {
		return "", nil, fmt.Errorf("--meta needs --secret-file")
	}
	secret, err := rpc.ReadSecretFile(secretFile)
	if err != nil {
		return "", nil, err
	}
	return addr, secret, nil
}

// replicaJSON is one metadata replica as status sees it.
type replicaJSON struct {
	Addr  string `json:"addr"`
	State string `json:"state"` // leader, follower, unreachable, no answer, or the error
}

// askReplicas asks every replica for the status, as askRound does with the
// tools' call timeout, and closes the clients.
func askReplicas(cls []*rpc.Client) (*proto.StatusReply, []replicaJSON, error) {
	defer func() {
		for _, cl := range cls {
			cl.Close()
		}
	}()
	st, reps, _, err := askRound(context.Background(), cls, metaCallTimeout)
	return st, reps, err
}

// followerGrace is how long a round waits for the other replicas once the
// leader has answered: followers answer in milliseconds, so a replica
// still silent then is hung (stopped, or cut off), and waiting longer
// would only delay the leader's answer.
const followerGrace = 250 * time.Millisecond

// askRound asks every replica for the status at once: the leader answers,
// the others say they follow (EAGAIN) or cannot be reached. The round ends
// when all have answered, followerGrace after the leader answered, or
// after timeout; replicas silent by then are listed as such. Replicas are
// listed in the order of cls; at is when the leader's answer came.
func askRound(ctx context.Context, cls []*rpc.Client, timeout time.Duration) (st *proto.StatusReply, reps []replicaJSON, at time.Time, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type answer struct {
		i   int
		st  *proto.StatusReply
		err error
		at  time.Time
	}
	answers := make(chan answer, len(cls))
	for i, cl := range cls {
		go func() {
			var r proto.StatusReply
			err := cl.CallContext(ctx, proto.OpStatus, nil, func(d *wire.Dec) error { r.Decode(d); return nil })
			answers <- answer{i, &r, err, time.Now()}
		}()
	}
	got := make([]*answer, len(cls))
	var grace <-chan time.Time // set once a leader answered
collect:
	for range cls {
		select {
		case a := <-answers:
			got[a.i] = &a
			if a.err == nil && grace == nil {
				grace = time.After(followerGrace)
			}
		case <-grace:
			break collect
		case <-ctx.Done():
			break collect
		}
	}
	var errs []error
	for i, cl := range cls {
		state := "leader"
		switch a := got[i]; {
		case a == nil:
			state = "no answer"
			errs = append(errs, fmt.Errorf("metadata service %s: no answer within the round", cl.Addr))
		case a.err == nil && st == nil:
			st, at = a.st, a.at
		case a.err == nil:
			state = "leader (a second one: check the logs)"
		case errors.Is(a.err, syscall.EAGAIN):
			state = "follower"
		case rpc.IsNetError(a.err):
			state = "unreachable"
			errs = append(errs, fmt.Errorf("metadata service %s: %w", cl.Addr, a.err))
		default:
			state = a.err.Error()
			errs = append(errs, fmt.Errorf("metadata service %s: %w", cl.Addr, a.err))
		}
		reps = append(reps, replicaJSON{Addr: cl.Addr, State: state})
	}
	if st == nil {
		if len(errs) == 0 {
			errs = append(errs, errors.New("no metadata replica leads (is a majority of them running?)"))
		}
		return nil, reps, time.Time{}, errors.Join(errs...)
	}
	return st, reps, at, nil
}

func init() {
	var cf connectFlags
	var asJSON bool
	var every time.Duration
	var count int
	cmd := &cobra.Command{
		Use:   "status [--data DIR | --meta ADDR --secret-file F] [--json] [--watch INTERVAL [--count N]]",
		Short: "Show servers, targets, capacity and health",
		Long: `Show servers, targets, capacity and health.

With --watch the status is shown again every INTERVAL until interrupted (or
--count times): the screen is redrawn on a terminal, and with --json each
status is one line of JSON with the "time" the leader answered. One process,
with one connection per replica, serves every round, so polling this way costs
the machine far less than running status in a loop.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if every <= 0 && cmd.Flags().Changed("count") {
				return errors.New("--count needs --watch")
			}
			cls, err := cf.client()
			if err != nil {
				return err
			}
			if every > 0 {
				return cf.explain(watchStatus(cmd.Context(), cls, every, count, asJSON))
			}
			st, reps, err := askReplicas(cls)
			if err != nil {
				return cf.explain(err)
			}
			j := statusToJSON(st, reps)
			if q, err := quotaList(&cf, proto.QuotaListReq{All: true, AnyKind: true, Limited: true}); err == nil {
				j.Quotas = []quotaJSON{}
				for i := range q.Records {
					r := &q.Records[i]
					j.Quotas = append(j.Quotas, quotaToJSON(r, q.Grace[r.Kind], q.Now))
				}
			}
			if asJSON {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(j)
			}
			printStatus(j)
			return nil
		},
	}
	cf.add(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts")
	cmd.Flags().DurationVar(&every, "watch", 0, "show the status again every `INTERVAL` (e.g. 1s) until interrupted")
	cmd.Flags().IntVar(&count, "count", 0, "with --watch: stop after `N` rounds (0: never)")
	rootCmd.AddCommand(cmd)
}

func stateName(s uint8) string {
	switch s {
	case proto.TargetOnline:
		return "online"
	case proto.TargetFailed:
		return "failed"
	}
	return "offline"
}

type statusJSON struct {
	Meta struct {
		Addr        string        `json:"addr"`
		Raft        string        `json:"raft_state"`
		Applied     uint64        `json:"applied_index"`
		Inodes      uint64        `json:"inodes_allocated"`
		InlineLimit uint32        `json:"inline_limit"`
		Clients     uint32        `json:"clients"`
		FileLocks   uint32        `json:"file_locks"`
		LockedFiles uint32        `json:"locked_files"`
		DirLeases   uint32        `json:"dir_leases"`
		LeasedDirs  uint32        `json:"leased_dirs"`
		FileLeases  uint32        `json:"file_leases"`
		LeasedFiles uint32        `json:"leased_files"`
		Replicas    []replicaJSON `json:"replicas"`
	} `json:"meta"`
	Servers []serverJSON `json:"servers"`
	Targets []targetJSON `json:"targets"`
	Chains  []chainJSON  `json:"chains"`
	Resyncs []resyncJSON `json:"resyncs,omitempty"`
	Scrubs  []scrubJSON  `json:"scrubs,omitempty"`
	Fencing []fenceJSON  `json:"fencing,omitempty"`
	// Total and Free count each file system of the online targets once.
	Total       uint64   `json:"total_bytes"`
	Free        uint64   `json:"free_bytes"`
	FileSystems int      `json:"file_systems"`
	Offline     []uint32 `json:"offline_targets"` // not counted in the capacity
	Healthy     bool     `json:"healthy"`
	// Quotas with a limit, and their usage (tandem quota report lists
	// every one).
	Quotas []quotaJSON `json:"quotas,omitempty"`
	// NFS is the NFS gateway's service addresses and heads, if any.
	NFS *nfsJSON `json:"nfs,omitempty"`
	// ECRepair: erasure-coded stripes written without a shard, and the
	// leader's rebuilding of them (absent when there has been none).
	ECRepair *ecRepairJSON `json:"ec_repair,omitempty"`
	// ECScrub: the parity check of erasure-coded files (tandem scrub), if
	// one ran since the leader took over.
	ECScrub *ecScrubJSON `json:"ec_scrub,omitempty"`
	// Caches are the flash caches in front of targets (tandem storage
	// --cache), as their servers last reported them.
	Caches []cacheJSON `json:"caches,omitempty"`
}

// cacheJSON is one target's flash cache.
type cacheJSON struct {
	Target   uint32  `json:"target"`
	Path     string  `json:"path"`
	Dir      string  `json:"dir"`
	Mode     string  `json:"mode"`
	Size     uint64  `json:"size_bytes"`
	Used     uint64  `json:"used_bytes"`
	Dirty    uint64  `json:"dirty_bytes"`
	Files    uint64  `json:"files"`
	Hits     uint64  `json:"hits"`
	Misses   uint64  `json:"misses"`
	HitRatio float64 `json:"hit_ratio"`
	Promoted uint64  `json:"promoted"`
	Evicted  uint64  `json:"evicted"`
	Destaged uint64  `json:"destaged_bytes"`
	// DestageRate is the bytes a second destaged of late.
	DestageRate uint64 `json:"destage_bytes_per_sec"`
	Failed      string `json:"failed,omitempty"`
}

func cachesJSON(rs []proto.CacheReport) []cacheJSON {
	var out []cacheJSON
	for _, r := range rs {
		ratio := 0.0
		if r.Hits+r.Misses > 0 {
			ratio = float64(r.Hits) / float64(r.Hits+r.Misses)
		}
		out = append(out, cacheJSON{Target: r.Target, Path: r.Path, Dir: r.Dir, Mode: r.Mode, Size: r.Size, Used: r.Used,
			Dirty: r.Dirty, Files: r.Files, Hits: r.Hits, Misses: r.Misses, HitRatio: ratio, Promoted: r.Promoted,
			Evicted: r.Evicted, Destaged: r.Destaged, DestageRate: r.DestageRate, Failed: r.Failed})
	}
	return out
}

// printCaches shows one line per cached target, and a warning for a cache
// device that was dropped.
func printCaches(cs []cacheJSON) {
	if len(cs) == 0 {
		return
	}
	fmt.Println()
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "CACHE\tTARGET\tMODE\tSIZE\tUSED\tDIRTY\tDESTAGE\tHIT RATIO\tPROMOTED\tEVICTED\tDIR")
	for _, c := range cs {
		state, mode := "serving", c.Mode
		if c.Failed != "" {
			state, mode = "FAILED", c.Mode+" (disk only)"
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\t%s/s\t%.1f%% of %d\t%d\t%d\t%s\n", state, c.Target, mode, humanBytes(c.Size),
			humanBytes(c.Used), humanBytes(c.Dirty), humanBytes(c.DestageRate), 100*c.HitRatio, c.Hits+c.Misses, c.Promoted, c.Evicted, c.Dir)
	}
	w.Flush()
	for _, c := range cs {
		if c.Failed != "" {
			fmt.Printf("warning: the cache of target %d failed and is not used: %s\n", c.Target, c.Failed)
		}
	}
}

type ecScrubJSON struct {
	Running     bool   `json:"running"`
	Percent     uint32 `json:"percent"`
	Files       uint64 `json:"files"`
	Stripes     uint64 `json:"stripes"`
	Missing     uint64 `json:"missing_shards"`
	Mismatched  uint64 `json:"mismatched_shards"`
	Rebuilt     uint64 `json:"rebuilt_shards"`
	Unreachable uint64 `json:"unreachable_shards"`
	Started     string `json:"started"`
	Ended       string `json:"ended,omitempty"`
}

type ecRepairJSON struct {
	DegradedStripes uint64 `json:"degraded_stripes"`
	RebuiltShards   uint64 `json:"rebuilt_shards"`
	RebuiltBytes    uint64 `json:"rebuilt_bytes"`
	BytesPerSec     uint64 `json:"bytes_per_sec"`
	// EvacuatingFiles: coded files with shards still on retired targets
	// (servers silent past --ec-rebuild-after).
	EvacuatingFiles uint64 `json:"evacuating_files"`
	// UnplaceableFiles: coded files with a shard on a retired target and
	// no failure domain left to move it to (degraded until it returns).
	UnplaceableFiles uint64 `json:"unplaceable_files"`
}

type serverJSON struct {
	ID   uint32 `json:"id"`
	Addr string `json:"addr"`
	UUID string `json:"uuid"`
	Rack string `json:"rack,omitempty"`
	// PrivateSeen is the last heartbeat over the private network, for
	// servers that have one.
	PrivateSeen string `json:"private_last_seen,omitempty"`
	// The server's online capacity, each of its file systems once.
	Total       uint64 `json:"total_bytes"`
	Free        uint64 `json:"free_bytes"`
	FileSystems int    `json:"file_systems"`
	Targets     int    `json:"targets"`
	Online      int    `json:"targets_online"`
}

type targetJSON struct {
	ID       uint32 `json:"id"`
	Server   uint32 `json:"server"`
	Path     string `json:"path"`
	State    string `json:"state"`
	Total    uint64 `json:"total_bytes"`
	Free     uint64 `json:"free_bytes"`
	LastSeen string `json:"last_seen,omitempty"`
}

type chainJSON struct {
	ID      uint32   `json:"id"`
	Version uint32   `json:"version"`
	Targets []uint32 `json:"targets"`
	States  []string `json:"states"`
}

// fenceJSON is the latest fencing of a server.
type fenceJSON struct {
	Server  uint32 `json:"server"`
	At      string `json:"at"`
	Fenced  bool   `json:"fenced"`
	Summary string `json:"summary"`
}

// resyncJSON is the progress of a chain head copying a member (a
// returning one, or a new disk in place of a dead target).
type resyncJSON struct {
	Chain   uint32 `json:"chain"`
	Target  uint32 `json:"target"`
	Percent uint32 `json:"percent"` // buckets done of 256
	Chunks  uint64 `json:"chunks_examined"`
	Copied  uint64 `json:"chunks_copied"`
	Bytes   uint64 `json:"bytes_copied"`
	Started string `json:"started"`
	progressJSON
}

// progressJSON is how fast long work goes and how long it has left: the
// bytes it moved per second since it started, and its time left at the
// pace it has done its 256 buckets so far.
type progressJSON struct {
	Rate    float64 `json:"bytes_per_second"`
	Elapsed float64 `json:"elapsed_seconds"`
	Left    float64 `json:"seconds_left"` // -1 while nothing is done to judge by
}

// progressOf judges work that has done buckets of 256 and moved bytes
// since started.
func progressOf(buckets uint32, bytes uint64, started, now time.Time) progressJSON {
	p := progressJSON{Left: -1}
	elapsed := now.Sub(started).Seconds()
	if elapsed <= 0 {
		return p
	}
	p.Elapsed = math.Round(elapsed*10) / 10
	p.Rate = math.Round(float64(bytes) / elapsed)
	if buckets > 0 {
		p.Left = math.Round(elapsed * float64(256-min(buckets, 256)) / float64(buckets))
	}
	return p
}

// String reads as "312.5 MiB/s, 1m20s left".
func (p progressJSON) String() string {
	left := "time left not known yet"
	if p.Left >= 0 {
		left = (time.Duration(p.Left) * time.Second).String() + " left"
	}
	return fmt.Sprintf("%s/s, %s", humanBytes(uint64(p.Rate)), left)
}

func statusToJSON(st *proto.StatusReply, reps []replicaJSON) *statusJSON {
	var j statusJSON
	now := time.Now()
	j.Meta.Replicas = reps
	j.Meta.Addr, j.Meta.Raft, j.Meta.Applied = st.MetaAddr, st.RaftState, st.RaftIndex
	j.Meta.Inodes, j.Meta.InlineLimit, j.Meta.Clients = st.Inodes, st.InlineLimit, st.Sessions
	j.Meta.FileLocks, j.Meta.LockedFiles = st.Locks, st.LockedFiles
	j.Meta.DirLeases, j.Meta.LeasedDirs = st.DirLeases, st.LeasedDirs
	j.Meta.FileLeases, j.Meta.LeasedFiles = st.FileLeases, st.LeasedFiles
	j.Healthy = st.RaftState == "Leader" && len(st.Map.Targets) > 0
	for _, r := range reps {
		if r.State != "leader" && r.State != "follower" {
			j.Healthy = false
		}
	}
	for _, s := range st.Map.Servers {
		sj := serverJSON{ID: s.ID, Addr: s.Addr, UUID: s.UUID, Rack: s.Rack}
		if ms, ok := st.PrivateSeenMs[s.ID]; ok {
			sj.PrivateSeen = time.UnixMilli(ms).UTC().Format(time.RFC3339)
		}
		var own []proto.Target
		for _, t := range st.Map.Targets {
			if t.Server == s.ID {
				own = append(own, t)
			}
		}
		c := proto.CapacityOf(own)
		sj.Total, sj.Free, sj.FileSystems = c.Total, c.Free, c.FileSystems
		sj.Targets, sj.Online = len(own), len(own)-len(c.Offline)
		j.Servers = append(j.Servers, sj)
	}
	for _, t := range st.Map.Targets {
		tj := targetJSON{ID: t.ID, Server: t.Server, Path: t.Path, State: stateName(t.State), Total: t.TotalBytes, Free: t.FreeBytes}
		if t.LastSeenMs > 0 {
			tj.LastSeen = time.UnixMilli(t.LastSeenMs).UTC().Format(time.RFC3339)
		}
		if t.State != proto.TargetOnline {
			j.Healthy = false
		}
		j.Targets = append(j.Targets, tj)
	}
	c := proto.CapacityOf(st.Map.Targets)
	j.Total, j.Free, j.FileSystems, j.Offline = c.Total, c.Free, c.FileSystems, c.Offline
	if j.Offline == nil {
		j.Offline = []uint32{}
	}
	slices.Sort(j.Offline)
	sort.Slice(j.Targets, func(a, b int) bool { return j.Targets[a].ID < j.Targets[b].ID })
	for _, c := range st.Map.Chains {
		cj := chainJSON{ID: c.ID, Version: c.Version, Targets: c.Targets}
		for _, t := range c.Targets {
			s, _ := c.State(t)
			cj.States = append(cj.States, proto.MemberStateName(s))
			if s != proto.MemberServing {
				j.Healthy = false
			}
		}
		j.Chains = append(j.Chains, cj)
	}
	j.NFS = nfsStatusJSON(st.NFS, now)
	if e := st.ECScrub; e.StartedMs != 0 {
		j.ECScrub = &ecScrubJSON{Running: e.Running, Percent: e.Percent, Files: e.Files, Stripes: e.Stripes, Missing: e.Missing,
			Mismatched: e.Mismatched, Rebuilt: e.Rebuilt, Unreachable: e.Unreachable,
			Started: time.UnixMilli(e.StartedMs).UTC().Format(time.RFC3339)}
		if e.EndedMs != 0 && !e.Running {
			j.ECScrub.Ended = time.UnixMilli(e.EndedMs).UTC().Format(time.RFC3339)
		}
	}
	if e := st.ECRepair; e.Degraded > 0 || e.Rebuilt > 0 || e.Evacuating > 0 || e.Unplaceable > 0 {
		j.ECRepair = &ecRepairJSON{e.Degraded, e.Rebuilt, e.RebuiltBytes, e.BytesPerSec, e.Evacuating, e.Unplaceable}
		if e.Degraded > 0 || e.Evacuating > 0 || e.Unplaceable > 0 {
			j.Healthy = false
		}
	}
	for _, f := range st.Fencing {
		j.Fencing = append(j.Fencing, fenceJSON{f.ServerID, time.UnixMilli(f.AtMs).UTC().Format(time.RFC3339), f.Fenced, f.Summary})
	}
	for _, r := range st.Resyncs {
		j.Resyncs = append(j.Resyncs, resyncJSON{Chain: r.Chain, Target: r.Target, Percent: r.Buckets * 100 / 256,
			Chunks: r.Chunks, Copied: r.Copied, Bytes: r.Bytes, Started: time.UnixMilli(r.StartedMs).UTC().Format(time.RFC3339),
			progressJSON: progressOf(r.Buckets, r.Bytes, time.UnixMilli(r.StartedMs), now)})
	}
	j.Scrubs = scrubsJSON(st.Scrubs, now)
	j.Caches = cachesJSON(st.Caches)
	for _, c := range j.Caches {
		if c.Failed != "" {
			j.Healthy = false // a cache device is gone (nothing is lost: its target writes through)
		}
	}
	for _, s := range j.Scrubs {
		if s.Unrepaired > 0 {
			j.Healthy = false // stored data is damaged
		}
	}
	return &j
}

// scrubJSON is one store's scrub: a target's own chunks (chain = target)
// or its copy of a replicated chain. Chunks and bytes are of the pass
// running, else of the last; bad and unrepaired blocks of the last
// complete pass; repaired blocks since the storage server started.
type scrubJSON struct {
	Target     uint32 `json:"target"`
	Chain      uint32 `json:"chain"`
	Running    bool   `json:"running"`
	Chunks     uint64 `json:"chunks"`
	Bytes      uint64 `json:"bytes"`
	BadBlocks  uint64 `json:"bad_blocks"`
	Unrepaired uint64 `json:"unrepaired"`
	Repaired   uint64 `json:"repaired_since_start"`
	Started    string `json:"started,omitempty"`
	LastDone   string `json:"last_done,omitempty"`
	// For the pass running: its share done, pace and time left.
	Percent       uint32 `json:"percent,omitempty"`
	*progressJSON `json:",omitempty"`
}

func scrubsJSON(ps []proto.ScrubProgress, now time.Time) []scrubJSON {
	var out []scrubJSON
	for _, p := range ps {
		j := scrubJSON{Target: p.Target, Chain: p.Chain, Running: p.Running, Chunks: p.Chunks, Bytes: p.Bytes,
			BadBlocks: p.BadBlocks, Repaired: p.Repaired, Unrepaired: p.Unrepaired}
		if p.Running && p.StartedMs > 0 {
			pr := progressOf(p.Buckets, p.Bytes, time.UnixMilli(p.StartedMs), now)
			j.Percent, j.progressJSON = p.Buckets*100/256, &pr
		}
		if p.StartedMs > 0 {
			j.Started = time.UnixMilli(p.StartedMs).UTC().Format(time.RFC3339)
		}
		if p.LastDoneMs > 0 {
			j.LastDone = time.UnixMilli(p.LastDoneMs).UTC().Format(time.RFC3339)
		}
		out = append(out, j)
	}
	return out
}

// printScrubs sums the scrubs up per target: one line each, and a warning
// line for every store that keeps bad blocks.
func printScrubs(j *statusJSON) {
	if len(j.Scrubs) == 0 {
		return
	}
	fmt.Println()
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SCRUB	TARGET	CHAIN	CHUNKS	READ	BAD	REPAIRED	UNREPAIRED	LAST COMPLETE PASS")
	for _, s := range j.Scrubs {
		state := "idle"
		if s.Running {
			state = fmt.Sprintf("running %d%%, %s", s.Percent, s.progressJSON)
		}
		last := s.LastDone
		if last == "" {
			last = "never"
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%s\t%d\t%d\t%d\t%s\n", state, s.Target, s.Chain, s.Chunks, humanBytes(s.Bytes),
			s.BadBlocks, s.Unrepaired, s.Repaired, last)
	}
	w.Flush()
	for _, s := range j.Scrubs {
		if s.Unrepaired > 0 {
			fmt.Printf("warning: target %d keeps %d bad block(s) of chain %d that no good copy could repair (see the storage server's log)\n",
				s.Target, s.Unrepaired, s.Chain)
		}
	}
}

func printStatus(j *statusJSON) {
	health := "HEALTHY"
	if !j.Healthy {
		health = "DEGRADED"
	}
	fmt.Printf("cluster: %s   capacity %s, %s free (%s)   inodes allocated %d   clients %d\n",
		health, humanBytes(j.Total), humanBytes(j.Free), fileSystems(j.FileSystems), j.Meta.Inodes, j.Meta.Clients)
	if len(j.Offline) > 0 {
		ids := make([]string, len(j.Offline))
		for i, id := range j.Offline {
			ids[i] = fmt.Sprint(id)
		}
		fmt.Printf("not counted: target %s, not online\n", strings.Join(ids, ", "))
	}
	fmt.Printf("metadata: %s  raft %s  applied index %d  inline files up to %d bytes  file locks %d on %d files  directory leases %d on %d directories  file leases %d on %d files\n",
		j.Meta.Addr, j.Meta.Raft, j.Meta.Applied, j.Meta.InlineLimit, j.Meta.FileLocks, j.Meta.LockedFiles, j.Meta.DirLeases, j.Meta.LeasedDirs,
		j.Meta.FileLeases, j.Meta.LeasedFiles)
	if len(j.Meta.Replicas) > 1 {
		var rs []string
		for _, r := range j.Meta.Replicas {
			rs = append(rs, r.Addr+" "+r.State)
		}
		fmt.Printf("metadata replicas: %s\n", strings.Join(rs, ", "))
	}
	fmt.Println()
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SERVER\tADDRESS\tRACK\tTARGETS ONLINE\tSIZE\tFREE\tFILE SYSTEMS")
	for _, s := range j.Servers {
		rack := s.Rack
		if rack == "" {
			rack = "-"
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%d of %d\t%s\t%s\t%d\n", s.ID, s.Addr, rack, s.Online, s.Targets,
			humanBytes(s.Total), humanBytes(s.Free), s.FileSystems)
	}
	w.Flush()
	fmt.Println()
	w = tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SERVER\tADDRESS\tTARGET\tSTATE\tSIZE\tFREE\tUSED%\tPATH")
	for _, s := range j.Servers {
		for _, t := range j.Targets {
			if t.Server != s.ID {
				continue
			}
			used := 0.0
			if t.Total > 0 {
				used = 100 * float64(t.Total-t.Free) / float64(t.Total)
			}
			fmt.Fprintf(w, "%d\t%s\t%d\t%s\t%s\t%s\t%.1f\t%s\n", s.ID, s.Addr, t.ID, t.State,
				humanBytes(t.Total), humanBytes(t.Free), used, t.Path)
		}
	}
	w.Flush()
	printChains(j)
	printScrubs(j)
	printCaches(j.Caches)
	printQuotas(j)
	printNFS(j.NFS)
	if e := j.ECRepair; e != nil {
		left := ""
		if e.BytesPerSec > 0 && e.RebuiltShards > 0 && e.DegradedStripes > 0 {
			// About one shard per degraded stripe, of the size rebuilt so far.
			secs := float64(e.DegradedStripes) * float64(e.RebuiltBytes) / float64(e.RebuiltShards) / float64(e.BytesPerSec)
			left = fmt.Sprintf(", about %s left", (time.Duration(secs) * time.Second).Round(time.Second))
		}
		fmt.Printf("\nerasure coding: %d stripes lack a shard (rebuilt in the background); %d shards rebuilt (%s) at %s/s%s\n",
			e.DegradedStripes, e.RebuiltShards, humanBytes(e.RebuiltBytes), humanBytes(e.BytesPerSec), left)
		if e.EvacuatingFiles > 0 {
			fmt.Printf("erasure coding: %d files still have shards on retired targets (servers silent past --ec-rebuild-after)\n", e.EvacuatingFiles)
		}
		if e.UnplaceableFiles > 0 {
			fmt.Printf("erasure coding: %d files have a shard on a retired target and no failure domain left to move it to: degraded until it returns\n", e.UnplaceableFiles)
		}
	}
	if e := j.ECScrub; e != nil {
		state := fmt.Sprintf("%d%%, started %s", e.Percent, e.Started)
		if !e.Running {
			state = "ended " + e.Ended
		}
		fmt.Printf("erasure-coding parity check: %s: %d files, %d stripes, %d shards missing, %d wrong, %d rebuilt, %d on targets that did not answer\n",
			state, e.Files, e.Stripes, e.Missing, e.Mismatched, e.Rebuilt, e.Unreachable)
	}
	for _, f := range j.Fencing {
		fmt.Printf("fencing %s: %s\n", f.At, f.Summary)
	}
}

// printChains lists the replicated chains and the resyncs in progress.
func printChains(j *statusJSON) {
	var lines []string
	for _, c := range j.Chains {
		if len(c.Targets) < 2 {
			continue
		}
		ms := make([]string, len(c.Targets))
		for i, t := range c.Targets {
			ms[i] = fmt.Sprintf("target %d %s", t, c.States[i])
		}
		lines = append(lines, fmt.Sprintf("%d\t%d\t%s", c.ID, c.Version, strings.Join(ms, ", ")))
	}
	if len(lines) == 0 {
		return
	}
	fmt.Println()
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "CHAIN\tVERSION\tMEMBERS (head first)")
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	w.Flush()
	for _, r := range j.Resyncs {
		fmt.Printf("resync: chain %d -> target %d  %d%%, %s (%d chunks examined, %d copied, %s)\n",
			r.Chain, r.Target, r.Percent, r.progressJSON, r.Chunks, r.Copied, humanBytes(r.Bytes))
	}
}

// fileSystems says how many file systems the capacity counts.
func fileSystems(n int) string {
	if n == 1 {
		return "1 file system"
	}
	return fmt.Sprintf("%d file systems", n)
}

func humanBytes(b uint64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%d B", b)
	}
	div, exp := uint64(unit), 0
	for n := b / unit; n >= unit; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(b)/float64(div), "KMGTPE"[exp])
}

// printQuotas lists the quotas with a limit: usage against the limits,
// and whether writes or new files are refused now.
func printQuotas(j *statusJSON) {
	if len(j.Quotas) == 0 {
		return
	}
	fmt.Println()
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "QUOTA\tBYTES USED\tSOFT\tHARD\tFILES\tSOFT\tHARD\tSTATE")
	for _, q := range j.Quotas {
		state := "ok"
		switch {
		case q.OverBlocks && q.OverInodes:
			state = "refusing writes and new files"
		case q.OverBlocks:
			state = "refusing writes"
		case q.OverInodes:
			state = "refusing new files"
		case q.BlockGraceLeft != nil || q.InodeGraceLeft != nil:
			state = "over a soft limit, in its grace period"
		}
		fmt.Fprintf(w, "%s %s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", q.Kind, q.Name, humanBytes(q.Bytes),
			limitText(q.BlockSoft, humanBytes), limitText(q.BlockHard, humanBytes), q.Inodes,
			limitText(q.InodeSoft, count), limitText(q.InodeHard, count), state)
	}
	w.Flush()
}
