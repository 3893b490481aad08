#!/usr/bin/env bash
# FUSE requests per file: what the kernel asks the daemon for each file of
# touch, stat, ls -l, find + ls -lR and rm, read off the daemon's own
# counters (streamfs stats --json, fuse_ops) before and after each step.
# "warm": right after the files were made, with the kernel's caches full;
# "existing": touch of the existing files, then stat; "cold": after a
# remount, when the kernel knows nothing.
#
# Usage: sudo [STREAMFS_BIN=...] scripts/bench/roundtrips.sh [N] [-o OPTS]
#   N      files (default 10000), in one directory
#   OPTS   extra mount options (acl, ...)
# Output: one line per step, requests per file by kind (kinds under 0.005
# per file left out), and the step's wall time.
# Needs: root, /dev/fuse, jq, go (unless STREAMFS_BIN is given).
set -euo pipefail
N=10000
OPTS=
while [ $# -gt 0 ]; do
	case $1 in
	-o) OPTS=${2:?-o needs options}; shift ;;
	-h | --help) sed -n '2,/^set/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) N=$1 ;;
	esac
	shift
done
command -v jq >/dev/null || { echo "needs jq" >&2; exit 1; }
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
W=$(mktemp -d /dev/shm/streamfs-roundtrips.XXXXXX)
MNT=$W/mnt
PID=
cleanup() {
	if mountpoint -q "$MNT" 2>/dev/null; then umount "$MNT" || umount -l "$MNT"; fi
	[ -z "$PID" ] || wait "$PID" 2>/dev/null || true
	rm -rf "$W"
}
trap cleanup EXIT
if [ -z "${STREAMFS_BIN:-}" ]; then
	STREAMFS_BIN=$W/streamfs
	(cd "$ROOT" && go build -o "$STREAMFS_BIN" .)
fi
mount_fs() {
	mkdir -p "$MNT"
	"$STREAMFS_BIN" mount ${OPTS:+-o "$OPTS"} "$W/img" "$MNT" 2>>"$W/log" &
	PID=$!
	for _ in $(seq 200); do mountpoint -q "$MNT" && return 0; sleep 0.1; done
	cat "$W/log" >&2
	exit 1
}
umount_fs() { umount "$MNT"; wait "$PID" || true; PID=; }
ops() { "$STREAMFS_BIN" stats --json "$MNT" | jq -c '.fuse_ops'; }
# step NAME COMMAND...: run COMMAND, print its requests per file.
step() {
	local name=$1 before after t0 t1
	shift
	before=$(ops)
	t0=$(date +%s.%N)
	"$@" >/dev/null
	t1=$(date +%s.%N)
	after=$(ops)
	jq -rn --argjson a "$after" --argjson b "$before" --arg name "$name" --argjson n "$N" \
		--arg secs "$(echo "$t1 - $t0" | bc)" '
		[$a | to_entries[] | {k: .key, v: ((.value - ($b[.key] // 0)) / $n)} | select(.v >= 0.005)]
		| sort_by(-.v) | map("\(.k) \(.v * 100 | round / 100)") | join(", ")
		| "\($name | . + " " * (22 - length))\(if . == "" then "none" else . end)   (\($secs | tonumber * 1000 | round) ms)"'
}
"$STREAMFS_BIN" mkfs --size 4G -f "$W/img" >/dev/null
mount_fs
mkdir "$MNT/d"
cd "$MNT/d"
seq -f 'f%06.0f' 1 "$N" >"$W/names"
step "touch (create)" xargs -a "$W/names" touch
step "ls -l, warm" ls -l
step "stat, warm" xargs -a "$W/names" stat
step "touch+stat, existing" sh -c "xargs -a '$W/names' touch && xargs -a '$W/names' stat"
cd /
umount_fs
mount_fs
cd "$MNT/d"
step "stat, cold" xargs -a "$W/names" stat
cd /
umount_fs
mount_fs
step "ls -l, cold" ls -l "$MNT/d"
umount_fs
mount_fs
step "find + ls -lR, cold" sh -c "find '$MNT' && ls -lR '$MNT'"
step "find + ls -lR, warm" sh -c "find '$MNT' && ls -lR '$MNT'"
cd "$MNT/d"
step "rm" xargs -a "$W/names" rm
cd /
umount_fs
