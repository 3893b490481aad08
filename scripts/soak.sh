#!/usr/bin/env bash
# The unit tests at full size: scripts/test.sh runs them with -short, which
# scales the randomized and large ones down (fewer seeds, steps, files and
# sampled nodes) to fit a shared CI machine. This runs every one of them in
# full, with the race detector, and no time limit.
#   scripts/soak.sh [go test flags]    e.g. scripts/soak.sh -run Prealloc
set -euo pipefail
cd "$(dirname "$0")/.."
exec go test -race -count=1 -timeout 0 "$@" $(go list ./... | grep -v /fs/integration)
