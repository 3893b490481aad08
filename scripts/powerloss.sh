#!/usr/bin/env bash
# The long power-loss run: rounds of a random workload on the metadata layer,
# a power cut at a random device operation (unflushed writes lost, a random
# prefix kept, the last one possibly torn), fsck, remount and verification
# against what fsync acknowledged.
#   scripts/powerloss.sh [--zoned] [ROUNDS]   default 2000 (or $STREAMFS_POWERLOSS_ROUNDS)
# --zoned runs the rounds on a small emulated zoned image instead (8
# sequential zones of 6 MiB, so reclaim copies and resets zones throughout;
# the cuts also land in reclaim and in the device's write-pointer saves).
# A failure prints the seed; STREAMFS_POWERLOSS_SEED=<seed> replays it
# (on zones only roughly: the reclaimer runs beside the workload).
set -euo pipefail
cd "$(dirname "$0")/.."
run='^TestPowerLoss$'
if [[ ${1:-} == --zoned ]]; then
	run='^TestPowerLossZoned$'
	shift
fi
export STREAMFS_POWERLOSS_ROUNDS=${1:-${STREAMFS_POWERLOSS_ROUNDS:-2000}}
exec go test -count=1 -timeout 0 -run "$run" -v ./fs/meta
