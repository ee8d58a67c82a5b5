#!/usr/bin/env bash
# bench-nfs.sh - TandemFS's NFS gateway against NFS-Ganesha 4.3 (Debian,
# FSAL VFS) exporting the same disk, side by side in one run, with the
# same clients: libnfs's nfs-cp and nfs-cat for sequential 1 GiB copies
# (one client, and two at once), and `tandem bench nfs` (our own NFSv3
# client, the same for both servers) for random 4 KiB reads and FILE_SYNC
# writes, and creates, from one connection and from two.
#
# Usage (as root): scripts/bench-nfs.sh [--out DIR] [--seconds N]
#   --out DIR     results (default docs/bench-results/YYYY-MM-DD-HHMM-nfs)
#   --seconds N   length of each random and create test (default 15)
#
# TandemFS runs as `tandem up --nfs` (two heads, the service address on a
# loopback alias) with 2 storage servers on /var/tmp, the disk Ganesha
# exports from; the test directory keeps one copy of each file, as the
# Ganesha export does (a second directory with two copies is measured too,
# as information). Each system is measured alone: Ganesha is stopped while
# TandemFS runs and the other way round. Output: results.json, table.md,
# run.log.
set -uo pipefail
REPO=$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)
SHARED=${SHARED:-$(cd "$REPO/../shared" 2>/dev/null && pwd || echo /work/shared)}
export PATH=/usr/local/go/bin:$PATH
OUT=$REPO/docs/bench-results/$(date +%Y-%m-%d-%H%M)-nfs
SECONDS_EACH=15
while [ $# -gt 0 ]; do
    case $1 in
    --out) OUT=$2; shift 2 ;;
    --seconds) SECONDS_EACH=$2; shift 2 ;;
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

# seq_copy SYSTEM URL_PREFIX URL_SUFFIX: 1 GiB written and read back by one
# nfs-cp/nfs-cat, then by two at once (2 GiB in all).
seq_copy() {
    local sys=$1 pre=$2 suf=$3 n s e i pids ok
    for n in 1 2; do
        ok=1 pids=()
        s=$(date +%s.%N)
        for i in $(seq_list "$n"); do nfs-cp "$SRC" "$pre/seq-$RUN-$n-$i$suf" >>"$RUNLOG" 2>&1 & pids+=($!); done
        for i in "${pids[@]}"; do wait "$i" || ok=0; done
        e=$(date +%s.%N)
        [ $ok = 1 ] || { log "$sys: nfs-cp failed"; return 1; }
        record "$sys" seq-write-1M "$n" "$(python3 -c "print(round($n*1073.741824/($e-$s),1))")" MB/s
        sync; echo 3 > /proc/sys/vm/drop_caches
        pids=()
        s=$(date +%s.%N)
        for i in $(seq_list "$n"); do nfs-cat "$pre/seq-$RUN-$n-$i$suf" >/dev/null 2>>"$RUNLOG" & pids+=($!); done
        for i in "${pids[@]}"; do wait "$i" || ok=0; done
        e=$(date +%s.%N)
        [ $ok = 1 ] || { log "$sys: nfs-cat failed"; return 1; }
        record "$sys" seq-read-1M "$n" "$(python3 -c "print(round($n*1073.741824/($e-$s),1))")" MB/s
    done
}
seq_list() { local i; for ((i = 1; i <= $1; i++)); do echo "$i"; done; }

# rand SYSTEM ARGS...: tandem bench nfs against a server.
rand() {
    local sys=$1; shift
    "$BIN" bench nfs "$@" --seconds "$SECONDS_EACH" --json 2>>"$RUNLOG" | python3 -c '
import json, sys
for r in json.load(sys.stdin):
    print(json.dumps({"system": sys.argv[1], "test": r["test"], "clients": r["jobs"], "value": round(r["ops_per_second"]), "unit": "ops/s"}))
' "$sys" >> "$RESULTS"
}

log "NFS-Ganesha"
bash "$SHARED/peers/nfs-ganesha/up.sh" >>"$RUNLOG" 2>&1 || { log "ganesha did not start"; exit 1; }
seq_copy ganesha "nfs://127.0.0.1/export" ""
rand ganesha --server 127.0.0.1:2049 --mount-server 127.0.0.1:20048 --export /export --dir "bench-nfs-$RUN"
rm -rf "${PEERS_DATA:-/var/tmp/tandem-peers}"/nfs-ganesha/export/seq-$RUN-* "${PEERS_DATA:-/var/tmp/tandem-peers}"/nfs-ganesha/export/bench-nfs-$RUN
bash "$SHARED/peers/nfs-ganesha/down.sh" >>"$RUNLOG" 2>&1

log "TandemFS (tandem up --nfs)"
# unstable: UNSTABLE writes buffered until COMMIT, as Ganesha (and Linux's
# server) buffer them; the gateway's default makes each durable first.
"$BIN" up --data "$DATA/data" --mount "$DATA/mnt" --nfs --nfs-export '/ 127.0.0.0/8(rw,no_root_squash,unstable)' >>"$RUNLOG" 2>&1 || { log "tandem up failed"; exit 1; }
ADDR=$(python3 -c "import json; print(json.load(open('$DATA/data/cluster.json'))['nfs']['address'])")
PORT=${ADDR##*:}
mkdir -p "$DATA/mnt/one" "$DATA/mnt/two"
"$BIN" stripe set --replicas 1 "$DATA/mnt/one" >>"$RUNLOG" 2>&1
"$BIN" stripe set --replicas 2 "$DATA/mnt/two" >>"$RUNLOG" 2>&1
Q="?version=3&nfsport=$PORT&mountport=$PORT"
seq_copy tandem1 "nfs://${ADDR%:*}/one" "$Q"
rand tandem1 --server "$ADDR" --export / --dir one
seq_copy tandem2 "nfs://${ADDR%:*}/two" "$Q"
rand tandem2 --server "$ADDR" --export / --dir two

python3 - "$RESULTS" > "$OUT/table.md" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
val = {(r["system"], r["test"], r["clients"]): (r["value"], r["unit"]) for r in rows}
tests = []
for r in rows:
    k = (r["test"], r["clients"])
    if k not in tests: tests.append(k)
print("| test | clients | TandemFS, 1 copy | NFS-Ganesha 4.3 | TandemFS / Ganesha | TandemFS, 2 copies |")
print("|---|---|---|---|---|---|")
for t, c in tests:
    t1, g, t2 = val.get(("tandem1", t, c)), val.get(("ganesha", t, c)), val.get(("tandem2", t, c))
    ratio = f"{t1[0]/g[0]:.2f}" if t1 and g and g[0] else "-"
    f = lambda v: f"{v[0]:,} {v[1]}" if v else "-"
    print(f"| {t} | {c} | {f(t1)} | {f(g)} | {ratio} | {f(t2)} |")
PY
cat "$OUT/table.md"
log "results in $OUT"
