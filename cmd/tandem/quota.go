package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"tandemfs/internal/fuse"
	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
	"tandemfs/internal/wire"
)

// quotaWho is the --user, --group or --project a quota command is about.
type quotaWho struct{ user, group, project string }

func (w *quotaWho) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&w.user, "user", "", "a user, by name or uid")
	f.StringVar(&w.group, "group", "", "a group, by name or gid")
	f.StringVar(&w.project, "project", "", "a project id (a directory tree: tandem quota project)")
}

// resolve names the one quota the flags give.
func (w *quotaWho) resolve() (proto.QuotaKind, uint32, error) {
	n := 0
	for _, s := range []string{w.user, w.group, w.project} {
		if s != "" {
			n++
		}
	}
	if n != 1 {
		return 0, 0, &exitError{2, errors.New("give exactly one of --user, --group and --project")}
	}
	switch {
	case w.user != "":
		id, err := lookupID(w.user, func(s string) (string, error) {
			u, err := user.Lookup(s)
			if err != nil {
				return "", err
			}
			return u.Uid, nil
		})
		return proto.QuotaUser, id, err
	case w.group != "":
		id, err := lookupID(w.group, func(s string) (string, error) {
			g, err := user.LookupGroup(s)
			if err != nil {
				return "", err
			}
			return g.Gid, nil
		})
		return proto.QuotaGroup, id, err
	}
	id, err := strconv.ParseUint(w.project, 10, 32)
	if err != nil {
		return 0, 0, &exitError{2, fmt.Errorf("--project %q: want a number", w.project)}
	}
	return proto.QuotaProject, uint32(id), nil
}

// lookupID takes a number as it is and looks a name up.
func lookupID(s string, lookup func(string) (string, error)) (uint32, error) {
	if id, err := strconv.ParseUint(s, 10, 32); err == nil {
		return uint32(id), nil
	}
	v, err := lookup(s)
	if err != nil {
		return 0, &exitError{2, fmt.Errorf("%q: no such user or group on this host (give the number)", s)}
	}
	id, err := strconv.ParseUint(v, 10, 32)
	return uint32(id), err
}

// nameOf is a uid's or gid's name on this host, or the number.
func nameOf(kind proto.QuotaKind, id uint32) string {
	s := strconv.FormatUint(uint64(id), 10)
	switch kind {
	case proto.QuotaUser:
		if u, err := user.LookupId(s); err == nil {
			return u.Username
		}
	case proto.QuotaGroup:
		if g, err := user.LookupGroupId(s); err == nil {
			return g.Name
		}
	}
	return s
}

