#!/usr/bin/env bash
# go-xdr-patch.sh - third_party/go-xdr/patch.diff is the whole difference
# between the vendored go-xdr packages and upstream's (from the Go module
# proxy), for the packages kept (third_party/go-xdr/README.tandemfs.md).
#
#   scripts/go-xdr-patch.sh          write the patch anew from the tree
#   scripts/go-xdr-patch.sh --check  fail if the committed patch differs
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
version=v0.0.0-20261005144839-a2095890273e
fork=third_party/go-xdr
patch=$fork/patch.diff
upstream=$(GOFLAGS=-mod=mod go mod download -json "github.com/buildbarn/go-xdr@$version" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$upstream" ] || { echo "go-xdr-patch: cannot find go-xdr $version in the module cache" >&2; exit 1; }

generate() {
    echo "# The vendored go-xdr ($fork) against go-xdr $version: made by scripts/go-xdr-patch.sh."
    for pkg in runtime rpcserver protocols/nfsv3 protocols/mount protocols/rpcv2; do
        for f in "$fork/pkg/$pkg"/*; do
            name=$(basename "$f")
            diff -u --label "a/pkg/$pkg/$name" --label "b/pkg/$pkg/$name" "$upstream/pkg/$pkg/$name" "$f" || true
        done
    done
}

if [ "${1-}" = --check ]; then
    if ! diff -u "$patch" <(generate) >/dev/null; then
        echo "go-xdr-patch: $fork differs from upstream in more than $patch shows; run scripts/go-xdr-patch.sh and review the change" >&2
        diff -u "$patch" <(generate) | head -40 >&2
        exit 1
    fi
    exit 0
fi
generate >"$patch"
echo "go-xdr-patch: wrote $patch"
