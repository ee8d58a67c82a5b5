#!/bin/bash
# The flash cache tier against no cache, on a slow disk, side by side in one
# run (issue 42; docs/benchmarks.md, "Flash cache"): for each mode, a fresh
# one-machine cluster (two storage servers, one target each, two copies)
# whose targets sit on scripts/slowdisk.sh's throttled disk (150 IOPS) and
# whose caches sit on the root disk, then the benchmark suite (--quick:
# sequential 1 MiB write and read, random 4 KiB O_DIRECT write and read, 1
# and 2 jobs, and the metadata test) on its mount, and the caches' state
# from `tandem status --json`. Run as root.
#
#   scripts/bench-cache.sh [--modes "none writethrough writeback"] [--out DIR]
#
# Results: docs/bench-results/<date>-cache/: <mode>.json (suite.sh),
# <mode>-status.json, table.md, chart.svg (scripts/bench-cache-chart.py),
# run.log.
set -uo pipefail
REPO=$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)
export PATH=/usr/local/go/bin:$PATH
SHARED=${SHARED:-$REPO/../shared}
[ -f "$SHARED/bench/suite.sh" ] || SHARED=/work/shared
OUT=$REPO/docs/bench-results/$(date +%Y-%m-%d-%H%M)-cache
MODES="none writethrough writeback"
while [ $# -gt 0 ]; do
    case $1 in
    --out) OUT=$2; shift 2 ;;
    --modes) MODES=$2; shift 2 ;;
    *) echo "bench-cache: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "bench-cache: run as root (loop device, cgroup, drop_caches)" >&2; exit 2; }
mkdir -p "$OUT"
RUNLOG=$OUT/run.log
log() { echo "[bench-cache $(date +%H:%M:%S)] $*" | tee -a "$RUNLOG" >&2; }

SCRATCH=$(mktemp -d /var/tmp/bench-cache.XXXXXX)
BIN=$SCRATCH/tandem
(cd "$REPO" && go build -o "$BIN" ./cmd/tandem) || exit 1
SLOW=$SCRATCH/slow
cleanup() {
    "$BIN" down --data "$SCRATCH/data" >/dev/null 2>&1
    "$REPO/scripts/slowdisk.sh" down --dir "$SLOW" >/dev/null 2>&1
    rm -rf "$SCRATCH"
}
trap cleanup EXIT

# sync_writes MODE: random 4 KiB writes that each wait for the storage
# (O_DIRECT and O_DSYNC, fio --sync=1), 1 and 2 jobs over a 256 MiB file
# each, 20 s: what write-back is for. suite.sh's random writes are
# O_DIRECT only, and the servers' page cache answers them in every mode
# (cgroup v1 does not throttle its writeback).
sync_writes() {
    local mode=$1 jobs
    for jobs in 1 2; do
        fio --name=syncw --directory="$SCRATCH/mnt" --size=256M --bs=4k --rw=randwrite --direct=1 --sync=1 \
            --ioengine=psync --numjobs=$jobs --time_based --runtime=20 --group_reporting --output-format=json \
            >"$OUT/$mode-sync-$jobs.json" 2>>"$RUNLOG" || log "sync writes ($jobs jobs) on $mode failed"
        rm -f "$SCRATCH"/mnt/syncw.*
    done
}

for mode in $MODES; do
    log "mode $mode: a slow disk and a fresh cluster"
    "$REPO/scripts/slowdisk.sh" up --dir "$SLOW" --size 8G >>"$RUNLOG" 2>&1 || { log "slowdisk up failed"; exit 1; }
    cache=()
    if [ "$mode" != none ]; then
        cache=(--cache "$SCRATCH/cache" --cache-size 2G --cache-mode "$mode")
    fi
    rm -rf "$SCRATCH/data" "$SCRATCH/cache"
    "$REPO/scripts/slowdisk.sh" run --dir "$SLOW" -- "$BIN" up --data "$SCRATCH/data" --mount "$SCRATCH/mnt" \
        --servers 2 --targets-per-server 1 --target-root "$SLOW/mnt/targets" "${cache[@]}" >>"$RUNLOG" 2>&1 ||
        { log "tandem up failed"; exit 1; }
    sleep 5
    "$SHARED/bench/suite.sh" "$SCRATCH/mnt" "$OUT/$mode.json" --quick >>"$RUNLOG" 2>&1 || log "suite.sh on $mode failed (see run.log)"
    sync_writes "$mode"
    "$BIN" status --json --data "$SCRATCH/data" >"$OUT/$mode-status.json" 2>>"$RUNLOG"
    "$BIN" down --data "$SCRATCH/data" >>"$RUNLOG" 2>&1
    "$REPO/scripts/slowdisk.sh" down --dir "$SLOW" >>"$RUNLOG" 2>&1
done

python3 - "$OUT" $MODES >"$OUT/table.md" <<'PY'
import json, os, sys
out, modes = sys.argv[1], sys.argv[2:]
res = {m: json.load(open(os.path.join(out, m + ".json"))) for m in modes if os.path.exists(os.path.join(out, m + ".json"))}
for m in modes:  # sync_writes' fio runs
    for jobs in ("1", "2"):
        p = os.path.join(out, f"{m}-sync-{jobs}.json")
        try:
            iops = sum(j["write"]["iops"] for j in json.load(open(p))["jobs"])
        except (OSError, ValueError, KeyError):
            continue
        res.setdefault(m, {}).setdefault("sync_write_iops", {})[jobs] = iops
measures = [("seq_write_MBps", "seq write 1 MiB, MB/s"), ("seq_read_MBps", "seq read 1 MiB, MB/s"),
            ("rand_write_iops", "rand write 4 KiB O_DIRECT, IOPS"), ("sync_write_iops", "rand write 4 KiB O_DIRECT+O_DSYNC, IOPS"),
            ("rand_read_iops", "rand read 4 KiB O_DIRECT, IOPS"),
            ("md_create_ops", "creates/s"), ("md_stat_ops", "stats/s"), ("md_remove_ops", "removes/s")]
base = modes[0]
print("| measure | jobs | " + " | ".join(modes) + "".join(f" | {m} / {base}" for m in modes[1:]) + " |")
print("|---|---|" + "---|" * (2 * len(modes) - 1))
for key, name in measures:
    for jobs in ("1", "2"):
        vals = [res.get(m, {}).get(key, {}).get(jobs) for m in modes]
        if all(v is None for v in vals):
            continue
        cells = [f"{v:,.0f}" if v is not None else "-" for v in vals]
        ratios = [f"{v / vals[0]:.1f}x" if v and vals[0] else "-" for v in vals[1:]]
        print(f"| {name} | {jobs} | " + " | ".join(cells) + "".join(f" | {r}" for r in ratios) + " |")
for m in modes:
    p = os.path.join(out, m + "-status.json")
    if os.path.exists(p):
        for c in json.load(open(p)).get("caches") or []:
            print(f"\n- {m}: cache of target {c['target']}: {c['used_bytes'] / 2**20:.0f} MiB used, hit ratio "
                  f"{100 * c['hit_ratio']:.1f}% of {c['hits'] + c['misses']} reads, {c['promoted']} promoted, {c['evicted']} evicted, "
                  f"{c.get('destaged_bytes', 0) / 2**20:.0f} MiB destaged, {c.get('dirty_bytes', 0) / 2**20:.0f} MiB dirty at the end")
PY
python3 "$REPO/scripts/bench-cache-chart.py" "$OUT" >"$OUT/chart.svg" 2>>"$RUNLOG" || log "no chart (see run.log)"
cat "$OUT/table.md"
log "results in $OUT"
