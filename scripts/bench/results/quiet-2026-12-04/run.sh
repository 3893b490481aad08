#!/usr/bin/env bash
# Issue 19's targets on a quiet machine (load < 1 at the start), main after
# the rm -rf and mount changes: W1 and QD32 (uring.sh: classic, io_uring and
# XFS in rotated order, 2 rounds of 10 s), the names phase of everyday.sh,
# then W1's daemon CPU per write against the pre-tree build 19fe57c
# (streams.sh, alternated, 2 rounds each).
#   go build -o /tmp/sfs-now . ; (git worktree add /tmp/pre 19fe57c && cd /tmp/pre && go build -o /tmp/sfs-pre .)
#   sudo scripts/bench/results/quiet-2026-12-04/run.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../../.." && pwd)
uptime
STREAMFS_BIN=/tmp/sfs-now WORKLOADS="w1 qd32" REPS=2 RUNTIME=10 BENCH_OUT=/tmp/q-uring "$root/scripts/bench/uring.sh" 2>&1 | tee "$here/uring.txt"
uptime
STREAMFS_BIN=/tmp/sfs-now PHASES=names FSES="streamfs xfs" NO_APT=1 WARM=0 BENCH_OUT=/tmp/q-names \
	"$root/scripts/bench/everyday.sh" --csv "$here/names.csv" --md "$here/names.md" --png /dev/null 2>&1 | tail -5
uptime
for r in 1 2; do
	for b in pre now; do
		echo "== round $r build $b" | tee -a "$here/w1-cpu.txt"
		STREAMFS_BIN=/tmp/sfs-$b RUNS="streams xfs" RUNTIME=10 BENCH_OUT=/tmp/q-w1-$b-$r \
			"$root/scripts/bench/streams.sh" 2>&1 | tail -8 | tee -a "$here/w1-cpu.txt"
	done
done
uptime