// callLeader sends one request to the metadata leader: each replica in
// turn, until one that is not a follower answers.
func callLeader(cf *connectFlags, op uint16, enc func(*wire.Enc), dec func(*wire.Dec) error) error {
	cls, err := cf.client()
	if err != nil {
		return err
	}
	defer func() {
		for _, cl := range cls {
			cl.Close()
		}
	}()
	var errs []error
	for _, cl := range cls {
		err := cl.Call(op, enc, dec)
		if errors.Is(err, syscall.EAGAIN) {
			continue // a follower
		}
		if err == nil || !rpc.IsNetError(err) {
			return err
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return errors.New("no metadata replica is the leader (an election may be under way): try again")
	}
	return cf.explain(errors.Join(errs...))
}

func quotaList(cf *connectFlags, r proto.QuotaListReq) (*proto.QuotaListReply, error) {
	return proto.ListQuotas(r, func(r *proto.QuotaListReq, reply *proto.QuotaListReply) error {
		return callLeader(cf, proto.OpQuotaList, r.Encode, func(d *wire.Dec) error { reply.Decode(d); return nil })
	})
}

func init() {
	quota := &cobra.Command{
		Use:   "quota",
		Short: "Set and show quotas of users, groups and projects (directory trees)",
		Long: `Quotas limit the bytes and the files (inodes) charged to a user, a group or
a project, as XFS, Lustre and BeeGFS do. Every file counts against its owner,
its group and its project. Each limit has a soft and a hard value: usage may
stay over the soft limit for the grace period (7 days unless set), never over
the hard one. Writers past a limit get EDQUOT ("Disk quota exceeded"). Root's
quotas (id 0) count but are never limited. A project is a directory tree:
"tandem quota project --id N DIR" puts DIR and everything under it in project
N, and what is made there later joins it.`,
	}
	quota.AddCommand(quotaSetCmd(), quotaGetCmd(), quotaReportCmd(), quotaProjectCmd())
	rootCmd.AddCommand(quota)
}

func quotaSetCmd() *cobra.Command {
	var cf connectFlags
	var who quotaWho
	var bsoft, bhard string
	var isoft, ihard uint64
	var bgrace, igrace time.Duration
	cmd := &cobra.Command{
		Use:   "set (--user U | --group G | --project P) [--block-soft SIZE] [--block-hard SIZE] [--inode-soft N] [--inode-hard N] [--block-grace D] [--inode-grace D]",
		Short: "Set a quota's limits (0 removes a limit) and its kind's grace periods",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, id, err := who.resolve()
			if err != nil {
				return err
			}
			r := proto.QuotaSetReq{Kind: kind, ID: id, Grace: proto.QuotaGrace{Block: int64(bgrace), Inode: int64(igrace)}}
			f := cmd.Flags()
			for _, b := range []struct {
				flag string
				bit  uint8
				src  string
				dst  *uint64
			}{{"block-soft", proto.QuotaSetBlockSoft, bsoft, &r.BlockSoft}, {"block-hard", proto.QuotaSetBlockHard, bhard, &r.BlockHard}} {
				if !f.Changed(b.flag) {
					continue
				}
				v, err := parseSize(b.src)
				if err != nil {
					return &exitError{2, fmt.Errorf("--%s: %w", b.flag, err)}
				}
				*b.dst, r.Set = v, r.Set|b.bit
			}
			if f.Changed("inode-soft") {
				r.InodeSoft, r.Set = isoft, r.Set|proto.QuotaSetInodeSoft
			}
			if f.Changed("inode-hard") {
				r.InodeHard, r.Set = ihard, r.Set|proto.QuotaSetInodeHard
			}
			if bgrace < 0 || igrace < 0 {
				return &exitError{2, errors.New("a grace period cannot be negative")}
			}
			if r.Set == 0 && r.Grace == (proto.QuotaGrace{}) {
				return &exitError{2, errors.New("nothing to set: give a limit (--block-soft, --block-hard, --inode-soft, --inode-hard) or a grace period")}
			}
			if err := callLeader(&cf, proto.OpQuotaSet, r.Encode, nil); err != nil {
				return err
			}
			return printQuota(&cf, kind, id, false)
		},
	}
	cf.add(cmd)
	who.add(cmd)
	f := cmd.Flags()
	f.StringVar(&bsoft, "block-soft", "", "soft limit of bytes, e.g. 900G (0: none)")
	f.StringVar(&bhard, "block-hard", "", "hard limit of bytes, e.g. 1T (0: none)")
	f.Uint64Var(&isoft, "inode-soft", 0, "soft limit of files and directories (0: none)")
	f.Uint64Var(&ihard, "inode-hard", 0, "hard limit of files and directories (0: none)")
	f.DurationVar(&bgrace, "block-grace", 0, "grace period over a soft byte limit, for every quota of this kind (e.g. 168h)")
	f.DurationVar(&igrace, "inode-grace", 0, "grace period over a soft file limit, for every quota of this kind")
	return cmd
}

func quotaGetCmd() *cobra.Command {
	var cf connectFlags
	var who quotaWho
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "get (--user U | --group G | --project P) [--json]",
		Short: "Show one quota's usage, limits and grace",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, id, err := who.resolve()
			if err != nil {
				return err
			}
			return printQuota(&cf, kind, id, asJSON)
		},
	}
	cf.add(cmd)
	who.add(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printQuota(cf *connectFlags, kind proto.QuotaKind, id uint32, asJSON bool) error {
	reply, err := quotaList(cf, proto.QuotaListReq{Kind: kind, ID: id})
	if err != nil {
		return err
	}
	j := quotaToJSON(&reply.Records[0], reply.Grace[kind], reply.Now)
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(j)
	}
	fmt.Printf("%s %s (%d): %s in %d files\n", kind, j.Name, id, humanBytes(j.Bytes), j.Inodes)
	fmt.Printf("  bytes: soft %s, hard %s%s\n", limitText(j.BlockSoft, humanBytes), limitText(j.BlockHard, humanBytes), graceText(j.BlockGraceLeft))
	fmt.Printf("  files: soft %s, hard %s%s\n", limitText(j.InodeSoft, count), limitText(j.InodeHard, count), graceText(j.InodeGraceLeft))
	return nil
}

func count(n uint64) string { return strconv.FormatUint(n, 10) }

func limitText(v uint64, f func(uint64) string) string {
	if v == 0 {
		return "none"
	}
	return f(v)
}

