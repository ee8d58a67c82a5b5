#!/bin/bash
# The client's disk cache (tandem mount --cache-dir; issue 42,
# docs/benchmarks.md "Client disk cache"): a 1 GiB file read through a
# mount with a disk cache, then read again after an unmount and a remount
# with every page cache dropped, against the same bytes read from a file of
# the local disk (the page cache's first touch: what a cache on that disk
# can give at best) and from the page cache. Run as root (drop_caches).
#
#   scripts/bench-diskcache.sh [--size-mib N] [--out FILE]
set -uo pipefail
REPO=$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)
export PATH=/usr/local/go/bin:$PATH
SIZE_MIB=1024
OUT=$REPO/docs/bench-results/$(date +%Y-%m-%d-%H%M)-diskcache.md
while [ $# -gt 0 ]; do
    case $1 in
    --size-mib) SIZE_MIB=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "bench-diskcache: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "bench-diskcache: run as root (drop_caches)" >&2; exit 2; }
S=$(mktemp -d /var/tmp/bench-diskcache.XXXXXX)
BIN=$S/tandem
(cd "$REPO" && go build -o "$BIN" ./cmd/tandem) || exit 1
MPID=
cleanup() {
    [ -n "$MPID" ] && { umount "$S/a" 2>/dev/null; wait "$MPID" 2>/dev/null; }
    "$BIN" down --data "$S/data" >/dev/null 2>&1
    rm -rf "$S"
}
trap cleanup EXIT
log() { echo "[bench-diskcache $(date +%H:%M:%S)] $*" >&2; }

"$BIN" up --data "$S/data" --mount "$S/mnt" >/dev/null || exit 1
META=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['meta_addr'])" "$S/data/cluster.json" 2>/dev/null)
SECRET=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['secret_file'])" "$S/data/cluster.json" 2>/dev/null)
[ -n "$META" ] && [ -n "$SECRET" ] || { log "cannot read the cluster's layout"; exit 1; }
mkdir -p "$S/a" "$S/cache"
mount_a() {
    "$BIN" mount --meta "$META" --secret-file "$SECRET" --cache-dir "$S/cache" --cache-size 4G "$S/a" 2>>"$S/mount.log" &
    MPID=$!
    for _ in $(seq 100); do mountpoint -q "$S/a" && return 0; sleep 0.1; done
    log "the cached mount did not come up"; exit 1
}
unmount_a() { umount "$S/a"; wait "$MPID"; MPID=; }
# rate CMD...: runs CMD after dropping every page cache, prints MB/s.
rate() {
    sync; echo 3 >/proc/sys/vm/drop_caches
    local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null 2>&1; t1=$(date +%s.%N)
    python3 -c "print(f'{$SIZE_MIB * 1048576 / 1e6 / ($t1 - $t0):.0f}')"
}
warm() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null 2>&1; t1=$(date +%s.%N); python3 -c "print(f'{$SIZE_MIB * 1048576 / 1e6 / ($t1 - $t0):.0f}')"; }

log "writing ${SIZE_MIB} MiB into TandemFS and onto the local disk"
dd if=/dev/urandom of="$S/mnt/f" bs=1M count="$SIZE_MIB" conv=fsync status=none
dd if="$S/mnt/f" of="$S/local" bs=1M conv=fsync status=none
mount_a
first=$(rate dd if="$S/a/f" of=/dev/null bs=1M)
unmount_a
mount_a
again=$(rate dd if="$S/a/f" of=/dev/null bs=1M)
hot=$(warm dd if="$S/a/f" of=/dev/null bs=1M)
cmp -s "$S/a/f" "$S/local" || { log "the file read through the cached mount differs"; exit 1; }
unmount_a
cold=$(rate dd if="$S/local" of=/dev/null bs=1M)
pagecache=$(warm dd if="$S/local" of=/dev/null bs=1M)
nocache=$(rate dd if="$S/mnt/f" of=/dev/null bs=1M)
{
    echo "| read of a ${SIZE_MIB} MiB file, 1 MiB at a time | MB/s |"
    echo "|---|---|"
    echo "| through the mount with no disk cache, page caches dropped | $nocache |"
    echo "| through the cached mount, first read (fills the disk cache) | $first |"
    echo "| after an unmount and a remount, page caches dropped: from the disk cache | $again |"
    echo "| the same, read again (the kernel's page cache of the mount) | $hot |"
    echo "| the local disk's file, page cache dropped (first touch) | $cold |"
    echo "| the local disk's file from the page cache | $pagecache |"
    echo
    echo "disk cache after the run: $(cat "$S/cache/index.json" | head -c 200)..."
} | tee "$OUT"
log "results in $OUT"
