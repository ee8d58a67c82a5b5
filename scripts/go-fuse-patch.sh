#!/usr/bin/env bash
# go-fuse-patch.sh - third_party/go-fuse/io_uring.patch is the whole
# difference between the vendored go-fuse and its release (v2.12.1, from
# the Go module proxy): every non-test file of fuse/ and splice/ that was
# added or changed. Upstream's test files copied in unchanged, and
# upstream's packages left out (fuse/nodefs, fuse/pathfs, fuse/test, fs,
# ...), are not part of it; the files a diff cannot show are listed at its
# top instead.
#
#   scripts/go-fuse-patch.sh          write the patch anew from the tree
#   scripts/go-fuse-patch.sh --check  fail if the committed patch differs
#                                     from the tree (CI runs this)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
version=v2.12.1
fork=third_party/go-fuse
patch=$fork/io_uring.patch

# The release, from the module cache (downloaded through the proxy once).
upstream=$(cd "$fork" && GOFLAGS=-mod=mod go mod download -json "github.com/hanwen/go-fuse/v2@$version" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$upstream" ] || { echo "go-fuse-patch: cannot find go-fuse $version in the module cache" >&2; exit 1; }

generate() {
    echo "# The vendored go-fuse ($fork) against go-fuse $version: made by scripts/go-fuse-patch.sh."
    for pkg in fuse splice; do
        # Files upstream has that the fork dropped (other than tests).
        for f in "$upstream/$pkg"/*.go; do
            name=$(basename "$f")
            case $name in *_test.go) continue ;; esac
            [ -e "$fork/$pkg/$name" ] || echo "# removed: $pkg/$name"
        done
    done
    for pkg in fuse splice; do
        for f in $( (cd "$fork/$pkg" && ls *.go; cd "$upstream/$pkg" && ls *.go) | grep -v '_test\.go$' | sort -u); do
            [ -e "$fork/$pkg/$f" ] || continue
            old=$upstream/$pkg/$f
            [ -e "$old" ] || old=/dev/null
            # Labels without dates, so that the patch is the same on
            # every machine.
            diff -u --label "a/$pkg/$f" --label "b/$pkg/$f" "$old" "$fork/$pkg/$f" || true
        done
    done
}

case "${1:-}" in
--check)
    if ! diff -u "$patch" <(generate) >/tmp/go-fuse-patch.diff; then
        echo "go-fuse-patch: $patch does not match $fork; run scripts/go-fuse-patch.sh and commit the result. The difference:" >&2
        head -60 /tmp/go-fuse-patch.diff >&2
        exit 1
    fi
    ;;
"")
    generate >"$patch"
    echo "go-fuse-patch: wrote $patch ($(grep -c '^+++ ' "$patch") files differ from go-fuse $version)"
    ;;
*)
    echo "usage: $0 [--check]" >&2
    exit 2
    ;;
esac
