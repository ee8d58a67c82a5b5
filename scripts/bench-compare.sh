#!/usr/bin/env bash
# bench-compare.sh - run the shared storage benchmark suite on the local disk,
# on TandemFS and on the peer file systems, one system at a time, and write
# the results plus a comparison table into docs/bench-results/<date>/.
#
# Usage (as root, from anywhere):
#   scripts/bench-compare.sh [--commit REV | --worktree | --tandem-bin PATH]
#                            [--systems "local tandem juicefs ..."] [--out DIR]
#
#   --commit REV      build TandemFS from commit REV in a temporary git worktree
#                     (default: HEAD; the working tree is not touched)
#   --worktree        build TandemFS from the working tree as it is now
#   --tandem-bin PATH use an already built tandem binary (commit recorded as HEAD)
#   --systems LIST    systems to measure, in this order
#                     (default "local tandem tandem1 juicefs seaweedfs glusterfs
#                     moosefs seaweedfs-r2 glusterfs-r2": TandemFS with two
#                     copies and with one, and peers keeping one copy and two,
#                     so that the table compares like with like);
#                     juicefs-redis is also known; tandem1 is TandemFS with one
#                     copy of each file; tandem-devfuse is TandemFS (two copies)
#                     with its mount on /dev/fuse (tandem up --io-uring off); the
#                     default mount is on FUSE-over-io_uring where the kernel
#                     has it; tandem-cached is TandemFS (two copies) whose block
#                     cache answers O_DIRECT reads (tandem up --cache-direct-io),
#                     a labelled figure beside the storage's; seaweedfs-r2 and
#                     glusterfs-r2 are those peers keeping two copies)
#   --out DIR         result directory (default docs/bench-results/YYYY-MM-DD,
#                     or YYYY-MM-DD-HHMM if that already exists)
#
# Environment:
#   SUITE_ARGS   arguments after "DIR OUT.json" for suite.sh (default "--quick";
#                SUITE_ARGS= runs the full-size suite)
#   SHARED       the shared/ directory (default: ../shared next to the repo,
#                else /work/shared); suite is $SHARED/bench/suite.sh, peers
#                $SHARED/peers/<name>/{up,down}.sh
#   SCRATCH      directory in which a fresh bench-compare.XXXXXX holds the
#                local-disk test directory, the TandemFS build, data and mount
#                (default /var/tmp: the local disk and the TandemFS targets are
#                then on the same disk); removed at the end
#   SETTLE       seconds to wait after a system is up, before the suite (default 10)
#   MDTEST       passed to suite.sh (default: /var/tmp/ext/ior/install/bin/mdtest
#                if it exists and mpirun is installed; else python3 fallback)
#   Any other suite.sh knob (JOBS, SEQ_SIZE, ...) is passed through.
#
# Every system is started, measured and stopped before the next one starts.
# A system that fails to start or whose suite fails is recorded as failed and
# the run goes on. Whatever this script started is stopped on exit or Ctrl-C.
# Output: <system>.json (suite.sh format), env.json (machine, commit, per-system
# status, load), run.log (this script's progress), logs/ (up/down/suite
# output), table.md (scripts/bench-table.py), chart.svg (scripts/bench-chart.py:
# TandemFS against the best peer, row by row).
set -uo pipefail

PROG=bench-compare
REPO=$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)
export PATH=/usr/local/go/bin:$PATH

ts() { date +%H:%M:%S; }
RUNLOG=/dev/null
log() { echo "[$PROG $(ts)] $*" | tee -a "$RUNLOG" >&2; }
die() { log "ERROR: $*"; exit 1; }
usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit "${1:-1}"; }

