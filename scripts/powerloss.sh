#!/usr/bin/env bash
# The long power-loss run: rounds of a random workload on the metadata layer,
# a power cut at a random device operation (unflushed writes lost, a random
# prefix kept, the last one possibly torn), fsck, remount and verification
# against what fsync acknowledged.
#   scripts/powerloss.sh [ROUNDS]   default 2000 (or $STREAMFS_POWERLOSS_ROUNDS)
# A failure prints the seed; STREAMFS_POWERLOSS_SEED=<seed> replays it.
set -euo pipefail
cd "$(dirname "$0")/.."
export STREAMFS_POWERLOSS_ROUNDS=${1:-${STREAMFS_POWERLOSS_ROUNDS:-2000}}
exec go test -count=1 -timeout 0 -run 'PowerLoss' -v ./fs/meta
