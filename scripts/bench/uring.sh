#!/usr/bin/env bash
# FUSE transports against kernel XFS: the write-streams job of streams.sh
# (W1: 16 jobs of 4k O_DIRECT sequential writes, psync, one stream
# directory per job, 64-AG image on tmpfs) and its queue-depth-32 variant
# (ioengine=libaio, iodepth=32, as the seed's fio job), each over
#   classic   streamfs -o uring=off   (read/writev on /dev/fuse)
#   uring     streamfs -o uring=on    (FUSE over io_uring)
#   xfs       kernel XFS, agcount=16 on a loop device on the same tmpfs
# in REPS rounds whose order rotates, so a change of machine load falls on
# every variant. Prints KIOPS per run, medians, and the ratios to XFS.
# Sets /sys/module/fuse/parameters/enable_uring=Y for the run and restores it.
#
# Usage: sudo scripts/bench/uring.sh
# Environment (besides lib.sh's): REPS=3 RUNTIME=15 NJOBS=16 SIZE=256m IMG_SIZE=16G AGS=64
#   WORKLOADS="w1 qd32"
source "$(dirname "$0")/lib.sh"

SIZE=${SIZE:-256m}
IMG_SIZE=${IMG_SIZE:-16G}
AGS=${AGS:-64}
REPS=${REPS:-3}
WORKLOADS=${WORKLOADS:-w1 qd32}
PARAM=/sys/module/fuse/parameters/enable_uring
[ -e "$PARAM" ] || die "this kernel has no FUSE over io_uring ($PARAM missing)"

bench_init uring
W=$BENCH_DIR
MNT=$W/mnt
orig_param=$(cat "$PARAM")
trap 'echo "$orig_param" >"$PARAM"; cleanup' EXIT
echo Y >"$PARAM"

fio_job() { # NAME WORKLOAD DIR [extra fio args]
	local name=$1 wl=$2 dir=$3 eng=(--ioengine=psync --iodepth=1)
	shift 3
	[ "$wl" = qd32 ] && eng=(--ioengine=libaio --iodepth=32)
	run_fio "$name" --name=seqwrite --directory="$dir" --rw=write --bs=4k --direct=1 \
		"${eng[@]}" --numjobs="$NJOBS" --size="$SIZE" --fallocate=none \
		--time_based --runtime="$RUNTIME" --group_reporting "$@"
}

declare -A RES CPU
run_streamfs() { # NAME WORKLOAD URING
	local name=$1 wl=$2 mode=$3 pid t0 t1 j
	mkfs_streamfs "$W/sfs.img" "$IMG_SIZE" "$AGS"
	mount_streamfs "$W/sfs.img" "$MNT" "uring=$mode" "$BENCH_OUT/$name.daemon.log"
	pid=${DAEMON_PID[$MNT]}
	"$STREAMFS_BIN" stats "$MNT" | grep '^transport:' >"$BENCH_OUT/$name.transport.txt"
	for ((j = 0; j < NJOBS; j++)); do
		mkdir "$MNT/d$j"
		"$STREAMFS_BIN" stream set "$MNT/d$j" $((j + 1)) >/dev/null
	done
	t0=$(cpu_ticks "$pid")
	# shellcheck disable=SC2016
	fio_job "$name" "$wl" "$MNT" --filename_format='d$jobnum/f'
	t1=$(cpu_ticks "$pid")
	CPU[$name]=$(cpu_us_per_write "$name" $((t1 - t0)))
	unmount "$MNT"
	rm -f "$W/sfs.img"
}

run_xfs() { # NAME WORKLOAD
	mount_xfs "$W/xfs.img" "$IMG_SIZE" "$W/xfs" 16
	mkdir "$W/xfs/data"
	fio_job "$1" "$2" "$W/xfs/data"
	CPU[$1]=-
	umount_xfs "$W/xfs" "$W/xfs.img"
}

variants=(classic uring xfs)
for ((r = 1; r <= REPS; r++)); do
	for wl in $WORKLOADS; do
		for ((k = 0; k < 3; k++)); do
			v=${variants[$(((k + r - 1) % 3))]}
			name=$wl-$v-$r
			case $v in
			classic) run_streamfs "$name" "$wl" off ;;
			uring) run_streamfs "$name" "$wl" on ;;
			xfs) run_xfs "$name" "$wl" ;;
			esac
			RES[$name]=$(awk -v i="$FIO_IOPS" 'BEGIN { printf "%.1f", i / 1000 }')
			log "$name: ${RES[$name]} KIOPS, ${CPU[$name]} us daemon CPU/write"
		done
	done
done

median() { sort -n | awk '{ a[NR] = $1 } END { if (NR % 2) print a[(NR + 1) / 2]; else printf "%.1f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
{
	echo
	echo "== FUSE transports: fio 4k O_DIRECT sequential write, $NJOBS jobs, stream directory per job, ${RUNTIME}s, $REPS rotated rounds"
	echo "   streamfs: $AGS AGs, $IMG_SIZE image; XFS: agcount=16 on a loop device; images on $(stat -f -c %T "$W")"
	echo "   kernel $(uname -r), $(nproc) CPUs, $(fio --version), load before: $(cut -d' ' -f1-3 /proc/loadavg)"
	for wl in $WORKLOADS; do
		printf '%-5s %-8s %s\n' "$wl" variant "KIOPS per round / median / CPU us per write (median) / ratio to XFS"
		for v in classic uring xfs; do
			runs=() cpus=()
			for ((r = 1; r <= REPS; r++)); do runs+=("${RES[$wl-$v-$r]}"); cpus+=("${CPU[$wl-$v-$r]}"); done
			m=$(printf '%s\n' "${runs[@]}" | median)
			c=-
			[ "$v" != xfs ] && c=$(printf '%s\n' "${cpus[@]}" | median)
			eval "MED_$v=$m"
			printf '      %-8s %s / %s / %s\n' "$v" "${runs[*]}" "$m" "$c"
		done
		# shellcheck disable=SC2154
		awk -v c="$MED_classic" -v u="$MED_uring" -v x="$MED_xfs" -v wl="$wl" 'BEGIN {
			printf "      %s ratios: classic/XFS %.2f  io_uring/XFS %.2f  io_uring/classic %.2f\n", wl, c / x, u / x, u / c }'
		for ((r = 1; r <= REPS; r++)); do
			awk -v c="${RES[$wl-classic-$r]}" -v u="${RES[$wl-uring-$r]}" -v x="${RES[$wl-xfs-$r]}" -v r="$r" 'BEGIN {
				printf "        round %d: classic/XFS %.2f  io_uring/XFS %.2f  io_uring/classic %.2f\n", r, c / x, u / x, u / c }'
		done
	done
} | tee "$BENCH_OUT/summary.txt"