# ------------------------------------------------------------------ arguments
MODE=commit REV=HEAD TANDEM_BIN="" OUT="" SYSTEMS="local tandem tandem1 juicefs seaweedfs glusterfs moosefs seaweedfs-r2 glusterfs-r2"
while [ $# -gt 0 ]; do
    case "$1" in
        --commit) MODE=commit; REV=${2:?--commit needs a revision}; shift ;;
        --worktree) MODE=worktree ;;
        --tandem-bin) MODE=bin; TANDEM_BIN=${2:?--tandem-bin needs a path}; shift ;;
        --systems) SYSTEMS=${2:?--systems needs a list}; shift ;;
        --out) OUT=${2:?--out needs a directory}; shift ;;
        -h|--help) usage 0 ;;
        *) echo "$PROG: unknown argument $1" >&2; usage 1 ;;
    esac
    shift
done
SUITE_ARGS=${SUITE_ARGS---quick}
SETTLE=${SETTLE:-10}
if [ -z "${SHARED:-}" ]; then
    if [ -d "$REPO/../shared/bench" ]; then SHARED=$(cd "$REPO/../shared" && pwd); else SHARED=/work/shared; fi
fi
SUITE=$SHARED/bench/suite.sh
PEERS=$SHARED/peers
PEERS_DATA=${PEERS_DATA:-/var/tmp/tandem-peers}
if [ -z "${MDTEST+x}" ] && [ -x /var/tmp/ext/ior/install/bin/mdtest ] && command -v mpirun >/dev/null; then
    export MDTEST=/var/tmp/ext/ior/install/bin/mdtest
fi

[ "$(id -u)" = 0 ] || die "run as root (FUSE mounts, drop_caches, peers)"
[ -x "$SUITE" ] || die "no suite at $SUITE (set SHARED=)"
command -v fio >/dev/null || die "fio is not installed ($SHARED/bench/install-deps.sh or apt-get install fio)"
command -v python3 >/dev/null || die "python3 is not installed"
for s in $SYSTEMS; do
    case $s in
        local|tandem|tandem1|tandem-devfuse|tandem-cached) ;;
        juicefs-redis) [ -f "$PEERS/juicefs/up.sh" ] || die "no $PEERS/juicefs/up.sh" ;;
        seaweedfs-r2|glusterfs-r2) [ -f "$PEERS/${s%-r2}/up.sh" ] || die "no $PEERS/${s%-r2}/up.sh" ;;
        *) [ -f "$PEERS/$s/up.sh" ] || die "unknown system '$s' (no $PEERS/$s/up.sh)" ;;
    esac
done

if [ -z "$OUT" ]; then
    OUT=$REPO/docs/bench-results/$(date +%F)
    [ -e "$OUT" ] && OUT=$REPO/docs/bench-results/$(date +%F-%H%M)
fi
mkdir -p "$OUT/logs" || die "cannot create $OUT"
OUT=$(cd "$OUT" && pwd)
RUNLOG=$OUT/run.log
: >"$RUNLOG"
STATUS=$OUT/.status.tsv   # system \t status \t seconds \t version \t detail \t load_before \t mount
: >"$STATUS"

SCRATCH=$(mktemp -d "${SCRATCH:-/var/tmp}/bench-compare.XXXXXX") || die "cannot create a directory in ${SCRATCH:-/var/tmp}"
T0=$SECONDS
STARTED=$(date -Is)

