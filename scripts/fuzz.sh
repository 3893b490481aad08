#!/usr/bin/env bash
# Runs every fuzz target (func FuzzXxx in a _test.go file) for a while.
#   scripts/fuzz.sh [DURATION]      default 30s per target (or $FUZZTIME)
# Go fuzzes one target per invocation; crashers are saved under the
# package's testdata/fuzz/ and rerun by plain `go test` from then on.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME=${1:-${FUZZTIME:-30s}}
status=0
for dir in $(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u); do
	for target in $(grep -h --include='*_test.go' -ro '^func Fuzz[A-Za-z0-9_]*' "$dir" | sed 's/^func //' | sort -u); do
		echo "== $target ($dir, $FUZZTIME)"
		if ! go test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" "$dir"; then
			status=1
		fi
	done
done
exit $status
