#!/usr/bin/env bash
# Foundation benchmark: 4k O_DIRECT sequential writes, NJOBS jobs on NJOBS files,
# with (a) ioengine=psync and (b) libaio at iodepth 32, on
#   - streamfs over an image file on tmpfs,
#   - kernel XFS (mkfs.xfs -d agcount=16) on a loop device over an image on the same tmpfs,
#   - go-fuse's loopback over that XFS with kernel FUSE passthrough off (./_loopback,
#     so every write goes through the daemon: the like-for-like FUSE reference),
#   - optionally (LOOPBACK_PT=1, the default) go-fuse's stock example/loopback too:
#     as root on a kernel with FUSE passthrough it registers backing files, so its
#     file data bypasses the daemon (only open/xattr/metadata requests reach it).
# Every run starts from a freshly made file system. Prints IOPS and the ratios
# streamfs/XFS and streamfs/loopback, and checks whether the daemon receives a
# GETXATTR (security.capability) per write.
#
# Usage: sudo scripts/bench/foundation.sh
# Environment (besides lib.sh's BENCH_DIR, BENCH_OUT, STREAMFS_BIN, LOOPBACK_BIN):
#   RUNTIME=15      seconds per fio run (time based)
#   NJOBS=16        jobs (= files)
#   SIZE=256m       file size per job (sequential writes wrap around at the end)
#   FALLOCATE=none  fio --fallocate mode
#   REPEAT=1        runs per cell; the table shows the median
#   IMG_SIZE=8G     size of each (sparse) image
#   SFS_AGS=16      streamfs allocation groups (XFS uses 16)
#   SFS_OPTS=       extra streamfs -o options (default: the mount defaults)
#   ENGINES="psync libaio"
#   DD_COUNT=2000   4k writes in the GETXATTR check
#   LOOPBACK_PT=1   also run the stock example/loopback (passthrough)
source "$(dirname "$0")/lib.sh"

SIZE=${SIZE:-256m}
FALLOCATE=${FALLOCATE:-none}
REPEAT=${REPEAT:-1}
IMG_SIZE=${IMG_SIZE:-8G}
SFS_AGS=${SFS_AGS:-16}
SFS_OPTS=${SFS_OPTS:-}
ENGINES=${ENGINES:-psync libaio}
DD_COUNT=${DD_COUNT:-2000}
LOOPBACK_PT=${LOOPBACK_PT:-1}
TARGETS="streamfs xfs loopback"
[ "$LOOPBACK_PT" = 1 ] && TARGETS="$TARGETS loopbackpt"

bench_init foundation
W=$BENCH_DIR

engine_args() {
	case $1 in
	psync) echo "--ioengine=psync --iodepth=1" ;;
	libaio) echo "--ioengine=libaio --iodepth=32 --iodepth_batch_submit=1 --iodepth_batch_complete_min=1" ;;
	*) die "unknown engine $1" ;;
	esac
}

fio_job() { # NAME DIR ENGINE
	# shellcheck disable=SC2046
	run_fio "$1" --name=seqwrite --directory="$2" --rw=write --bs=4k --direct=1 \
		--numjobs="$NJOBS" --size="$SIZE" --time_based --runtime="$RUNTIME" \
		--fallocate="$FALLOCATE" --group_reporting $(engine_args "$3")
}

run_streamfs() { # ENGINE REP
	local name=streamfs-$1-$2
	mkfs_streamfs "$W/sfs.img" "$IMG_SIZE" "$SFS_AGS"
	mount_streamfs "$W/sfs.img" "$W/sfs" "$SFS_OPTS" "$BENCH_OUT/$name.daemon.log"
	local pid=${DAEMON_PID[$W/sfs]} t0
	t0=$(cpu_ticks "$pid")
	fio_job "$name" "$W/sfs" "$1"
	CPU_US=$(cpu_us_per_write "$name" $(($(cpu_ticks "$pid") - t0)))
	"$STREAMFS_BIN" stats --json "$W/sfs" >"$BENCH_OUT/$name.stats.json" || true
	unmount "$W/sfs"
	rm -f "$W/sfs.img"
}