# ------------------------------------------------------------------ cleanup
SUITE_PID=""        # process group of the running suite.sh
CURRENT_SYS=""      # system being measured now
CURRENT_DOWN=""     # command that stops the system that is up now
WT=""               # temporary git worktree
finish_env() {      # env.json, table.md and chart.svg, also after an interrupted run
    python3 - "$OUT" "$STATUS" <<'PY' || log "could not write env.json"
import json, os, sys, subprocess
out, status = sys.argv[1:3]
env = json.load(open(os.path.join(out, ".env-head.json")))
env["finished"] = subprocess.run(["date", "-Is"], capture_output=True, text=True).stdout.strip()
env["uptime_end"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
env["wall_s"] = int(os.environ.get("WALL_S", "0"))
systems = {}
for line in open(status):
    f = line.rstrip("\n").split("\t")
    if len(f) < 7: continue
    systems[f[0]] = {"status": f[1], "seconds": int(f[2]), "version": f[3], "detail": f[4],
                     "loadavg_before": f[5], "mount": f[6]}
env["systems"] = systems
json.dump(env, open(os.path.join(out, "env.json"), "w"), indent=2)
open(os.path.join(out, "env.json"), "a").write("\n")
PY
    if python3 "$REPO/scripts/bench-table.py" "$OUT" >"$OUT/table.md.tmp"; then
        mv "$OUT/table.md.tmp" "$OUT/table.md"; log "wrote $OUT/table.md"
    else
        rm -f "$OUT/table.md.tmp"; log "bench-table.py failed"
    fi
    if python3 "$REPO/scripts/bench-chart.py" "$OUT" >"$OUT/chart.svg.tmp"; then
        mv "$OUT/chart.svg.tmp" "$OUT/chart.svg"; log "wrote $OUT/chart.svg"
    else
        rm -f "$OUT/chart.svg.tmp"; log "bench-chart.py failed"
    fi
}
descendants() {   # PID -> all descendant PIDs, deepest first
    local c
    for c in $(ps -o pid= --ppid "$1" 2>/dev/null); do descendants "$c"; echo "$c"; done
}
cleanup() {
    local rc=$?
    trap - EXIT INT TERM HUP
    if [ -n "$SUITE_PID" ] && kill -0 "$SUITE_PID" 2>/dev/null; then
        # fio/python run under `timeout`, in process groups of their own:
        # signal the whole tree, children first, so suite.sh can clean up
        log "stopping suite.sh (pid $SUITE_PID) and its children"
        local tree; tree=$(descendants "$SUITE_PID")
        kill -TERM $tree 2>/dev/null; kill -TERM "$SUITE_PID" 2>/dev/null
        for _ in $(seq 1 30); do kill -0 "$SUITE_PID" 2>/dev/null || break; sleep 0.5; done
        kill -KILL $(descendants "$SUITE_PID") "$SUITE_PID" 2>/dev/null
        sleep 1
        SUITE_PID=""
    fi
    if [ -n "$CURRENT_SYS" ]; then
        record "$CURRENT_SYS" interrupted 0 "" "run interrupted" "" ""
        rm -f "$OUT/$CURRENT_SYS.json"
    fi
    if [ -n "$CURRENT_DOWN" ]; then
        log "stopping: $CURRENT_DOWN"
        eval "$CURRENT_DOWN" >>"$OUT/logs/cleanup.log" 2>&1 || log "warning: '$CURRENT_DOWN' failed (see logs/cleanup.log)"
        CURRENT_DOWN=""
    fi
    if [ -n "$WT" ]; then git -C "$REPO" worktree remove --force "$WT" >/dev/null 2>&1 || rm -rf "$WT"; WT=""; fi
    if [ -d "$SCRATCH" ]; then
        if mountpoint -q "$SCRATCH/td/mnt" 2>/dev/null; then
            log "warning: $SCRATCH/td/mnt is still mounted; leaving $SCRATCH"
        else
            rm -rf -- "$SCRATCH"
        fi
    fi
    export WALL_S=$((SECONDS - T0))
    [ -f "$OUT/.env-head.json" ] && finish_env
    rm -f "$OUT/.env-head.json" "$STATUS"
    log "done in $((SECONDS - T0)) s (exit $rc); results in $OUT"
    exit "$rc"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM HUP

# ------------------------------------------------------------------ environment
log "results -> $OUT; scratch $SCRATCH; systems: $SYSTEMS; SUITE_ARGS='$SUITE_ARGS'"
# peer up.sh scripts copy sources into $PEERS_DATA/src without creating it
mkdir -p "$PEERS_DATA/src"

# ------------------------------------------------------------------ TandemFS build
TCOMMIT="" TDIRTY=false TBUILD=""
build_tandem() {
    local bin=$SCRATCH/tandem
    case $MODE in
        bin)
            cp -- "$TANDEM_BIN" "$bin" || return 1
            TCOMMIT=$(git -C "$REPO" rev-parse HEAD); TBUILD="prebuilt binary $TANDEM_BIN (HEAD at run time)" ;;
        worktree)
            TCOMMIT=$(git -C "$REPO" rev-parse HEAD)
            [ -n "$(git -C "$REPO" status --porcelain 2>/dev/null)" ] && TDIRTY=true
            TBUILD="working tree of $REPO"
            (cd "$REPO" && go build -o "$bin" ./cmd/tandem) >>"$OUT/logs/tandem.build.log" 2>&1 || return 1 ;;
        commit)
            TCOMMIT=$(git -C "$REPO" rev-parse --verify "$REV^{commit}") || return 1
            WT=$SCRATCH/wt
            git -C "$REPO" worktree add -f --detach "$WT" "$TCOMMIT" >>"$OUT/logs/tandem.build.log" 2>&1 || { WT=""; return 1; }
            TBUILD="clean checkout of $REV (${TCOMMIT:0:12})"
            (cd "$WT" && go build -o "$bin" ./cmd/tandem) >>"$OUT/logs/tandem.build.log" 2>&1
            local rc=$?
            git -C "$REPO" worktree remove --force "$WT" >/dev/null 2>&1 || rm -rf "$WT"
            WT=""
            [ $rc = 0 ] || return 1 ;;
    esac
}
TANDEM_OK=false
if [[ " $SYSTEMS " == *" tandem"* ]]; then
    log "building TandemFS ($MODE ${REV:-})"
    if build_tandem; then TANDEM_OK=true; log "built $SCRATCH/tandem from $TCOMMIT (dirty=$TDIRTY)"
    else log "TandemFS build FAILED (see logs/tandem.build.log)"; tail -5 "$OUT/logs/tandem.build.log" >&2; fi
