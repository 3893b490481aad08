#!/usr/bin/env bash
# Runs every streamfs test: formatting and vet checks, unit tests with the
# race detector, short fuzzing of the on-disk decoders, the FUSE integration
# tests (real mounts: needs root and /dev/fuse) and, when QEMU can run, the
# emulated-FDP NVMe end-to-end test.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== gofmt / go vet"
unformatted=$(gofmt -l . | grep -v '^scripts/' || true)
if [ -n "$unformatted" ]; then
	echo "gofmt needed on:"; echo "$unformatted"; exit 1
fi
go vet ./...

echo "== unit tests (-race)"
go test -race -count=1 -timeout 20m $(go list ./... | grep -v /fs/integration)

echo "== fuzz (short)"
FUZZTIME=${FUZZTIME:-5s} bash scripts/fuzz.sh

echo "== integration tests (real FUSE mounts)"
# A private log file: concurrent runs must not share one.
log=$(mktemp /tmp/streamfs-integration.XXXXXX.log)
echo "(full log: $log)"
go test -count=1 -timeout 30m -v ./fs/integration/ 2>&1 | tee "$log" | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)' || true
grep -qE '^ok ' "$log" || { tail -100 "$log"; exit 1; }
rm -f "$log"

if [ -x scripts/fdp/run.sh ] && [ "${STREAMFS_SKIP_FDP:-0}" != 1 ]; then
	echo "== NVMe FDP end-to-end (QEMU)"
	echo "(may add the Debian bookworm-backports apt source for QEMU 10, and keeps ~300 MB of"
	echo " downloads and guest images in \${STREAMFS_FDP_WORK:-/var/tmp/streamfs-fdp}; STREAMFS_SKIP_FDP=1 skips this stage)"
	STREAMFS_FDP_FS=1 bash scripts/fdp/run.sh
fi
