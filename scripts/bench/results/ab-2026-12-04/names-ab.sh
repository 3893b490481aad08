#!/usr/bin/env bash
# The names phase of everyday.sh (NFILES empty files in 4 directories made
# in parallel with xargs touch, find + ls -lR, rm -rf) on two streamfs
# builds A and B and kernel XFS, in ROUNDS rounds whose order rotates
# (A B X, B X A, X A B, ...), so a change of machine load falls on all
# three. Prints seconds per step and run, then medians and ratios to XFS,
# and for streamfs the daemon's CPU per file during rm -rf.
#   sudo A=/tmp/streamfs-a B=/tmp/streamfs-b scripts/bench/results/ab-2026-12-04/names-ab.sh
source "$(dirname "$0")/../../lib.sh"
A=${A:-/tmp/streamfs-a} B=${B:-/tmp/streamfs-b} ROUNDS=${ROUNDS:-5} NFILES=${NFILES:-40000}
bench_init names-ab
W=$BENCH_DIR
declare -A T
steps() { # DIR NAME [PID]: create, find+ls, rm; times into T[NAME.step]
	local d t0 c0 per=$((NFILES / 4))
	mkdir -p "$1"
	for d in 0 1 2 3; do mkdir "$1/d$d"; done
	t0=$EPOCHREALTIME
	local pids=()
	for d in 0 1 2 3; do
		(cd "$1/d$d" && seq -f "f%.0f" 1 "$per" | xargs touch) &
		pids+=($!)
	done
	wait "${pids[@]}"
	T[$2.create]=$(bc <<<"$EPOCHREALTIME - $t0")
	t0=$EPOCHREALTIME
	find "$1" >/dev/null
	ls -lR "$1" >/dev/null
	T[$2.findls]=$(bc <<<"$EPOCHREALTIME - $t0")
	c0=$(cpu_ticks "${3:-self}")
	t0=$EPOCHREALTIME
	rm -rf "$1"
	T[$2.rm]=$(bc <<<"$EPOCHREALTIME - $t0")
	# the daemon's ticks of 10 ms over NFILES files: µs per file
	T[$2.cpu]=-
	[ -z "${3:-}" ] || T[$2.cpu]=$((($(cpu_ticks "$3") - c0) * 10000 / NFILES))
}
run() { # VARIANT ROUND
	local n=$1-$2
	case $1 in
	X)
		mount_xfs "$W/xfs.img" 16G "$W/xfs" 16
		steps "$W/xfs/t" "$n"
		umount_xfs "$W/xfs" "$W/xfs.img"
		;;
	*)
		STREAMFS_BIN=${!1}
		mkfs_streamfs "$W/sfs.img" 16G 16
		mount_streamfs "$W/sfs.img" "$W/mnt" "" "$BENCH_OUT/$n.log"
		steps "$W/mnt/t" "$n" "${DAEMON_PID[$W/mnt]}"
		unmount "$W/mnt"
		rm -f "$W/sfs.img"
		;;
	esac
	log "$n: create ${T[$n.create]} s, find+ls ${T[$n.findls]} s, rm ${T[$n.rm]} s, daemon CPU in rm ${T[$n.cpu]} µs/file (load $(cut -d' ' -f1 /proc/loadavg))"
}
vs=(A B X)
for ((r = 1; r <= ROUNDS; r++)); do
	for k in 0 1 2; do run "${vs[$(((k + r - 1) % 3))]}" "$r"; done
done
med() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
echo "== names: $NFILES files, $ROUNDS rotated rounds; A=$A B=$B; $(uname -r), $(nproc) CPUs"
for s in create findls rm; do
	for v in A B X; do
		vals=$(for ((r = 1; r <= ROUNDS; r++)); do echo "${T[$v-$r.$s]}"; done)
		m=$(med <<<"$vals")
		printf '%-7s %s  %s  median %.3f s' "$s" "$v" "$(tr '\n' ' ' <<<"$vals")" "$m"
		if [ "$v" != X ]; then
			ratios=$(for ((r = 1; r <= ROUNDS; r++)); do bc -l <<<"${T[X-$r.$s]} / ${T[$v-$r.$s]}"; done)
			printf '  ratio to XFS per round %s median %.2f' "$(for x in $ratios; do printf '%.2f ' "$x"; done)" "$(med <<<"$ratios")"
		fi
		echo
	done
done
for v in A B; do
	vals=$(for ((r = 1; r <= ROUNDS; r++)); do echo "${T[$v-$r.cpu]}"; done)
	echo "rm daemon CPU $v  $(tr '\n' ' ' <<<"$vals") µs/file, median $(med <<<"$vals")"
done