else
    TCOMMIT=$(git -C "$REPO" rev-parse HEAD)
fi

# static environment, completed by finish_env at the end
export REPO TCOMMIT TDIRTY TBUILD SUITE_ARGS SUITE SYSTEMS STARTED SCRATCH MDTEST_USED="${MDTEST:-}"
python3 - "$OUT/.env-head.json" <<'PY'
import json, os, sys, subprocess, platform
def sh(c):
    try: return subprocess.run(c, shell=True, capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception as e: return "error: %s" % e
E = os.environ
env = {
    "started": E["STARTED"], "host": platform.node(), "kernel": platform.release(),
    "os": sh(". /etc/os-release && echo $PRETTY_NAME"),
    "cpu_model": sh("lscpu | sed -n 's/^Model name: *//p' | head -1"), "ncpu": os.cpu_count(),
    "mem_total": sh("free -h | awk '/^Mem:/{print $2}'"),
    "uptime_start": sh("uptime"),
    "disk": sh("df -hT %s | tail -1" % E["SCRATCH"]),
    "other_fuse_mounts_at_start": sh("findmnt -rn -o TARGET,FSTYPE | awk '$2 ~ /^fuse/'").splitlines(),
    "tandem_commit": E["TCOMMIT"],
    "tandem_commit_subject": sh("git -C '%s' log -1 --format=%%s %s" % (E["REPO"], E["TCOMMIT"])),
    "tandem_worktree_dirty": E["TDIRTY"] == "true", "tandem_build": E["TBUILD"],
    "go": sh("go version"), "fio": sh("fio --version"),
    "suite": E["SUITE"], "suite_args": E["SUITE_ARGS"], "mdtest": E["MDTEST_USED"] or None,
    "systems_order": E["SYSTEMS"].split(),
}
json.dump(env, open(sys.argv[1], "w"), indent=2)
PY

# ------------------------------------------------------------------ one system
# record SYSTEM STATUS SECONDS VERSION DETAIL LOAD MOUNT
record() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$(printf '%s' "$5" | tr '\t\n' '  ')" "$6" "$7" >>"$STATUS"; }

peer_version() {
    local b=$PEERS_DATA/bin
    case $1 in
        juicefs) echo "juicefs $("$b/juicefs" version 2>/dev/null | awk '{print $3}'), meta sqlite3" ;;
        juicefs-redis) echo "juicefs $("$b/juicefs" version 2>/dev/null | awk '{print $3}'), meta redis $(dpkg-query -W -f='${Version}' redis-server 2>/dev/null)" ;;
        seaweedfs) echo "seaweedfs $("$b/weed" version 2>/dev/null | awk '{print $3}')" ;;
        seaweedfs-r2) echo "seaweedfs $("$b/weed" version 2>/dev/null | awk '{print $3}'), replication 001 (2 copies)" ;;
        moosefs) echo "moosefs $(dpkg-query -W -f='${Version}' moosefs-master 2>/dev/null), goal 2" ;;
        glusterfs) echo "glusterfs $(dpkg-query -W -f='${Version}' glusterfs-server 2>/dev/null)" ;;
        glusterfs-r2) echo "glusterfs $(dpkg-query -W -f='${Version}' glusterfs-server 2>/dev/null), replica 2" ;;
    esac
}

