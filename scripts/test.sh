#!/usr/bin/env bash
# test.sh - the whole test run (what CI runs): gofmt, go vet, and every
# test with the race detector. Integration tests start real clusters
# (separate processes on loopback TCP) and mount them with FUSE; they are
# skipped when not running as root.
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
# that transport's own unit tests run here; the rest are upstream's.
go test -race -run 'Ring' github.com/hanwen/go-fuse/v2/fuse
go test -race -count=1 -timeout 25m "$@" ./tests/...