run_xfs() { # ENGINE REP
	local name=xfs-$1-$2
	mount_xfs "$W/xfs.img" "$IMG_SIZE" "$W/xfs" 16
	mkdir -p "$W/xfs/data"
	fio_job "$name" "$W/xfs/data" "$1"
	CPU_US=-
	umount_xfs "$W/xfs" "$W/xfs.img"
}

run_loopback() { # ENGINE REP [BIN [flags]]
	local name=loopback-$1-$2 bin=${3:-$LOOPBACK_BIN}
	[ "$bin" = "$LOOPBACK_BIN" ] || name=loopbackpt-$1-$2
	mount_xfs "$W/xfs.img" "$IMG_SIZE" "$W/xfs" 16
	mount_loopback "$bin" "$W/xfs/lb" "$W/lb" "$BENCH_OUT/$name.daemon.log" "${@:4}"
	local pid=${DAEMON_PID[$W/lb]} t0
	t0=$(cpu_ticks "$pid")
	fio_job "$name" "$W/lb" "$1"
	CPU_US=$(cpu_us_per_write "$name" $(($(cpu_ticks "$pid") - t0)))
	unmount "$W/lb"
	umount_xfs "$W/xfs" "$W/xfs.img"
}

run_loopbackpt() { run_loopback "$1" "$2" "$STOCK_LOOPBACK_BIN" -q; }

declare -A R=()  # "target engine" -> space-separated IOPS of each repetition
declare -A CPU=() # "target engine" -> daemon CPU us/write of each repetition
for rep in $(seq 1 "$REPEAT"); do
	for eng in $ENGINES; do
		# interleave targets so machine noise hits them alike
		for t in $TARGETS; do
			"run_$t" "$eng" "$rep"
			v=$FIO_IOPS
			log "$t $eng rep $rep: $v IOPS, daemon CPU $CPU_US us/write"
			R["$t $eng"]="${R["$t $eng"]:-} $v"
			CPU["$t $eng"]="${CPU["$t $eng"]:-} $CPU_US"
		done
	done
done

# GETXATTR check: short O_DIRECT dd with the daemon's debug log on.
count_ops() { # LOG -> "writes getxattrs"
	local w g
	w=$(grep -cE 'rx [0-9]+: WRITE ' "$1" || true)
	g=$(grep -cE 'rx [0-9]+: GETXATTR ' "$1" || true)
	echo "$w $g"
}
log "GETXATTR check: dd $DD_COUNT x 4k oflag=direct under -o debug"
mkfs_streamfs "$W/sfs.img" 1G 4
mount_streamfs "$W/sfs.img" "$W/sfs" "debug${SFS_OPTS:+,$SFS_OPTS}" "$BENCH_OUT/xattr-streamfs.debug.log"
dd if=/dev/zero of="$W/sfs/ddfile" bs=4k count="$DD_COUNT" oflag=direct status=none
sleep 0.5
read -r sfs_w sfs_g < <(count_ops "$BENCH_OUT/xattr-streamfs.debug.log")
sfs_init=$(grep -m1 -E 'tx [0-9]+: +OK, \{7\.' "$BENCH_OUT/xattr-streamfs.debug.log" || true)
unmount "$W/sfs"
rm -f "$W/sfs.img"

