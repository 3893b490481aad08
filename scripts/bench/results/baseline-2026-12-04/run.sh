#!/usr/bin/env bash
# Baseline of issue 19's open targets on main (eca233d), one run, quiet machine
# (load < 1 at start): W1 classic and io_uring against XFS (uring.sh, 2 rounds,
# order rotated), then the names phase (create, find + ls -lR, rm -rf) of
# everyday.sh on streamfs and XFS.
#   go build -o /tmp/streamfs-base . && sudo scripts/bench/results/baseline-2026-12-04/run.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../../.." && pwd)
export STREAMFS_BIN=${STREAMFS_BIN:-/tmp/streamfs-base}
uptime
WORKLOADS=w1 REPS=2 RUNTIME=10 BENCH_OUT=/tmp/streamfs-bench-base-uring "$root/scripts/bench/uring.sh"
uptime
PHASES=names FSES="streamfs xfs" NO_APT=1 WARM=0 BENCH_OUT=/tmp/streamfs-bench-base-names \
	"$root/scripts/bench/everyday.sh" --csv "$here/names.csv" --md "$here/names.md" --png /dev/null
uptime
# Then, separately (output-qd32.txt): the queue-depth-32 variant.
#   WORKLOADS=qd32 REPS=2 RUNTIME=10 STREAMFS_BIN=/tmp/streamfs-base scripts/bench/uring.sh
