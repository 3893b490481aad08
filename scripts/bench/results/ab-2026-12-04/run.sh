#!/usr/bin/env bash
# A/B of main (A) against this branch (B), alternated: the names phase of
# everyday.sh (create, find + ls -lR, rm -rf of 40k files; streamfs and
# XFS) ROUNDS times each, then uring.sh's W1 (classic, io_uring, XFS; 2
# rotated rounds) once each. Every run has its own XFS figure, so each
# ratio is within one run.
#   git worktree add /tmp/a main && (cd /tmp/a && go build -o /tmp/streamfs-a .)
#   go build -o /tmp/streamfs-b . && sudo scripts/bench/results/ab-2026-12-04/run.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../../.." && pwd)
A=${A:-/tmp/streamfs-a} B=${B:-/tmp/streamfs-b} ROUNDS=${ROUNDS:-3}
for r in $(seq "$ROUNDS"); do
	for v in A B; do
		bin=${!v}
		echo "== names $v round $r ($(cut -d' ' -f1-3 /proc/loadavg))"
		STREAMFS_BIN=$bin PHASES=names FSES="streamfs xfs" NO_APT=1 WARM=0 BENCH_OUT=/tmp/streamfs-bench-ab-$v \
			"$root/scripts/bench/everyday.sh" --csv "$here/names-$v-$r.csv" --md /dev/null --png /dev/null >/dev/null 2>&1
		grep -E '^(create|findls|rm),' "$here/names-$v-$r.csv" | cut -d, -f1,4,5,7
	done
done
if [ "${W1:-1}" = 1 ]; then
	for v in A B; do
		echo "== W1 $v ($(cut -d' ' -f1-3 /proc/loadavg))"
		STREAMFS_BIN=${!v} WORKLOADS=${WORKLOADS:-w1} REPS=2 RUNTIME=10 BENCH_OUT=/tmp/streamfs-bench-ab-w1-$v \
			"$root/scripts/bench/uring.sh" 2>&1 | sed -n '/^== FUSE/,$p'
	done
fi
