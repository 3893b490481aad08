#!/usr/bin/env bash
# Write-streams benchmark: the XFS write-streams series' fio job (16 jobs of 4k
# O_DIRECT sequential writes, one file per job) scaled down to a 64-AG streamfs
# image on tmpfs, ioengine=psync, --fallocate=none.
#
#   inode       -o placement=inode    all files in one directory (fio's default names)
#   agset       -o placement=agset    all files in one directory
#   streams     -o placement=streams  directory dJ per job, tagged with stream J+1
#               (streamfs stream set dJ J+1), --filename_format='d$jobnum/f';
#               the daemon is CPU-profiled (STREAMFS_CPUPROFILE)
#   streams-nc  as streams, with -o placement_cache=off
#   loopback    go-fuse loopback (kernel passthrough off) over kernel XFS
#               (agcount=16, loop device on the same tmpfs), one directory
#   xfs         kernel XFS itself, one directory (context; XFS_REF=0 skips it)
#
# Per run: KIOPS, daemon CPU per write, extents per file (bmap --json: average,
# max), AGs touched, AG lock waits (sum of stats ags[].lock_waits), placement
# cache hits/misses, and for the stream runs whether every extent of stream s's
# file lies in AGs (s-1)*k .. (s-1)*k+k-1, k = AGs / max streams.
#
# Usage: sudo scripts/bench/streams.sh
# Environment (besides lib.sh's BENCH_DIR, BENCH_OUT, STREAMFS_BIN, LOOPBACK_BIN):
#   RUNTIME=15  NJOBS=16  SIZE=256m (per file; time based, wraps at the end)
#   IMG_SIZE=16G  AGS=64  XFS_REF=1  PPROF_LINES=25  RUNS="inode agset streams streams-nc loopback xfs"
source "$(dirname "$0")/lib.sh"

SIZE=${SIZE:-256m}
IMG_SIZE=${IMG_SIZE:-16G}
AGS=${AGS:-64}
XFS_REF=${XFS_REF:-1}
PPROF_LINES=${PPROF_LINES:-25}
RUNS=${RUNS:-inode agset streams streams-nc loopback}
[ "$XFS_REF" = 1 ] && [[ " $RUNS " != *" xfs "* ]] && RUNS="$RUNS xfs"

bench_init streams
W=$BENCH_DIR
MNT=$W/mnt

fio_streams_job() { # NAME DIR [extra fio args]
	local name=$1 dir=$2
	shift 2
	run_fio "$name" --name=seqwrite --directory="$dir" --rw=write --bs=4k --direct=1 \
		--ioengine=psync --iodepth=1 --numjobs="$NJOBS" --size="$SIZE" --fallocate=none \
		--time_based --runtime="$RUNTIME" --group_reporting "$@"
}

declare -A KIOPS CPUW EXT_AVG EXT_MAX AGS_USED AGS_MAX LOCKW CHITS CMISS INSET MBFILE

record_fio() { # NAME
	local f=$BENCH_OUT/$1.json
	KIOPS[$1]=$(awk -v i="$FIO_IOPS" 'BEGIN { printf "%.1f", i / 1000 }')
	MBFILE[$1]=$(jq --argjson n "$NJOBS" '[.jobs[].write.io_bytes] | add / $n / 1048576 | floor' "$f")
}

