#!/usr/bin/env bash
# install-deps.sh - install what building, mounting and testing TandemFS
# needs on a Debian machine that has only Go: each command below, from the
# Debian package that provides it. Go itself is checked, not installed
# (on PATH or in /usr/local/go). As root the packages are installed with
# apt-get, which waits for another apt-get holding the package manager's
# lock instead of failing; otherwise the script names what is missing.
set -euo pipefail
export PATH=$PATH:/usr/local/go/bin
command -v go >/dev/null || { echo "install-deps: Go is not installed (need Go >= 1.26 on PATH or in /usr/local/go)" >&2; exit 1; }

# command:package. gcc: the race detector needs cgo; fusermount3: mounts
# by users other than root; getfattr, setfacl: the POSIX tests; ip: the
# network-namespace tests; flock, taskset, setpriv: lock, CPU and quota
# tests; nfs-cp: libnfs, the NFS client of the NFS gateway's tests (this
# kernel has no NFS client); python3: the benchmark scripts and their
# tests; git: the tests' build of tandem.
wanted=(
    gcc:gcc make:make git:git python3:python3
    fusermount3:fuse3 ip:iproute2 getfattr:attr setfacl:acl
    flock:util-linux taskset:util-linux setpriv:util-linux umount:mount
    nfs-cp:libnfs-utils
)
need=()
# Go fetches modules over HTTPS: a minimal image has no CA certificates.
[ -e /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)
for w in "${wanted[@]}"; do
    cmd=${w%%:*} pkg=${w#*:}
    if ! command -v "$cmd" >/dev/null && [[ " ${need[*]-} " != *" $pkg "* ]]; then
        need+=("$pkg")
    fi
done

apt() {
    # Lock::Timeout: wait up to 10 minutes for another apt-get or dpkg.
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 -y -q "$@"
}

if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "install-deps: installing ${need[*]} (waiting for the package manager's lock if another apt-get holds it)"
        if ! apt install "${need[@]}" >/tmp/install-deps.log 2>&1; then
            # A bare machine may never have read the package lists.
            apt update >>/tmp/install-deps.log 2>&1 || true
            apt install "${need[@]}" >>/tmp/install-deps.log 2>&1 || {
                echo "install-deps: apt-get install ${need[*]} failed; its output is in /tmp/install-deps.log:" >&2
                tail -20 /tmp/install-deps.log >&2
                exit 1
            }
        fi
    else
        echo "install-deps: missing ${need[*]}; install them (as root: apt-get install ${need[*]})" >&2
    fi
fi
[ -e /dev/fuse ] || echo "install-deps: warning: /dev/fuse is missing; FUSE mounts and their tests will not work" >&2
# The Go modules, fetched once: each module fetched is named as it comes.
if ! go mod download -x 2>&1 | awk '/^# get .*\.zip: 200/ { m = $3; sub(/^https?:\/\/[^\/]*\//, "", m); sub(/\.zip:$/, "", m); sub(/\/@v\//, " ", m)
        print "install-deps: fetched Go module " m; fflush() }
    /^go: / { print; fflush() }'; then
    echo "install-deps: go mod download failed (above: why)" >&2
    exit 1
fi
