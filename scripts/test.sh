#!/usr/bin/env bash
# test.sh - the whole test run (what CI runs): gofmt, go vet, and every
# test with the race detector. Integration tests start real clusters
# (separate processes on loopback TCP) and mount them with FUSE; without
# root, FUSE or network namespaces they are skipped, and with CI=true they
# fail instead (internal/testenv).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
    echo "not gofmt-formatted:"; echo "$unformatted"; exit 1
fi
go vet ./...
# The benchmark chart's specification (scripts/bench_chart_test.py).
python3 -m unittest discover -s scripts -p '*_test.py'
# The packages under tests/ build the tandem binary themselves and run it:
# Go's test cache cannot see that binary's sources, so a cached "ok" there
# could hide a change elsewhere. They always run (-count=1).
go test -race -timeout 25m "$@" $(go list ./... | grep -v '/tests')
# go-fuse is vendored (third_party/go-fuse) for its io_uring transport:
# its patch must say what the tree holds, and the fuse package's tests run,
# the transport's own and upstream's for the files the fork changed
# (server.go, request.go: a real mount's request handling).
scripts/go-fuse-patch.sh --check
# go-xdr is vendored (third_party/go-xdr) so that NFS names may be any
# bytes: its patch must say what the tree holds.
scripts/go-xdr-patch.sh --check
go test -race -count=1 github.com/hanwen/go-fuse/v2/fuse
go test -race -count=1 -timeout 25m "$@" ./tests/...
