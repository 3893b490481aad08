#!/usr/bin/env bash
# Create-then-unmount benchmark: what N creates through FUSE leave behind in
# the daemon (memory, nodes kept for the kernel's inodes, checkpoint pauses)
# and how long the unmount right after them takes, with kernel XFS beside it.
# The quick form of meta.sh's create and umount rows, without its slower
# phases, for several cache sizes.
#
# Per cache size C in CACHES, from a fresh mkfs (4 AGs, image on tmpfs):
#   create    creat+close N files in one directory (metaops.c, one process)
#   rss       the daemon's VmRSS and VmHWM right after the creates
#   nodes     stats: fuse_nodes, fuse_node_limit, fuse_nodes_pruned
#   pause     stats: checkpoint_pause_max_us
#   umount    umount until the daemon has exited (device released), and the
#             daemon's own account of it (final commit, final checkpoint)
#   fsck      streamfs fsck -n afterwards (0 = clean)
# XFS (agcount=4, loop device on the same tmpfs): create rate and umount.
#
# Usage: sudo [STREAMFS_BIN=...] scripts/bench/umount.sh
# Environment (besides lib.sh's BENCH_DIR, BENCH_OUT, STREAMFS_BIN):
#   N=1000000  CACHES="256M 64M"  IMG_SIZE=32G  XFS_REF=1
# shellcheck source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"

case ${1:-} in
-h | --help) sed -n '2,/^source/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
'') ;;
*) die "unknown argument $1 (see --help)" ;;
esac
N=${N:-1000000}
CACHES=${CACHES:-256M 64M}
IMG_SIZE=${IMG_SIZE:-32G}
XFS_REF=${XFS_REF:-1}
# No loopback daemons here: keep bench_init from building them.
LOOPBACK_BIN=${LOOPBACK_BIN:-none} STOCK_LOOPBACK_BIN=${STOCK_LOOPBACK_BIN:-none}
bench_init umount
need gcc bc
METAOPS=$BENCH_OUT/metaops
gcc -O2 -Wall -o "$METAOPS" "$BENCH_ROOT/scripts/bench/metaops.c"

now() { date +%s.%N; }
# st KEY FILE: the first KEY anywhere in a stats --json document.
st() { jq -r "[.. | objects | .$1? // empty][0]" "$2"; }
secs() { echo "$2 - $1" | bc -l | xargs printf '%.3f'; }

# create MNT: N creates in MNT/d; prints the rate.
create() {
	local t0 t1
	mkdir "$1/d"
	t0=$(now)
	"$METAOPS" create "$1/d" "$N" f >/dev/null
	t1=$(now)
	echo "$N / ($t1 - $t0)" | bc -l | xargs printf '%.0f'
}

printf '%-10s %10s %10s %10s %8s %8s %10s %12s %s\n' run creates/s RSS_MiB HWM_MiB nodes limit pause_ms umount_s daemon >"$BENCH_OUT/results.txt"
for c in $CACHES; do
	img=$BENCH_DIR/sfs.img mnt=$BENCH_DIR/mnt
	mkfs_streamfs "$img" "$IMG_SIZE" 4
	mount_streamfs "$img" "$mnt" "cache_size=$c" "$BENCH_OUT/daemon-$c.log"
	pid=${DAEMON_PID[$mnt]}
	log "cache $c: $N creates"
	rate=$(create "$mnt")
	rss=$(awk '/VmRSS/ { print int($2 / 1024) }' "/proc/$pid/status")
	hwm=$(awk '/VmHWM/ { print int($2 / 1024) }' "/proc/$pid/status")
	"$STREAMFS_BIN" stats --json "$mnt" >"$BENCH_OUT/stats-$c.json"
	js=$BENCH_OUT/stats-$c.json
	nodes=$(st fuse_nodes "$js") limit=$(st fuse_node_limit "$js") pause=$(st checkpoint_pause_max_us "$js")
	t0=$(now)
	unmount "$mnt"
	t1=$(now)
	"$STREAMFS_BIN" fsck -n "$img" >"$BENCH_OUT/fsck-$c.txt" 2>&1 && fsck=0 || fsck=$?
	acct=$(grep -o '"final_commit.*checkpoint_bytes": [0-9]*' "$BENCH_OUT/daemon-$c.log" || true)
	printf '%-10s %10s %10s %10s %8s %8s %10.1f %12s %s fsck=%s\n' "sfs-$c" "$rate" "$rss" "$hwm" "$nodes" "$limit" \
		"$(echo "$pause / 1000" | bc -l)" "$(secs "$t0" "$t1")" "$acct" "$fsck" >>"$BENCH_OUT/results.txt"
	rm -f "$img"
done
if [ "$XFS_REF" = 1 ]; then
	ximg=$BENCH_DIR/xfs.img xmnt=$BENCH_DIR/xmnt
	mount_xfs "$ximg" "$IMG_SIZE" "$xmnt" 4
	log "xfs: $N creates"
	rate=$(create "$xmnt")
	t0=$(now)
	umount_xfs "$xmnt" "$ximg"
	t1=$(now)
	printf '%-10s %10s %10s %10s %8s %8s %10s %12s\n' xfs "$rate" - - - - - "$(secs "$t0" "$t1")" >>"$BENCH_OUT/results.txt"
fi
cat "$BENCH_OUT/results.txt"
