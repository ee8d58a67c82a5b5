#!/usr/bin/env bash
# bench-nfs.sh - TandemFS's NFS gateway against NFS-Ganesha 4.3 (Debian,
# FSAL VFS) exporting the same disk, side by side in one run, with the
# same clients: libnfs's nfs-cp and nfs-cat for sequential 1 GiB copies
# (one client, and two at once), and `tandem bench nfs` (our own NFSv3
# client, the same for both servers) for random 4 KiB reads and FILE_SYNC
# writes, and creates, from one connection and from two.
#
# Usage (as root): scripts/bench-nfs.sh [--out DIR] [--seconds N] [--rounds R]
#   --out DIR     results (default docs/bench-results/YYYY-MM-DD-HHMM-nfs)
#   --seconds N   length of each random and create test (default 15)
#   --rounds R    measure every row R times, the systems taking turns
#                 (default 2); the table gives each row's median and range
#
# TandemFS runs as `tandem up --nfs` (two heads, the service address on a
# loopback alias) with 2 storage servers on /var/tmp, the disk Ganesha
# exports from; the test directory keeps one copy of each file, as the
# Ganesha export does (a second directory with two copies is measured too,
# as information). Both servers run all along and take turns, row by row
# (Ganesha first in odd rounds, TandemFS first in even ones), so that the
# minute-to-minute drift of this VM (15-25 %) falls on both alike; each
# client names its server's ports, so neither depends on rpcbind. Output:
# results.jsonl, table.md, run.log.
set -uo pipefail
REPO=$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)
SHARED=${SHARED:-$(cd "$REPO/../shared" 2>/dev/null && pwd || echo /work/shared)}
export PATH=/usr/local/go/bin:$PATH
OUT=$REPO/docs/bench-results/$(date +%Y-%m-%d-%H%M)-nfs
SECONDS_EACH=15
ROUNDS=2
while [ $# -gt 0 ]; do
    case $1 in
    --out) OUT=$2; shift 2 ;;
    --seconds) SECONDS_EACH=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    *) echo "bench-nfs: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "bench-nfs: run as root (drop_caches, the loopback alias)" >&2; exit 2; }
command -v nfs-cp >/dev/null || { echo "bench-nfs: nfs-cp missing (apt-get install libnfs-utils)" >&2; exit 2; }
mkdir -p "$OUT"
RUNLOG=$OUT/run.log
log() { echo "[bench-nfs $(date +%H:%M:%S)] $*" | tee -a "$RUNLOG" >&2; }

BIN=$(mktemp -d /var/tmp/bench-nfs-bin.XXXXXX)/tandem
(cd "$REPO" && go build -o "$BIN" ./cmd/tandem) || exit 1
DATA=$(mktemp -d /var/tmp/bench-nfs.XXXXXX)
SRC=/dev/shm/bench-nfs-1G
head -c 1073741824 /dev/urandom > "$SRC"
RUN=$$ # fresh file names: a peer's export may hold an earlier run's files
RESULTS=$OUT/results.jsonl
: > "$RESULTS"
cleanup() {
    "$BIN" down --data "$DATA/data" >/dev/null 2>&1
    bash "$SHARED/peers/nfs-ganesha/down.sh" >/dev/null 2>&1
    rm -rf "$DATA" "$(dirname "$BIN")" "$SRC"
}
trap cleanup EXIT

record() { # system test clients value unit
    printf '{"system":"%s","test":"%s","clients":%s,"value":%s,"unit":"%s"}\n' "$@" >> "$RESULTS"
    log "$1 $2 clients=$3: $4 $5"
}

# The systems: URL prefix and suffix for libnfs, and tandem bench nfs's
# arguments. Filled in once each server is up.
declare -A URL_PRE URL_SUF BENCH_ARGS

# seq_row SYSTEM N ROUND: 1 GiB written by each of N nfs-cp at once, then
# read back by N nfs-cat at once from a cold page cache.
seq_row() {
    local sys=$1 n=$2 round=$3 pre=${URL_PRE[$1]} suf=${URL_SUF[$1]} s e i pids=() ok=1
    s=$(date +%s.%N)
    for i in $(seq_list "$n"); do nfs-cp "$SRC" "$pre/seq-$RUN-$round-$n-$i$suf" >>"$RUNLOG" 2>&1 & pids+=($!); done
    for i in "${pids[@]}"; do wait "$i" || ok=0; done
    e=$(date +%s.%N)
    [ $ok = 1 ] || { log "$sys: nfs-cp failed"; return 1; }
    record "$sys" seq-write-1M "$n" "$(python3 -c "print(round($n*1073.741824/($e-$s),1))")" MB/s
    sync; echo 3 > /proc/sys/vm/drop_caches
    pids=()
    s=$(date +%s.%N)
    for i in $(seq_list "$n"); do nfs-cat "$pre/seq-$RUN-$round-$n-$i$suf" >/dev/null 2>>"$RUNLOG" & pids+=($!); done
    for i in "${pids[@]}"; do wait "$i" || ok=0; done
    e=$(date +%s.%N)
    [ $ok = 1 ] || { log "$sys: nfs-cat failed"; return 1; }
    record "$sys" seq-read-1M "$n" "$(python3 -c "print(round($n*1073.741824/($e-$s),1))")" MB/s
}
seq_list() { local i; for ((i = 1; i <= $1; i++)); do echo "$i"; done; }

