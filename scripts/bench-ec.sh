#!/bin/bash
# Erasure coding against two copies and the local disk, side by side in one
# run on one machine (issue 41; docs/benchmarks.md, "Erasure coding"):
# sequential 1 MiB writes (dd conv=fsync) and reads after drop_caches of a
# 1 GiB file of random bytes into a 4+2 directory, an 8+2 directory, a
# two-copy directory and a directory of the local disk; the bytes on the
# targets per byte stored; a degraded read of the 4+2 file with the server
# of its first data shard killed; the rate at which that server's shards
# are rebuilt on the others (--ec-rebuild-after 5s); and the share of the
# mount's CPU that Reed-Solomon coding takes (pprof during a 4+2 write
# and read). Run as root (drop_caches). Results: docs/bench-results/<date>-ec/.
set -uo pipefail
REPO=$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)
export PATH=/usr/local/go/bin:$PATH
OUT=$REPO/docs/bench-results/$(date +%Y-%m-%d-%H%M)-ec
ROUNDS=2
while [ $# -gt 0 ]; do
    case $1 in
    --out) OUT=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    *) echo "bench-ec: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "bench-ec: run as root (drop_caches)" >&2; exit 2; }
mkdir -p "$OUT"
RUNLOG=$OUT/run.log
RESULTS=$OUT/results.jsonl
: > "$RESULTS"
log() { echo "[bench-ec $(date +%H:%M:%S)] $*" | tee -a "$RUNLOG" >&2; }
record() { # test system value unit
    printf '{"test":"%s","system":"%s","value":%s,"unit":"%s"}\n' "$@" >> "$RESULTS"
    log "$1 $2: $3 $4"
}

BIN=$(mktemp -d /var/tmp/bench-ec-bin.XXXXXX)/tandem
(cd "$REPO" && go build -o "$BIN" ./cmd/tandem) || exit 1
DATA=$(mktemp -d /var/tmp/bench-ec.XXXXXX)
SRC=/dev/shm/bench-ec-1G
head -c 1073741824 /dev/urandom > "$SRC"
cleanup() {
    "$BIN" down --data "$DATA/data" >/dev/null 2>&1
    rm -rf "$DATA" "$(dirname "$BIN")" "$SRC"
}
trap cleanup EXIT

TANDEM_PPROF=127.0.0.1:0 TANDEM_METRICS=127.0.0.1:0 "$BIN" up --data "$DATA/data" --mount "$DATA/mnt" --servers 10 --targets-per-server 1 \
    --ec-rebuild-after 5s >>"$RUNLOG" 2>&1 || { log "tandem up failed"; exit 1; }
M=$DATA/mnt
mkdir -p "$M/ec42" "$M/ec82" "$M/two" "$DATA/local"
"$BIN" stripe set --ec 4+2 "$M/ec42" && "$BIN" stripe set --ec 8+2 "$M/ec82" && "$BIN" stripe set --replicas 2 "$M/two" || exit 1
dir_of() { case $1 in local) echo "$DATA/local" ;; *) echo "$M/$1" ;; esac; }
rate() { python3 -c "print(round(1073.741824/($2-$1),1))"; }
stored() { du -sb "$DATA/data/storage" | cut -f1; }

# Each round starts with another system, and each write with nothing
# dirty in the page cache: a system written right after another finds the
# disk still busy with that one's writeback (the first rounds always wrote
# two copies second and the coded files last).
SYSTEMS=(local two ec42 ec82)
rotated() { for i in 0 1 2 3; do echo "${SYSTEMS[$(( (i + $1) % 4 ))]}"; done; }
for round in $(seq 1 "$ROUNDS"); do
    for sys in $(rotated "$round"); do
        sync; sleep 2
        before=$(stored)
        s=$(date +%s.%N)
        dd if="$SRC" of="$(dir_of $sys)/g$round" bs=1M conv=fsync status=none || { log "$sys: write failed"; exit 1; }
        e=$(date +%s.%N)
        record seq-write-1M "$sys" "$(rate "$s" "$e")" MB/s
        if [ "$round" = 1 ] && [ "$sys" != local ]; then
            sync
            record bytes-per-byte "$sys" "$(python3 -c "print(round(($(stored)-$before)/1073741824,3))")" ""
        fi
    done
    sync; echo 3 > /proc/sys/vm/drop_caches
    for sys in $(rotated "$round"); do
        s=$(date +%s.%N)
        dd if="$(dir_of $sys)/g$round" of=/dev/null bs=1M status=none || { log "$sys: read failed"; exit 1; }
        e=$(date +%s.%N)
        record seq-read-1M "$sys" "$(rate "$s" "$e")" MB/s
    done
done