# run_suite SYSTEM DIR : runs suite.sh in its own process group; returns its exit code
run_suite() {
    local sys=$1 dir=$2 slog=$OUT/logs/$1.suite.log rc
    : >"$slog"
    # shellcheck disable=SC2086
    setsid "$SUITE" "$dir" "$OUT/$sys.json" $SUITE_ARGS >"$slog" 2>&1 </dev/null &
    SUITE_PID=$!
    tail -n +1 -f --pid="$SUITE_PID" "$slog" 2>/dev/null | sed -u "s/^/    [$sys] /" >&2 &
    local tailpid=$!
    wait "$SUITE_PID"; rc=$?
    SUITE_PID=""
    wait "$tailpid" 2>/dev/null
    cat "$slog" >>"$RUNLOG"
    return $rc
}

# measure SYSTEM : bring it up, run the suite, bring it down
measure() {
    local sys=$1 t0=$SECONDS mnt="" ver="" rc load
    sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    log "=== $sys: start (load $load)"
    case $sys in
        local)
            mnt=$SCRATCH/local; mkdir -p "$mnt"
            ver="$(findmnt -n -o SOURCE,FSTYPE -T "$mnt" | tr -s ' ')"
            CURRENT_DOWN="rm -rf -- '$mnt'" ;;
        tandem|tandem1|tandem-devfuse|tandem-cached)
            if [ "$TANDEM_OK" != true ]; then
                record "$sys" failed 0 "$TCOMMIT" "build failed (logs/tandem.build.log)" "$load" ""
                log "=== $sys: FAILED (build)"; return
            fi
            ver="tandemfs $TCOMMIT$([ "$TDIRTY" = true ] && echo ' + uncommitted changes')"
            mnt=$SCRATCH/td/mnt
            CURRENT_DOWN="'$SCRATCH/tandem' down --data '$SCRATCH/td/data' || '$SCRATCH/tandem' down --force --data '$SCRATCH/td/data'"
            local upflags=()
            [ "$sys" = tandem-devfuse ] && upflags=(--io-uring off)
            [ "$sys" = tandem-cached ] && upflags=(--cache-direct-io)
            if ! timeout 300 "$SCRATCH/tandem" up --data "$SCRATCH/td/data" --mount "$mnt" "${upflags[@]}" >"$OUT/logs/tandem.up.log" 2>&1 \
                || ! mountpoint -q "$mnt"; then
                tail -n 5 "$OUT/logs/tandem.up.log" | sed 's/^/    /' >&2
                record "$sys" failed $((SECONDS - t0)) "$ver" "tandem up failed: $(tail -n 2 "$OUT/logs/tandem.up.log")" "$load" "$mnt"
                log "=== $sys: FAILED (up)"; stop_current "$sys"; return
            fi
            # tandem1: one copy of each file, like the peers' defaults
            # (TandemFS keeps two when it has two servers).
            if [ "$sys" = tandem1 ] && ! "$SCRATCH/tandem" stripe set --replicas 1 "$mnt" >>"$OUT/logs/tandem.up.log" 2>&1; then
                record "$sys" failed $((SECONDS - t0)) "$ver" "stripe set --replicas 1 failed" "$load" "$mnt"
                log "=== $sys: FAILED (stripe set)"; stop_current "$sys"; return
            fi ;;
        *)
            local pdir=$sys penv=()
            [ "$sys" = juicefs-redis ] && { pdir=juicefs; penv=(JFS_META_ENGINE=redis); }
            [ "$sys" = seaweedfs-r2 ] && { pdir=seaweedfs; penv=(SW_REPLICATION=001); }
            [ "$sys" = glusterfs-r2 ] && { pdir=glusterfs; penv=(GLUSTER_REPLICA=2); }
            # PURGE=1: delete the peer's data when it goes down. Peers keep
            # deleted files in trash or unreclaimed volumes; run after run
            # that filled the disk (2026-11-22: 67 GB, and the next run's
            # MooseFS and GlusterFS failed with ENOSPC).
            CURRENT_DOWN="env ${penv[*]} PURGE=1 bash '$PEERS/$pdir/down.sh'"
            log "$sys: up.sh (the first one builds/installs the peer)"
            mnt=$(env "${penv[@]}" timeout 1800 bash "$PEERS/$pdir/up.sh" 2>"$OUT/logs/$sys.up.log" | tail -n 1)
            rc=${PIPESTATUS[0]}
            ver=$(peer_version "$sys")
            if [ "$rc" != 0 ] || [ -z "$mnt" ] || ! mountpoint -q "$mnt"; then
                tail -n 5 "$OUT/logs/$sys.up.log" | sed 's/^/    /' >&2
                record "$sys" failed $((SECONDS - t0)) "$ver" "up.sh failed (rc=$rc): $(tail -n 2 "$OUT/logs/$sys.up.log")" "$load" "$mnt"
                log "=== $sys: FAILED (up)"; stop_current "$sys"; return
            fi ;;
    esac
    log "$sys: mounted at $mnt ($(findmnt -n -o FSTYPE -T "$mnt")); settling ${SETTLE}s"
    sleep "$SETTLE"
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    log "$sys: suite.sh $mnt $SUITE_ARGS (load $load)"
    run_suite "$sys" "$mnt"; rc=$?
    local st detail=""
    case $rc in
        0) st=ok ;;
        2) st=partial; detail=$(python3 -c 'import json,sys; print("; ".join(json.load(open(sys.argv[1]))["errors"]))' "$OUT/$sys.json" 2>/dev/null) ;;
        *) st=failed; detail="suite.sh exit $rc: $(grep -m1 'error' "$OUT/logs/$sys.suite.log")"; rm -f "$OUT/$sys.json" ;;
    esac
    [ -d "$OUT/$sys.logs" ] && mv "$OUT/$sys.logs" "$OUT/logs/$sys.suite-raw"
    stop_current "$sys"
    record "$sys" "$st" $((SECONDS - t0)) "$ver" "$detail" "$load" "$mnt"
    log "=== $sys: $st in $((SECONDS - t0)) s"
}
stop_current() {
    [ -n "$CURRENT_DOWN" ] || return 0
    log "$1: stopping"
    if ! eval "$CURRENT_DOWN" >>"$OUT/logs/$1.down.log" 2>&1; then
        log "warning: stopping $1 failed (logs/$1.down.log)"
    fi
    CURRENT_DOWN=""
    if [[ $1 == tandem* ]]; then
        if mountpoint -q "$SCRATCH/td/mnt"; then log "warning: $SCRATCH/td/mnt still mounted"
        else rm -rf -- "$SCRATCH/td"; fi
    fi
}

for s in $SYSTEMS; do
    CURRENT_SYS=$s
    measure "$s"
    CURRENT_SYS=""
done
log "all systems done"
exit 0
