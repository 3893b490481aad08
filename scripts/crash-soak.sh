#!/usr/bin/env bash
# The long systematic crash run (fs/crashtest): first every B3 workload of
# one and two operations and a 1/211 sample of those of three, each checked
# at every crash state of its recorded device log; then seeded random
# workloads (ROUNDS rounds of STEPS operations, each round continuing from a
# crash state of the last) with new seeds until DURATION is up.
#   scripts/crash-soak.sh [--zoned] [DURATION]   default 2h: 90m, 2h, 3600 (seconds)
# --zoned skips B3 and runs the random workloads on an emulated zoned image
# (TestCrashRandomZoned: the device's write-pointer saves crash with the
# filesystem's writes).
# STREAMFS_CRASH_ROUNDS (20) and STREAMFS_CRASH_STEPS (60) size the random
# runs; STREAMFS_CRASH_RACE=1 adds -race; STREAMFS_CRASH_SKIP_B3=1 goes
# straight to the random runs. A failure prints the workload, the crash
# state and how to replay it (STREAMFS_CRASH_WORKLOAD=... or
# STREAMFS_CRASH_SEED=...); the logs stay in the directory printed at the
# start.
set -euo pipefail
cd "$(dirname "$0")/.."

random=TestCrashRandom
if [[ ${1:-} == --zoned ]]; then
	random=TestCrashRandomZoned
	STREAMFS_CRASH_SKIP_B3=1
	shift
fi
dur=${1:-2h}
case $dur in
*h) secs=$((${dur%h} * 3600)) ;;
*m) secs=$((${dur%m} * 60)) ;;
*s) secs=${dur%s} ;;
*) secs=$dur ;;
esac
logs=$(mktemp -d "${TMPDIR:-/tmp}/streamfs-crash.XXXXXX")
echo "crash-soak: logs in $logs"
race=()
[[ ${STREAMFS_CRASH_RACE:-0} == 1 ]] && race=(-race)
go test "${race[@]}" -c -o "$logs/crashtest.test" ./fs/crashtest
export STREAMFS_CRASH_FULL=1
export STREAMFS_CRASH_ROUNDS=${STREAMFS_CRASH_ROUNDS:-20}
export STREAMFS_CRASH_STEPS=${STREAMFS_CRASH_STEPS:-60}
end=$(($(date +%s) + secs))
failed=0

if [[ ${STREAMFS_CRASH_SKIP_B3:-0} != 1 ]]; then
	if ! "$logs/crashtest.test" -test.run '^TestCrashB3$' -test.v -test.timeout 0 >"$logs/b3.log" 2>&1; then
		failed=1
	fi
	grep -E '^\s+b3_test.go:[0-9]+: (length|B3:)' "$logs/b3.log" || true
fi

runs=0
while (($(date +%s) < end)); do
	seed=$(od -An -N7 -tu8 /dev/urandom | tr -d ' ') # 56 bits: a positive int64
	log="$logs/random-$seed.log"
	runs=$((runs + 1))
	if STREAMFS_CRASH_SEED=$seed "$logs/crashtest.test" -test.run "^$random\$" -test.v -test.timeout 0 >"$log" 2>&1; then
		grep -E 'random: [0-9]+ workloads' "$log" || true
		rm -f "$log"
	else
		failed=1
		echo "crash-soak: seed $seed FAILED (log: $log)"
		grep -E 'random: [0-9]+ workloads|---' "$log" | head -20 || true
	fi
done
echo "crash-soak: $runs random runs; $([[ $failed == 0 ]] && echo 'no failures' || echo "FAILURES, see $logs")"
exit $failed
