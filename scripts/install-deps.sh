#!/usr/bin/env bash
# install-deps.sh - install what building, mounting and testing TandemFS
# needs on a Debian machine: Go (checked, not installed), fuse3 (fusermount3
# for non-root mounts; root mounts with mount(2) directly), attr (getfattr/
# setfattr used by the tests), iproute2 (network-namespace tests) and
# python3 (the benchmark scripts and their tests).
set -euo pipefail
export PATH=/usr/local/go/bin:$PATH
command -v go >/dev/null || { echo "install-deps: Go is not installed (need Go >= 1.26 in PATH or /usr/local/go)" >&2; exit 1; }
need=()
command -v fusermount3 >/dev/null || need+=(fuse3)
command -v getfattr >/dev/null || need+=(attr)
command -v ip >/dev/null || need+=(iproute2)
command -v python3 >/dev/null || need+=(python3)
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "install-deps: installing ${need[*]}"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null 2>&1 || {
            apt-get update -q >/dev/null 2>&1
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null
        }
    else
        echo "install-deps: missing ${need[*]}; install them (as root: apt-get install ${need[*]})" >&2
    fi
fi
[ -e /dev/fuse ] || echo "install-deps: warning: /dev/fuse is missing; FUSE mounts and their tests will not work" >&2
go mod download