# rand SYSTEM TEST JOBS [SECONDS]: tandem bench nfs against a server; a
# SECONDS argument makes it a warm-up, not recorded.
rand() {
    local sys=$1 test=$2 jobs=$3 secs=${4:-$SECONDS_EACH} out
    # shellcheck disable=SC2086 # BENCH_ARGS holds several arguments
    out=$("$BIN" bench nfs ${BENCH_ARGS[$sys]} --tests "$test" --jobs "$jobs" --seconds "$secs" --json 2>>"$RUNLOG") ||
        { log "$sys: tandem bench nfs $test failed"; return 1; }
    [ -n "${4:-}" ] && return 0
    python3 -c '
import json, sys
for r in json.load(sys.stdin):
    print(json.dumps({"system": sys.argv[1], "test": r["test"], "clients": r["jobs"], "value": round(r["ops_per_second"]), "unit": "ops/s"}))
' "$sys" <<<"$out" >> "$RESULTS"
    log "$sys $test clients=$jobs: $(tail -1 "$RESULTS" | python3 -c 'import json,sys; print(json.load(sys.stdin)["value"])') ops/s"
}

log "starting NFS-Ganesha"
bash "$SHARED/peers/nfs-ganesha/up.sh" >>"$RUNLOG" 2>&1 || { log "ganesha did not start"; exit 1; }
GEXPORT=${PEERS_DATA:-/var/tmp/tandem-peers}/nfs-ganesha/export
URL_PRE[ganesha]="nfs://127.0.0.1/export" URL_SUF[ganesha]="?version=3&nfsport=2049&mountport=20048"
BENCH_ARGS[ganesha]="--server 127.0.0.1:2049 --mount-server 127.0.0.1:20048 --export /export --dir bench-nfs-$RUN"

log "starting TandemFS (tandem up --nfs)"
# unstable: UNSTABLE writes buffered until COMMIT, as Ganesha (and Linux's
# server) buffer them; the gateway's default makes each durable first.
"$BIN" up --data "$DATA/data" --mount "$DATA/mnt" --nfs --nfs-export '/ 127.0.0.0/8(rw,no_root_squash,unstable)' >>"$RUNLOG" 2>&1 || { log "tandem up failed"; exit 1; }
ADDR=$(python3 -c "import json; print(json.load(open('$DATA/data/cluster.json'))['nfs']['address'])")
PORT=${ADDR##*:}
mkdir -p "$DATA/mnt/one" "$DATA/mnt/two"
"$BIN" stripe set --replicas 1 "$DATA/mnt/one" >>"$RUNLOG" 2>&1
"$BIN" stripe set --replicas 2 "$DATA/mnt/two" >>"$RUNLOG" 2>&1
for c in one two; do
    sys=tandem1; [ $c = two ] && sys=tandem2
    URL_PRE[$sys]="nfs://${ADDR%:*}/$c" URL_SUF[$sys]="?version=3&nfsport=$PORT&mountport=$PORT"
    BENCH_ARGS[$sys]="--server $ADDR --export / --dir $c"
done

for ((round = 1; round <= ROUNDS; round++)); do
    # Ganesha first in odd rounds, TandemFS first in even ones.
    order=(ganesha tandem1 tandem2)
    ((round % 2 == 0)) && order=(tandem1 ganesha tandem2)
    log "round $round of $ROUNDS (${order[*]})"
    for n in 1 2; do for sys in "${order[@]}"; do seq_row "$sys" "$n" "$round" || exit 1; done; done
    rm -f "$GEXPORT"/seq-$RUN-* "$DATA"/mnt/one/seq-$RUN-* "$DATA"/mnt/two/seq-$RUN-*
    # The random reads are answered from each server's memory (Ganesha's
    # page cache, the gateway's block cache): a first pass puts the file
    # there, after the copies above pushed it out.
    for sys in "${order[@]}"; do rand "$sys" rand-read-4k 2 5 || exit 1; done
    for test in rand-read-4k rand-write-4k-stable create; do
        for jobs in 1 2; do for sys in "${order[@]}"; do rand "$sys" "$test" "$jobs" || exit 1; done; done
    done
done
rm -rf "$GEXPORT/bench-nfs-$RUN"

python3 - "$RESULTS" > "$OUT/table.md" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
vals, unit, tests = {}, {}, []
for r in rows:
    k = (r["test"], r["clients"])
    if k not in tests: tests.append(k)
    vals.setdefault((r["system"],) + k, []).append(r["value"])
    unit[k] = r["unit"]
def cell(sys_, k):
    v = vals.get((sys_,) + k)
    if not v: return "-", None
    m = statistics.median(v)
    spread = f" ({min(v):,.0f}-{max(v):,.0f})" if len(v) > 1 else ""
    return f"{m:,.0f}{spread} {unit[k]}", m
print("| test | clients | TandemFS, 1 copy | NFS-Ganesha 4.3 | TandemFS / Ganesha | TandemFS, 2 copies |")
print("|---|---|---|---|---|---|")
for k in tests:
    (t1, m1), (g, mg), (t2, _) = cell("tandem1", k), cell("ganesha", k), cell("tandem2", k)
    ratio = f"{m1/mg:.2f}" if m1 and mg else "-"
    print(f"| {k[0]} | {k[1]} | {t1} | {g} | {ratio} | {t2} |")
PY
cat "$OUT/table.md"
log "results in $OUT"