func graceText(left *float64) string {
	switch {
	case left == nil:
		return ""
	case *left <= 0:
		return "; over the soft limit, grace period over: writes are refused"
	}
	return fmt.Sprintf("; over the soft limit, %s of grace left", graceLeft(*left))
}

// quotaJSON is a quota as `tandem quota --json` and `tandem status --json`
// show it.
type quotaJSON struct {
	Kind      string `json:"kind"`
	ID        uint32 `json:"id"`
	Name      string `json:"name"`
	Bytes     uint64 `json:"bytes"`
	Inodes    uint64 `json:"inodes"`
	BlockSoft uint64 `json:"block_soft"`
	BlockHard uint64 `json:"block_hard"`
	InodeSoft uint64 `json:"inode_soft"`
	InodeHard uint64 `json:"inode_hard"`
	// Seconds of grace left over a soft limit (absent: not over it;
	// 0 or less: over it for longer than the grace period).
	BlockGraceLeft *float64 `json:"block_grace_left_seconds,omitempty"`
	InodeGraceLeft *float64 `json:"inode_grace_left_seconds,omitempty"`
	// OverBlocks: writes that grow its files are refused now.
	OverBlocks bool `json:"over_blocks"`
	// OverInodes: new files are refused now.
	OverInodes     bool    `json:"over_inodes"`
	BlockGraceTime float64 `json:"block_grace_seconds"`
	InodeGraceTime float64 `json:"inode_grace_seconds"`
}

func quotaToJSON(r *proto.QuotaRecord, g proto.QuotaGrace, now int64) quotaJSON {
	j := quotaJSON{Kind: r.Kind.String(), ID: r.ID, Name: nameOf(r.Kind, r.ID), Bytes: r.Bytes, Inodes: r.Inodes,
		BlockSoft: r.BlockSoft, BlockHard: r.BlockHard, InodeSoft: r.InodeSoft, InodeHard: r.InodeHard,
		OverBlocks: r.OverBlocks(now), OverInodes: r.RefusesInodes(1, now),
		BlockGraceTime: time.Duration(g.Block).Seconds(), InodeGraceTime: time.Duration(g.Inode).Seconds()}
	left := func(end int64) *float64 {
		if end == 0 {
			return nil
		}
		s := float64((end - now) / int64(time.Second))
		return &s
	}
	j.BlockGraceLeft, j.InodeGraceLeft = left(r.BlockGraceEnd), left(r.InodeGraceEnd)
	return j
}

// graceLeft reads like repquota's grace column: days, or hours:minutes.
func graceLeft(seconds float64) string {
	if seconds <= 0 {
		return "none"
	}
	d := time.Duration(seconds) * time.Second
	if d >= 24*time.Hour {
		return fmt.Sprintf("%ddays", int(d.Hours()/24))
	}
	return fmt.Sprintf("%02d:%02d", int(d.Hours()), int(d.Minutes())%60)
}

