#!/usr/bin/env python3
"""bench-table.py DIR  -> markdown comparison table on stdout.

DIR is a docs/bench-results/<date>/ directory written by bench-compare.sh:
<system>.json files in the suite.sh format and env.json (order of the
systems, their status, machine, TandemFS commit). Without env.json, every
*.json except env.json is taken, local and tandem first.

One row per measure and job count, one column per system, then the ratios
(every measure is higher-is-better): TandemFS/local, and like against like,
TandemFS (two copies) against the best peer that keeps two copies and
TandemFS with one copy against the best peer that keeps one. A TandemFS
column whose random reads a client cache answers (tandem-cached) is shown,
labelled, and compared with nothing.
"""
import json
import os
import sys

MEASURES = [
    ("seq_write_MBps", "seq write MB/s"),
    ("seq_read_MBps", "seq read MB/s"),
    ("rand_write_iops", "rand write 4K IOPS"),
    ("rand_read_iops", "rand read 4K IOPS"),
    ("md_create_ops", "md create/s (empty)"),
    ("md_stat_ops", "md stat/s (empty)"),
    ("md_read_ops", "md read/s (empty)"),
    ("md_remove_ops", "md remove/s (empty)"),
    ("md3k_create_ops", "md create/s (3 KiB)"),
    ("md3k_stat_ops", "md stat/s (3 KiB)"),
    ("md3k_read_ops", "md read/s (3 KiB)"),
    ("md3k_remove_ops", "md remove/s (3 KiB)"),
]
NAMES = {"local": "local disk", "tandem": "TandemFS", "tandem1": "TandemFS 1 copy", "tandem-devfuse": "TandemFS /dev/fuse",
         "tandem-cached": "TandemFS, O_DIRECT client-cached", "juicefs": "JuiceFS",
         "juicefs-redis": "JuiceFS (Redis)", "seaweedfs": "SeaweedFS", "seaweedfs-r2": "SeaweedFS 2 copies",
         "moosefs": "MooseFS", "glusterfs": "GlusterFS", "glusterfs-r2": "GlusterFS 2 copies"}
NOT_PEERS = ("local", "tandem", "tandem1", "tandem-devfuse", "tandem-cached")
# Copies of each byte a system keeps as bench-compare.sh starts it (MooseFS:
# goal 2, its default). Writes with n copies on one disk are bounded by
# the disk's bandwidth / n, so systems are compared with those keeping as
# many.
COPIES = {"tandem": 2, "tandem-devfuse": 2, "tandem-cached": 2, "tandem1": 1,
          "juicefs": 1, "juicefs-redis": 1, "seaweedfs": 1, "glusterfs": 1,
          "moosefs": 2, "seaweedfs-r2": 2, "glusterfs-r2": 2}


def fmt(v):
    if v is None:
        return "—"
    if v >= 100:
        return "{:,.0f}".format(v)
    return "{:.1f}".format(v)


def ratio(a, b):
    if a is None or b is None or b == 0:
        return "—"
    return "{:.2f}".format(a / b)


