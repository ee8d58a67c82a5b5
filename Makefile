# TandemFS build and test entry points. See README.md.
# Go from PATH, or where the official tarball puts it.
GO      ?= $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
export PATH := $(PATH):$(dir $(GO))
BIN     := bin/tandem
DATA    ?= ./tandem-data
MNT     ?= ./mnt

.PHONY: all build up down status test test-short test-ha deps clean

all: build

# -v names each package as it is compiled: the first build compiles every
# dependency (a minute or two on 2 cores), later ones only what changed.
build:
	@echo "building $(BIN) (the first build compiles every dependency: a minute or two)"
	$(GO) build -v -o $(BIN) ./cmd/tandem

# Build and start a one-machine cluster mounted at ./mnt.
up: deps build
	$(BIN) up --data $(DATA) --mount $(MNT)

down:
	$(BIN) down --data $(DATA)

status:
	$(BIN) status --data $(DATA)

# Everything CI runs: formatting, vet, unit tests, integration tests on
# real FUSE mounts of real multi-process clusters, all with the race detector.
test: deps
	scripts/test.sh

# The high-availability failure matrix (docs/ha.md, tests/hamatrix): every
# scenario on real clusters in network namespaces, as root, ~4 minutes.
# HA_MATRIX_REPORT=FILE writes the results as a markdown table.
test-ha: deps
	HA_MATRIX=full HA_MATRIX_REPORT=$(if $(HA_MATRIX_REPORT),$(abspath $(HA_MATRIX_REPORT))) \
		$(GO) test -v -count=1 -timeout 30m ./tests/hamatrix/

deps:
	scripts/install-deps.sh

clean:
	rm -rf bin