# analyse_streamfs NAME STREAMS(0|1): bmap every file and read stats, while mounted.
analyse_streamfs() {
	local name=$1 streams=$2 f rel s d
	local bm=$BENCH_OUT/$name.bmap.jsonl
	: >"$bm"
	"$STREAMFS_BIN" stats --json "$MNT" >"$BENCH_OUT/$name.stats.json"
	while IFS= read -r f; do
		rel=${f#"$MNT"/}
		s=0
		if [ "$streams" = 1 ]; then
			d=${rel%%/*}
			s=$((${d#d} + 1))
		fi
		"$STREAMFS_BIN" bmap --json "$f" | jq -c --arg file "$rel" --argjson s "$s" '{file: $file, stream_dir: $s} + .' >>"$bm"
	done < <(find "$MNT" -type f | sort)
	local st=$BENCH_OUT/$name.stats.json
	LOCKW[$name]=$(jq '[.ags[].lock_waits] | add' "$st")
	CHITS[$name]=$(jq '.cache_hits' "$st")
	CMISS[$name]=$(jq '.cache_misses' "$st")
	EXT_AVG[$name]=$(jq -s '[.[] | .extents | length] | add / length | . * 10 | round / 10' "$bm")
	EXT_MAX[$name]=$(jq -s '[.[] | .extents | length] | max' "$bm")
	AGS_USED[$name]=$(jq -s '[.[] | .extents[].ag] | unique | length' "$bm")
	AGS_MAX[$name]=$(jq -s '[.[] | [.extents[].ag] | unique | length] | max' "$bm")
	if [ "$streams" = 1 ]; then
		local per
		per=$(jq --argjson a "$AGS" '$a / .max_streams | floor' "$st")
		# a file is in its set when every extent's AG is in [(s-1)*per, (s-1)*per+per-1]
		# and every extent carries stream s
		INSET[$name]=$(jq -s -r --argjson per "$per" '
			[.[] | .stream_dir as $s | (($s - 1) * $per) as $lo
			 | (.extents | length > 0 and all(.ag >= $lo and .ag < $lo + $per and .stream == $s))]
			| "\(map(select(.)) | length)/\(length)"' "$bm")
		jq -s -r --argjson per "$per" '
			.[] | .stream_dir as $s | (($s - 1) * $per) as $lo
			| [.extents[] | select(.ag < $lo or .ag >= $lo + $per or .stream != $s)] as $bad
			| select($bad | length > 0)
			| "  \(.file) (stream \($s), AGs \($lo)..\($lo + $per - 1)): \($bad | length) extent(s) outside, e.g. \($bad[0])"' \
			"$bm" >"$BENCH_OUT/$name.outside.txt"
	else
		INSET[$name]=-
	fi
}

run_streamfs() { # NAME OPTS STREAMS(0|1) [PROFILE]
	local name=$1 opts=$2 streams=$3 prof=${4:-} pid t0 t1 j
	mkfs_streamfs "$W/sfs.img" "$IMG_SIZE" "$AGS"
	mount_streamfs "$W/sfs.img" "$MNT" "$opts" "$BENCH_OUT/$name.daemon.log" "$prof"
	pid=${DAEMON_PID[$MNT]}
	if [ "$streams" = 1 ]; then
		for ((j = 0; j < NJOBS; j++)); do
			mkdir "$MNT/d$j"
			"$STREAMFS_BIN" stream set "$MNT/d$j" $((j + 1)) >/dev/null
		done
		"$STREAMFS_BIN" stream get "$MNT/d$((NJOBS - 1))" >"$BENCH_OUT/$name.streamget.txt" 2>&1 || true
		t0=$(cpu_ticks "$pid")
		# shellcheck disable=SC2016
		fio_streams_job "$name" "$MNT" --filename_format='d$jobnum/f'
	else
		mkdir "$MNT/flat"
		t0=$(cpu_ticks "$pid")
		fio_streams_job "$name" "$MNT/flat"
	fi
	t1=$(cpu_ticks "$pid")
	record_fio "$name"
	CPUW[$name]=$(cpu_us_per_write "$name" $((t1 - t0)))
	analyse_streamfs "$name" "$streams"
	unmount "$MNT"
	rm -f "$W/sfs.img"
}

run_loopback() { # NAME
	local name=$1 pid t0 t1
	mount_xfs "$W/xfs.img" "$IMG_SIZE" "$W/xfs" 16
	mount_loopback "$LOOPBACK_BIN" "$W/xfs/lb" "$MNT" "$BENCH_OUT/$name.daemon.log" \
		-cpuprofile "$BENCH_OUT/$name.cpu.pprof"
	pid=${DAEMON_PID[$MNT]}
	t0=$(cpu_ticks "$pid")
	fio_streams_job "$name" "$MNT"
	t1=$(cpu_ticks "$pid")
	record_fio "$name"
	CPUW[$name]=$(cpu_us_per_write "$name" $((t1 - t0)))
	xfs_extents "$name" "$W/xfs/lb"
	unmount "$MNT"
	umount_xfs "$W/xfs" "$W/xfs.img"
}

run_xfs() { # NAME
	local name=$1
	mount_xfs "$W/xfs.img" "$IMG_SIZE" "$W/xfs" 16
	mkdir "$W/xfs/data"
	fio_streams_job "$name" "$W/xfs/data"
	record_fio "$name"
	CPUW[$name]=-
	xfs_extents "$name" "$W/xfs/data"
	umount_xfs "$W/xfs" "$W/xfs.img"
}

# xfs_extents NAME DIR: extents per file and AGs from xfs_bmap (for context).
xfs_extents() {
	local name=$1 dir=$2 f
	: >"$BENCH_OUT/$name.xfs_bmap.txt"
	for f in "$dir"/*; do
		xfs_bmap -v "$f" >>"$BENCH_OUT/$name.xfs_bmap.txt" 2>/dev/null || true
	done
	# xfs_bmap -v: "FILE:" header, column header, then one line per extent (holes say "hole")
	read -r EXT_AVG[$name] EXT_MAX[$name] AGS_USED[$name] AGS_MAX[$name] < <(awk '
		/^[^ ].*:$/ { f++; next }
		$1 ~ /^[0-9]+:$/ && $3 != "hole" { n[f]++; ag[$4] = 1; fa[f, $4] = 1 }
		END {
			for (i = 1; i <= f; i++) { t += n[i]; if (n[i] > m) m = n[i] }
			for (k in fa) { split(k, p, SUBSEP); c[p[1]]++ }
			for (i in c) if (c[i] > cm) cm = c[i]
			printf "%.1f %d %d %d\n", f ? t / f : 0, m, length(ag), cm
		}' "$BENCH_OUT/$name.xfs_bmap.txt")
	LOCKW[$name]=-; CHITS[$name]=-; CMISS[$name]=-; INSET[$name]=-
}

for r in $RUNS; do
	case $r in
	inode) run_streamfs inode placement=inode 0 ;;
	agset) run_streamfs agset placement=agset 0 ;;
	streams) run_streamfs streams placement=streams 1 "$BENCH_OUT/streams.cpu.pprof" ;;
	streams-nc) run_streamfs streams-nc placement=streams,placement_cache=off 1 ;;
	loopback) run_loopback loopback ;;
	xfs) run_xfs xfs ;;
	*) die "unknown run $r" ;;
	esac
	log "$r: ${KIOPS[$r]} KIOPS, ${CPUW[$r]} us daemon CPU/write, extents/file avg ${EXT_AVG[$r]} max ${EXT_MAX[$r]}"
done

# ---- profile summaries
pprof_top() { # PROFILE BINARY OUT
	[ -s "$1" ] || { echo "(no profile at $1)"; return 0; }
	command -v go >/dev/null || { echo "(go not installed: go tool pprof -top $2 $1)"; return 0; }
	go tool pprof -top -nodecount="$PPROF_LINES" "$2" "$1" >"$3" 2>&1 || true
	go tool pprof -top -cum -nodecount="$PPROF_LINES" "$2" "$1" >"${3%.txt}.cum.txt" 2>&1 || true
}

{
	echo
	echo "== streams: fio 4k O_DIRECT sequential write, psync, $NJOBS jobs x 1 file, size $SIZE/job, ${RUNTIME}s time based, fallocate=none"
	echo "   streamfs: ${AGS} AGs, ${IMG_SIZE} image; XFS: agcount=16 on a loop device; images on $(stat -f -c %T "$W")"
	echo "   kernel $(uname -r), $(nproc) CPUs, $(fio --version)"
	ref=${KIOPS[loopback]:-}
	printf '%-11s %7s %8s %8s %8s %8s %8s %8s %9s %9s %9s %8s %9s\n' run KIOPS /loopbk "CPU/wr" MB/file \
		ext-avg ext-max AGs AGs/file lockwaits cachehit cachemiss in-set
	printf '%-11s %7s %8s %8s %8s %8s %8s %8s %9s %9s %9s %8s\n' "" "" "" "us" "" "" "" "total" "max" "" "" ""
	for r in $RUNS; do
		printf '%-11s %7s %8s %8s %8s %8s %8s %8s %9s %9s %9s %8s %9s\n' "$r" "${KIOPS[$r]}" \
			"$(ratio "${KIOPS[$r]}" "$ref")" "${CPUW[$r]}" "${MBFILE[$r]}" "${EXT_AVG[$r]}" "${EXT_MAX[$r]}" \
			"${AGS_USED[$r]}" "${AGS_MAX[$r]}" "${LOCKW[$r]}" "${CHITS[$r]}" "${CMISS[$r]}" "${INSET[$r]}"
	done
	for r in $RUNS; do
		if [ -s "$BENCH_OUT/$r.outside.txt" ]; then
			echo "$r: extents outside their stream's AG set:"
			head -20 "$BENCH_OUT/$r.outside.txt"
		fi
	done
	if [[ " $RUNS " == *" streams "* ]]; then
		echo
		echo "== CPU profile of the streamfs daemon, streams run (go tool pprof -top)"
		pprof_top "$BENCH_OUT/streams.cpu.pprof" "$STREAMFS_BIN" "$BENCH_OUT/streams.pprof.txt"
		sed -n "1,$((PPROF_LINES + 6))p" "$BENCH_OUT/streams.pprof.txt"
		echo "-- cumulative (-top -cum)"
		sed -n "6,$((PPROF_LINES + 6))p" "$BENCH_OUT/streams.pprof.cum.txt"
	fi
	if [[ " $RUNS " == *" loopback "* ]]; then
		pprof_top "$BENCH_OUT/loopback.cpu.pprof" "$LOOPBACK_BIN" "$BENCH_OUT/loopback.pprof.txt"
		echo "(loopback daemon profile: $BENCH_OUT/loopback.pprof.txt)"
	fi
	echo "raw output: $BENCH_OUT"
} | tee "$BENCH_OUT/results.txt"