# How often the coded reads above were hedged (a shard slower than four
# times the recent shard reads raced by a rebuild) or degraded: each
# coded read is about 1024 pieces of 1 MiB cells.
MX=$(grep -o 'metrics on http://[0-9.:]*/metrics' "$DATA/data/logs/mount.log" | head -1 | sed 's|metrics on ||')
counter() { curl -s "$MX" | awk -v n="$1" '$1 == n { print $2 }'; }
if [ -n "$MX" ]; then
    pieces=$((2 * ROUNDS * 1024))
    record hedged-reads ec "$(counter tandem_client_ec_hedged_reads_total)" "of about $pieces pieces read"
    record hedge-wins ec "$(counter tandem_client_ec_hedge_wins_total)" "hedged reads the rebuild answered first"
    record degraded-pieces ec "$(counter tandem_client_ec_degraded_reads_total)" "pieces rebuilt (hedges included)"
fi

# The mount's CPU in Reed-Solomon coding, during a 4+2 write and read.
PP=$(grep -o 'pprof on http://[0-9.:]*' "$DATA/data/logs/mount.log" | head -1 | sed 's|pprof on ||')
if [ -n "$PP" ]; then
    curl -s -o "$OUT/mount-cpu.pprof" "$PP/debug/pprof/profile?seconds=8" &
    CURL=$!
    sleep 0.5
    dd if="$SRC" of="$M/ec42/profiled" bs=1M conv=fsync status=none
    sync; echo 3 > /proc/sys/vm/drop_caches
    dd if="$M/ec42/profiled" of=/dev/null bs=1M status=none
    wait $CURL
    share=$(go tool pprof -top -focus=reedsolomon "$BIN" "$OUT/mount-cpu.pprof" 2>/dev/null | grep -o 'Showing nodes accounting for [^,]*, [0-9.]*%' | grep -o '[0-9.]*%$' | tr -d %)
    record reed-solomon-cpu-share ec42 "${share:-0}" "% of the mount's CPU"
fi

# Degraded read: the server of the first data shard of the 4+2 file gone.
ADDR=$("$BIN" stripe get --json "$M/ec42/g1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["ec"]["shards"][0]["addr"])')
NAME=$(python3 -c "import json; l=json.load(open('$DATA/data/cluster.json')); print([s['name'] for s in l['servers'] if s['listen']=='$ADDR'][0])")
log "killing $NAME ($ADDR), which holds data shard 0 of ec42/g1"
kill -9 "$(cat "$DATA/data/run/$NAME.pid")"
start=$(date +%s.%N)
sleep 1; echo 3 > /proc/sys/vm/drop_caches
s=$(date +%s.%N)
dd if="$M/ec42/g1" of=/dev/null bs=1M status=none || { log "degraded read failed"; exit 1; }
e=$(date +%s.%N)
record degraded-read-1M ec42 "$(rate "$s" "$e")" MB/s

# Rebuild of the killed server's shards on the others.
while :; do
    j=$("$BIN" status --json --data "$DATA/data" 2>/dev/null)
    done=$(echo "$j" | python3 -c 'import json,sys; e=json.load(sys.stdin).get("ec_repair") or {}; print(1 if e.get("rebuilt_shards",0)>0 and e.get("degraded_stripes",1)==0 and e.get("evacuating_files",1)==0 else 0)')
    [ "$done" = 1 ] && break
    if python3 -c "import sys,time; sys.exit(0 if time.time()-$start > 600 else 1)"; then log "the rebuild did not end in 10 minutes"; break; fi
    sleep 1
done
e=$(date +%s.%N)
bytes=$(echo "$j" | python3 -c 'import json,sys; print(json.load(sys.stdin)["ec_repair"]["rebuilt_bytes"])')
record rebuild-rate ec "$(python3 -c "print(round($bytes/1e6/($e-$start),1))")" "MB/s ($bytes bytes, from the kill, 5 s of it waiting to retire the server)"

python3 - "$RESULTS" > "$OUT/table.md" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for r in rows:
    by.setdefault((r["test"], r["system"]), []).append(r["value"])
def v(t, s):
    x = by.get((t, s))
    return ", ".join(f"{y:g}" for y in x) if x else "-"
print("| test | local disk | two copies | 4+2 | 8+2 |")
print("|---|---|---|---|---|")
for t in ["seq-write-1M", "seq-read-1M", "bytes-per-byte"]:
    print(f"| {t} | {v(t,'local')} | {v(t,'two')} | {v(t,'ec42')} | {v(t,'ec82')} |")
print()
print("Round by round, against two copies:")
print()
for t in ["seq-write-1M", "seq-read-1M"]:
    two = by.get((t, "two"), [])
    for s in ["ec42", "ec82"]:
        ratios = [f"{e / c:.2f}x" for e, c in zip(by.get((t, s), []), two)]
        print(f"- {t} {s}: {', '.join(ratios)}")
print()
for t, s in [("degraded-read-1M", "ec42"), ("rebuild-rate", "ec"), ("reed-solomon-cpu-share", "ec42"),
             ("hedged-reads", "ec"), ("hedge-wins", "ec"), ("degraded-pieces", "ec")]:
    r = [x for x in rows if x["test"] == t]
    if r:
        print(f"- {t} ({s}): {r[0]['value']:g} {r[0]['unit']}")
PY
cat "$OUT/table.md"
log "results in $OUT"
