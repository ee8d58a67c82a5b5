#!/bin/bash
# A slow disk on this machine, for the flash cache tier's tests and benchmark
# (issue 42): a file system on a loop device whose reads and writes are
# throttled by the blkio cgroup (v1) to about a hard disk's speed, while the
# root disk plays the flash.
#
#   scripts/slowdisk.sh up [--dir DIR] [--size SIZE] [--iops N] [--mbps N]
#       makes DIR/disk.img (SIZE, default 8G, sparse), attaches it to a loop
#       device with direct I/O (no second copy in the page cache), makes an
#       ext4 file system on it, mounts it at DIR/mnt, and makes the blkio
#       cgroup tandem-slowdisk that throttles the loop device to N IOPS
#       (default 150) and N MB/s (default 150) each way. Prints the mount
#       point.
#   scripts/slowdisk.sh run [--dir DIR] CMD [ARG...]
#       runs CMD in that cgroup: its I/O to the loop device, and its
#       children's, is throttled (I/O to other devices is not). Writes are
#       throttled when the process itself submits them (O_DIRECT, fsync,
#       sync_file_range); cgroup v1 does not charge the kernel's background
#       writeback of the page cache to the cgroup, as a disk's own cache
#       absorbs bursts. Measured here (fio, dd): 150 random 4 KiB reads and
#       writes a second with O_DIRECT; sequential O_DIRECT transfers go in
#       512 KiB requests, so about 80 MB/s; a buffered write with fsync
#       151 MB/s.
#   scripts/slowdisk.sh status [--dir DIR]
#   scripts/slowdisk.sh down [--dir DIR]
#       moves the cgroup's processes out, removes it, unmounts, detaches the
#       loop device and deletes the image.
#
# Run as root.
set -euo pipefail

CG=/sys/fs/cgroup/blkio/tandem-slowdisk
DIR=/var/tmp/tandem-slowdisk
SIZE=8G
IOPS=150
MBPS=150

die() { echo "slowdisk: $*" >&2; exit 2; }

[ $# -ge 1 ] || die "give up, run, status or down (see the head of $0)"
cmd=$1
shift
while [ $# -gt 0 ]; do
    case $1 in
    --dir) DIR=$2; shift 2 ;;
    --size) SIZE=$2; shift 2 ;;
    --iops) IOPS=$2; shift 2 ;;
    --mbps) MBPS=$2; shift 2 ;;
    --) shift; break ;;
    -*) die "unknown option $1" ;;
    *) break ;;
    esac
done
[ "$(id -u)" = 0 ] || die "run as root (loop devices, mount, cgroups)"
[ -d /sys/fs/cgroup/blkio ] || die "no blkio cgroup (v1) at /sys/fs/cgroup/blkio"

loopdev() { [ -f "$DIR/loop" ] && cat "$DIR/loop"; }

up() {
    [[ $IOPS =~ ^[0-9]+$ && $IOPS -gt 0 ]] || die "--iops $IOPS: give a positive number"
    [[ $MBPS =~ ^[0-9]+$ && $MBPS -gt 0 ]] || die "--mbps $MBPS: give a positive number"
    if mountpoint -q "$DIR/mnt" 2>/dev/null; then
        die "a slow disk is up at $DIR/mnt already (scripts/slowdisk.sh down first)"
    fi
    mkdir -p "$DIR/mnt"
    truncate -s "$SIZE" "$DIR/disk.img" || die "cannot make a $SIZE image in $DIR"
    local dev
    dev=$(losetup --find --show --direct-io=on "$DIR/disk.img") || die "no free loop device"
    echo "$dev" > "$DIR/loop"
    mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$dev" || die "mkfs.ext4 $dev failed"
    mount "$dev" "$DIR/mnt" || die "mount $dev failed"
    local majmin
    majmin=$(lsblk -dno MAJ:MIN "$dev" | tr -d ' ')
    mkdir -p "$CG"
    local bps=$((MBPS * 1000 * 1000))
    echo "$majmin $IOPS" > "$CG/blkio.throttle.read_iops_device"
    echo "$majmin $IOPS" > "$CG/blkio.throttle.write_iops_device"
    echo "$majmin $bps" > "$CG/blkio.throttle.read_bps_device"
    echo "$majmin $bps" > "$CG/blkio.throttle.write_bps_device"
    echo "slowdisk: $dev ($majmin) mounted at $DIR/mnt, throttled to $IOPS IOPS and $MBPS MB/s each way for processes in $CG" >&2
    echo "$DIR/mnt"
}

run() {
    [ $# -ge 1 ] || die "run: give a command"
    [ -d "$CG" ] || die "no slow disk is up (scripts/slowdisk.sh up first)"
    echo $$ > "$CG/cgroup.procs"
    exec "$@"
}

status() {
    local dev
    dev=$(loopdev) || { echo "slowdisk: not up"; return 0; }
    echo "device: $dev, mounted at $DIR/mnt"
    df -h "$DIR/mnt" | tail -1
    for f in read_iops_device write_iops_device read_bps_device write_bps_device; do
        echo "$f: $(cat "$CG/blkio.throttle.$f" 2>/dev/null)"
    done
    echo "processes in the cgroup: $(wc -l < "$CG/cgroup.procs" 2>/dev/null || echo 0)"
}

down() {
    if [ -d "$CG" ]; then
        while read -r pid; do
            echo "$pid" > /sys/fs/cgroup/blkio/cgroup.procs 2>/dev/null || true
        done < "$CG/cgroup.procs"
        rmdir "$CG" || echo "slowdisk: could not remove $CG" >&2
    fi
    if mountpoint -q "$DIR/mnt" 2>/dev/null; then
        umount "$DIR/mnt" || die "cannot unmount $DIR/mnt: is something still using it?"
    fi
    local dev
    if dev=$(loopdev); then
        losetup -d "$dev" 2>/dev/null || true
        rm -f "$DIR/loop"
    fi
    rm -f "$DIR/disk.img"
    rmdir "$DIR/mnt" "$DIR" 2>/dev/null || true
}

case $cmd in
up) up ;;
run) run "$@" ;;
status) status ;;
down) down ;;
*) die "unknown command $cmd (give up, run, status or down)" ;;
esac
