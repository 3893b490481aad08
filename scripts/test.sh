#!/usr/bin/env bash
# Runs every streamfs test: formatting and vet checks, unit tests with the
# race detector, short fuzzing of the on-disk decoders, the FUSE integration
# tests (real mounts: needs root and /dev/fuse) and, when QEMU can run, the
# emulated-FDP NVMe end-to-end test.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -x scripts/fdp/run.sh ] && [ "${STREAMFS_SKIP_FDP:-0}" != 1 ]; then
	echo "note: the last stage (emulated FDP) may add the bookworm-backports apt source, install"
	echo "      QEMU and keep ~300 MB in \${STREAMFS_FDP_WORK:-/var/tmp/streamfs-fdp}; STREAMFS_SKIP_FDP=1 skips it"
fi

echo "== gofmt / go vet"
unformatted=$(gofmt -l . | grep -v '^scripts/' || true)
if [ -n "$unformatted" ]; then
	echo "gofmt needed on:"; echo "$unformatted"; exit 1
fi
go vet ./...

# heartbeat prints a line every minute while a long stage runs, so a
# silent test never looks like a hung run; stop it with stop_heartbeat.
heartbeat_pid=
heartbeat() {
	local what=$1 start=$SECONDS
	( while sleep 60 >/dev/null 2>&1 </dev/null; do echo "   ... $what: $(((SECONDS - start) / 60)) min"; done ) &
	heartbeat_pid=$!
}
stop_heartbeat() {
	if [ -n "$heartbeat_pid" ]; then
		kill "$heartbeat_pid" 2>/dev/null || true
		wait "$heartbeat_pid" 2>/dev/null || true
		heartbeat_pid=
	fi
}
trap stop_heartbeat EXIT

# One package at a time, each test's result as it finishes; -short scales
# the randomized and large tests down (scripts/soak.sh runs them at full
# size). A failing package's output is printed, less its passing tests.
echo "== unit tests (-race -short), one package at a time"
unit_log=$(mktemp /tmp/streamfs-unit.XXXXXX.log)
for pkg in $(go list ./... | grep -v /fs/integration); do
	start=$SECONDS
	echo "-- $pkg"
	heartbeat "$pkg"
	status=0
	: >"$unit_log" # emptied before tail starts reading it
	go test -race -short -count=1 -timeout 20m -v "$pkg" >>"$unit_log" 2>&1 &
	test_pid=$!
	# Top-level results as they come (subtests and logs stay in the log).
	tail -n +1 -f --pid=$test_pid "$unit_log" | grep --line-buffered -E '^(--- (PASS|FAIL|SKIP)|panic:)' || true
	wait $test_pid || status=$?
	stop_heartbeat
	if [ $status -ne 0 ]; then
		grep -vE '^[[:space:]]*(=== (RUN|PAUSE|CONT|NAME)|--- PASS)' "$unit_log" | tail -300
		echo "FAIL $pkg ($((SECONDS - start)) s)"
		rm -f "$unit_log"
		exit 1
	fi
	echo "ok   $pkg ($((SECONDS - start)) s)"
done
rm -f "$unit_log"

echo "== fuzz (short)"
FUZZTIME=${FUZZTIME:-5s} bash scripts/fuzz.sh

# integration [ENV=VALUE...]: the integration suite, in the environment given.
integration() {
	# A private log file: concurrent runs must not share one.
	local log
	log=$(mktemp /tmp/streamfs-integration.XXXXXX.log)
	echo "(full log: $log)"
	heartbeat "integration tests"
	env "$@" go test -count=1 -timeout 30m -v ./fs/integration/ 2>&1 | tee "$log" | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic|SKIP)' || true
	stop_heartbeat
	grep -qE '^ok ' "$log" || { tail -100 "$log"; exit 1; }
	rm -f "$log"
}

echo "== integration tests (real FUSE mounts), classic FUSE transport"
integration STREAMFS_TEST_URING=off

# The same suite with every mount over io_uring, where the kernel has it.
# The kernel offers it only with enable_uring=Y: set for this run, restored after.
uring_param=/sys/module/fuse/parameters/enable_uring
if [ "${STREAMFS_URING_SUITE:-1}" = 0 ]; then
	echo "== integration tests over io_uring: skipped (STREAMFS_URING_SUITE=0)"
elif [ ! -w "$uring_param" ]; then
	echo "== integration tests over io_uring: skipped, this kernel has no FUSE over io_uring ($uring_param missing: CONFIG_FUSE_IO_URING, Linux 6.14+)"
else
	echo "== integration tests (real FUSE mounts), FUSE over io_uring"
	uring_orig=$(cat "$uring_param")
	trap 'echo "$uring_orig" >"$uring_param"; stop_heartbeat' EXIT
	echo Y >"$uring_param"
	integration STREAMFS_TEST_URING=on
	echo "$uring_orig" >"$uring_param"
	trap stop_heartbeat EXIT
fi

if [ -x scripts/fdp/run.sh ] && [ "${STREAMFS_SKIP_FDP:-0}" != 1 ]; then
	echo "== NVMe FDP end-to-end (QEMU)"
	echo "(may add the Debian bookworm-backports apt source for QEMU 10, and keeps ~300 MB of"
	echo " downloads and guest images in \${STREAMFS_FDP_WORK:-/var/tmp/streamfs-fdp}; STREAMFS_SKIP_FDP=1 skips this stage)"
	STREAMFS_FDP_FS=1 bash scripts/fdp/run.sh
fi