mount_xfs "$W/xfs.img" 1G "$W/xfs" 4
mount_loopback "$LOOPBACK_BIN" "$W/xfs/lb" "$W/lb" "$BENCH_OUT/xattr-loopback.debug.log" -debug
dd if=/dev/zero of="$W/lb/ddfile" bs=4k count="$DD_COUNT" oflag=direct status=none
sleep 0.5
read -r lb_w lb_g < <(count_ops "$BENCH_OUT/xattr-loopback.debug.log")
unmount "$W/lb"
if [ "$LOOPBACK_PT" = 1 ]; then
	mount_loopback "$STOCK_LOOPBACK_BIN" "$W/xfs/lbpt" "$W/lb" "$BENCH_OUT/xattr-loopbackpt.debug.log" -debug
	dd if=/dev/zero of="$W/lb/ddfile" bs=4k count="$DD_COUNT" oflag=direct status=none
	sleep 0.5
	read -r lbpt_w lbpt_g < <(count_ops "$BENCH_OUT/xattr-loopbackpt.debug.log")
	lbpt_backing=$(grep -c 'BACKING_OPEN.*errno 0' "$BENCH_OUT/xattr-loopbackpt.debug.log" || true)
	unmount "$W/lb"
fi
umount_xfs "$W/xfs" "$W/xfs.img"

# ---- results
{
	echo
	echo "== foundation: 4k O_DIRECT sequential write, $NJOBS jobs x 1 file, size $SIZE/job, ${RUNTIME}s, fallocate=$FALLOCATE"
	echo "   streamfs: ${SFS_AGS} AGs, -o ${SFS_OPTS:-<defaults>}; XFS: agcount=16 on a loop device; images on $(stat -f -c %T "$W")"
	echo "   kernel $(uname -r), $(nproc) CPUs, $(fio --version); REPEAT=$REPEAT (median shown)"
	echo "   loopback = go-fuse loopback, passthrough off; loopback-pt = stock example/loopback (kernel passthrough)"
	printf '%-8s %10s %10s %10s %12s %14s %18s %17s\n' engine streamfs xfs loopback loopback-pt \
		streamfs/xfs streamfs/loopback streamfs/loop-pt
	for eng in $ENGINES; do
		# shellcheck disable=SC2086
		s=$(median ${R["streamfs $eng"]}); x=$(median ${R["xfs $eng"]}); l=$(median ${R["loopback $eng"]})
		p=-; [ "$LOOPBACK_PT" = 1 ] && p=$(median ${R["loopbackpt $eng"]})
		printf '%-8s %10s %10s %10s %12s %14s %18s %17s\n' "$eng" "$s" "$x" "$l" "$p" \
			"$(ratio "$s" "$x")" "$(ratio "$s" "$l")" "$(ratio "$s" "$p")"
	done
	echo "-- per run: IOPS / daemon CPU us per write (user+sys of the FUSE daemon during fio)"
	for eng in $ENGINES; do
		for t in $TARGETS; do
			printf '   %-10s %-6s IOPS: %-24s CPU us/write: %s\n' "$t" "$eng" "${R["$t $eng"]# }" "${CPU["$t $eng"]# }"
		done
	done
	echo
	echo "== GETXATTR per write (dd $DD_COUNT x 4k oflag=direct, daemon debug log)"
	printf '%-10s %8s %10s %s\n' daemon WRITEs GETXATTRs verdict
	v=ok; [ "$sfs_g" -gt 0 ] && v="FAIL: daemon sees GETXATTR"
	printf '%-10s %8s %10s %s\n' streamfs "$sfs_w" "$sfs_g" "$v"
	printf '%-10s %8s %10s %s\n' loopback "$lb_w" "$lb_g" "(reference: go-fuse default, no HANDLE_KILLPRIV_V2)"
	if [ "$LOOPBACK_PT" = 1 ]; then
		printf '%-10s %8s %10s %s\n' loopback-pt "$lbpt_w" "$lbpt_g" "(passthrough: $lbpt_backing backing file(s) registered; writes bypass the daemon)"
	fi
	case $sfs_init in
	*HANDLE_KILLPRIV_V2*) echo "streamfs INIT reply includes HANDLE_KILLPRIV_V2" ;;
	*) echo "streamfs INIT reply does NOT show HANDLE_KILLPRIV_V2: ${sfs_init:-<not found>}" ;;
	esac
	echo "raw output: $BENCH_OUT"
} | tee "$BENCH_OUT/results.txt"