class Results:
    """The results in one bench-results directory: systems in table order,
    their suite.sh data, their status in env.json, the peers among them and
    the job counts measured."""

    def __init__(self, d):
        self.env = {}
        if os.path.exists(os.path.join(d, "env.json")):
            self.env = json.load(open(os.path.join(d, "env.json")))
        order = self.env.get("systems_order")
        if not order:
            found = sorted(f[:-5] for f in os.listdir(d) if f.endswith(".json") and f != "env.json")
            order = [s for s in NOT_PEERS if s in found] + [s for s in found if s not in NOT_PEERS]
        self.order = order
        self.status = self.env.get("systems", {})
        self.data = {}
        for s in order:
            p = os.path.join(d, s + ".json")
            if os.path.exists(p):
                try:
                    self.data[s] = json.load(open(p))
                except ValueError:
                    pass
        self.peers = [s for s in order if s not in NOT_PEERS]
        jobs = []
        for s in self.data.values():
            for j in s.get("meta", {}).get("jobs", []):
                if j not in jobs:
                    jobs.append(j)
        self.jobs = sorted(jobs, key=int) or ["1", "2"]

    def val(self, s, key, j):
        """System s's value of measure key with j jobs, or None."""
        v = self.data.get(s, {}).get(key, {})
        return v.get(j) if isinstance(v, dict) else None

    def best_peer(self, key, j, copies=None):
        """(value, system) of the best peer for key with j jobs, among those
        keeping copies copies if given, or None."""
        pv = [(self.val(p, key, j), p) for p in self.peers if self.val(p, key, j) is not None
              and (copies is None or COPIES.get(p) == copies)]
        return max(pv) if pv else None


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    d = sys.argv[1]
    r = Results(d)
    env, order, status, data, peers, jobs, val = r.env, r.order, r.status, r.data, r.peers, r.jobs, r.val

    def head(s):
        n = NAMES.get(s, s)
        st = status.get(s, {}).get("status")
        if s not in data:
            return n + " (failed)" if st in (None, "failed") else n + " (" + st + ")"
        return n + (" (partial)" if st == "partial" else "")

    out = []
    cols = ["measure", "jobs"] + [head(s) for s in order]
    has_t = "tandem" in order
    if has_t and "local" in order:
        cols.append("TandemFS/local")
    has_t1 = "tandem1" in order
    if has_t and peers:
        cols.append("TandemFS/best 2-copy peer")
    if has_t1 and peers:
        cols.append("TandemFS 1 copy/best 1-copy peer")
    out.append("| " + " | ".join(cols) + " |")
    out.append("| --- | ---: |" + " ---: |" * (len(cols) - 2))

    def against(system, key, j):
        bp = r.best_peer(key, j, COPIES[system])
        return ratio(val(system, key, j), bp[0]) + " (" + NAMES.get(bp[1], bp[1]) + ")" if bp else "—"

    for key, label in MEASURES:
        for j in jobs:
            row = [label, j] + [fmt(val(s, key, j)) for s in order]
            if has_t and "local" in order:
                row.append(ratio(val("tandem", key, j), val("local", key, j)))
            if has_t and peers:
                row.append(against("tandem", key, j))
            if has_t1 and peers:
                row.append(against("tandem1", key, j))
            out.append("| " + " | ".join(row) + " |")

    title = "# Benchmark comparison " + os.path.basename(os.path.normpath(d))
    print(title)
    print()
    if env:
        commit = env.get("tandem_commit", "?")
        print("TandemFS `%s`%s (%s), %s; suite args `%s`; metadata tool: %s." % (
            commit[:12], " + uncommitted changes" if env.get("tandem_worktree_dirty") else "",
            env.get("tandem_commit_subject", ""), env.get("tandem_build", ""),
            env.get("suite_args", ""), md_tool(data)))
        print("Machine: %s, %s CPUs, %s RAM, kernel %s; run started %s, took %s s." % (
            env.get("cpu_model", "?"), env.get("ncpu", "?"), env.get("mem_total", "?"),
            env.get("kernel", "?"), env.get("started", "?"), env.get("wall_s", "?")))
        other = env.get("other_fuse_mounts_at_start") or []
        if other:
            print("Other FUSE mounts present (not ours, possibly busy): %s." % ", ".join(
                "`%s`" % o for o in other))
        print("Load average at start: %s." % env.get("uptime_start", "?").split("load average:")[-1].strip())
        print()
    print("\n".join(out))
    print()
    print("MB/s = 10^6 bytes/s (write includes fsync+close); IOPS and metadata rates are operations/s, "
          "summed over the jobs. Best n-copy peer = the highest value for that row among the peers "
          "that keep n copies (JuiceFS, SeaweedFS, GlusterFS: 1; MooseFS, SeaweedFS 2 copies, "
          "GlusterFS 2 copies: 2). Random 4 KiB rows use O_DIRECT: no client cache answers them, "
          "except in a column named client-cached, which is compared with nothing. "
          "On these shared 2-core machines absolute numbers move by ±30 % between runs: compare ratios.")
    print()
    print("| system | status | version | load before suite (1/5/15 min) | wall s | notes |")
    print("| --- | --- | --- | --- | ---: | --- |")
    for s in order:
        st = status.get(s, {})
        notes = st.get("detail", "")
        m = data.get(s, {}).get("meta", {})
        extra = [n for n in m.get("notes", []) if not n.startswith("MDTEST not set")]
        if m and m.get("rand_direct") is False:
            extra.append("random I/O buffered (no O_DIRECT)")
        notes = "; ".join([x for x in [notes] + extra if x])
        print("| %s | %s | %s | %s | %s | %s |" % (
            NAMES.get(s, s), st.get("status", "ok" if s in data else "missing"),
            st.get("version", ""), st.get("loadavg_before", m.get("loadavg_start", "")),
            st.get("seconds", ""), notes.replace("|", "\\|")[:300]))


def md_tool(data):
    tools = sorted({s.get("meta", {}).get("md_tool", "?") for s in data.values()})
    t = ", ".join(tools) or "?"
    if t == "python3-fallback":
        t += " (mdtest not installed; rates comparable between the columns, not with mdtest)"
    return t


if __name__ == "__main__":
    main()