func quotaReportCmd() *cobra.Command {
	var cf connectFlags
	var users, groups, projects, all, asJSON, human bool
	cmd := &cobra.Command{
		Use:   "report [--user] [--group] [--project] [--all] [--json] [--human]",
		Short: "Usage and limits of every user, group and project, as repquota prints them",
		Long: `Print, for each kind asked for (all three by default), every quota with usage
or limits, as repquota does: sizes in KiB (--human: with units), "+" in the
first or second flag column where usage is over the soft limit of bytes or
files, and the grace left. --all also lists quotas without limits (every
owner with files), which is the default; --all=false lists only those with a
limit.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			kinds := []proto.QuotaKind{}
			for _, k := range []struct {
				on   bool
				kind proto.QuotaKind
			}{{users, proto.QuotaUser}, {groups, proto.QuotaGroup}, {projects, proto.QuotaProject}} {
				if k.on {
					kinds = append(kinds, k.kind)
				}
			}
			if len(kinds) == 0 {
				kinds = proto.QuotaKinds
			}
			reply, err := quotaList(&cf, proto.QuotaListReq{All: true, AnyKind: true, Limited: !all})
			if err != nil {
				return err
			}
			if asJSON {
				out := []quotaJSON{}
				for _, k := range kinds {
					for i := range reply.Records {
						if r := &reply.Records[i]; r.Kind == k {
							out = append(out, quotaToJSON(r, reply.Grace[k], reply.Now))
						}
					}
				}
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			for i, k := range kinds {
				if i > 0 {
					fmt.Println()
				}
				printReport(k, reply, human, cf.where())
			}
			return nil
		},
	}
	cf.add(cmd)
	f := cmd.Flags()
	f.BoolVar(&users, "user", false, "user quotas")
	f.BoolVar(&groups, "group", false, "group quotas")
	f.BoolVar(&projects, "project", false, "project quotas")
	f.BoolVar(&all, "all", true, "also quotas without limits")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	f.BoolVar(&human, "human", false, "sizes with units instead of KiB")
	return cmd
}

// printReport prints one kind's quotas as repquota does.
func printReport(kind proto.QuotaKind, reply *proto.QuotaListReply, human bool, where string) {
	g := reply.Grace[kind]
	fmt.Printf("*** Report for %s quotas on TandemFS %s\n", kind, where)
	fmt.Printf("Block grace time: %s; Inode grace time: %s\n",
		graceLeft(time.Duration(g.Block).Seconds()), graceLeft(time.Duration(g.Inode).Seconds()))
	var rs []proto.QuotaRecord
	for _, r := range reply.Records {
		if r.Kind == kind {
			rs = append(rs, r)
		}
	}
	sort.Slice(rs, func(a, b int) bool { return rs[a].ID < rs[b].ID })
	size := func(b uint64) string {
		if human {
			return strings.ReplaceAll(humanBytes(b), " ", "")
		}
		return strconv.FormatUint((b+1023)/1024, 10)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	title := strings.ToUpper(kind.String()[:1]) + kind.String()[1:]
	fmt.Fprintf(w, "\t\tBlock limits\t\t\t\tFile limits\t\t\t\t\n")
	fmt.Fprintf(w, "%s\t\tused\tsoft\thard\tgrace\tused\tsoft\thard\tgrace\t\n", title)
	for i := range rs {
		r := &rs[i]
		flags := []byte("--")
		if r.BlockSoft > 0 && r.Bytes > r.BlockSoft {
			flags[0] = '+'
		}
		if r.InodeSoft > 0 && r.Inodes > r.InodeSoft {
			flags[1] = '+'
		}
		grace := func(end int64) string {
			if end == 0 {
				return ""
			}
			return graceLeft(float64((end - reply.Now) / int64(time.Second)))
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t\n", nameOf(kind, r.ID), flags, size(r.Bytes),
			size(r.BlockSoft), size(r.BlockHard), grace(r.BlockGraceEnd), r.Inodes, r.InodeSoft, r.InodeHard, grace(r.InodeGraceEnd))
	}
	w.Flush()
}

// where names the cluster for report headers.
func (c *connectFlags) where() string {
	if c.meta != "" {
		return c.meta
	}
	return "in " + c.dir
}

func quotaProjectCmd() *cobra.Command {
	var id uint32
	cmd := &cobra.Command{
		Use:   "project --id N DIR",
		Short: "Put DIR and everything under it in project N (project quotas); new entries there join it",
		Long: `Set the project of DIR, on a TandemFS mount, and of every file and
directory under it, as "xfs_quota -x -c 'project -s'" does; what is made in
the tree later takes its directory's project. Files cannot be renamed or
linked into another project's tree (EXDEV: mv copies them, so that the new
project is charged). Root only. --id 0 takes the tree out of any project.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("id") {
				return &exitError{2, errors.New("give the project's --id")}
			}
			dir := args[0]
			if _, err := getLayout(dir); err != nil {
				return err
			}
			return setProjectTree(dir, id)
		},
	}
	cmd.Flags().Uint32Var(&id, "id", 0, "project id")
	return cmd
}

// setProjectTree walks dir and sets every entry's project, showing its
// progress once a second.
func setProjectTree(dir string, id uint32) error {
	value := []byte(strconv.FormatUint(uint64(id), 10))
	start, last := time.Now(), time.Now()
	n, skipped := 0, 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			// Linux allows user.* attributes on files and directories
			// only: symbolic links and special files keep their project.
			skipped++
			return nil
		}
		if err := unix.Lsetxattr(path, fuse.XattrProject, value, 0); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		n++
		if time.Since(last) >= time.Second {
			last = time.Now()
			fmt.Fprintf(os.Stderr, "project %d: %d entries so far (%.0f/s)\n", id, n, float64(n)/time.Since(start).Seconds())
		}
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Printf("%s: %d files and directories are in project %d\n", dir, n, id)
	if skipped > 0 {
		fmt.Printf("%d symbolic links and special files keep their former project (made here later, they join it)\n", skipped)
	}
	return nil
}
