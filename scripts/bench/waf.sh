#!/usr/bin/env bash
# What streams do to a drive's write amplification: runs on a modelled FDP SSD
# (streamfs mkfs --ftl), each with streams and without, the drive filled to
# about 90%. Every 2 s the daemon's FDP counters are sampled (stats --json),
# giving WAF against host bytes written; gnuplot draws the curves.
#
#   fio       mixed lifetimes: a hot file overwritten at random (4k, fio),
#             static cold files written once, and cold "rolling" files that
#             are deleted and rewritten, picked at random, while the hot
#             writes run. Each group
#             has its own directory, which carries a stream (hot 1, cold 2,
#             rolling 3) in the streams run. Mount option discard: deleted
#             and overwritten-elsewhere blocks reach the drive as trims.
#   rocksdb   db_bench fillrandom, then overwrite for several times the drive;
#             beside the database a cold ballast (other data on the drive).
#             With streams, stream rules put the WAL (*.log), the tables
#             (*.sst) and MANIFEST-* on streams 1, 2, 3; the ballast on 4.
#   w1        the write-streams series' fio job (scripts/bench/streams.sh,
#             "streams" run: 16 jobs of 4k O_DIRECT sequential writes, one
#             stream directory per job) on a plain image and on a modelled
#             one: what counting costs.
#   plain     the fio and rocksdb phases once more on a plain image of the same
#             size: throughput without the model.
#
# The WAF reported per run is the one of the measurement phase (after the
# fill): delta media bytes over delta host bytes.
#
# Usage: sudo scripts/bench/waf.sh
# Environment (besides lib.sh's BENCH_DIR, BENCH_OUT, STREAMFS_BIN):
#   DRIVE=2G  FTL=op=7,ru=4M,handles=8  HOT=192M  COLD=600M  ROLL_FILES=20
#   ROLL=48M  HOT_IO=6G (hot bytes overwritten)  ROLL_PAUSE=0.3 (s between files)
#   DB_FTL=op=14,ru=32M,handles=4  BALLAST=700M  KEYS=500000  VALUE=1000
#   OVERWRITES=3 (x KEYS)  SST=4194304 (target_file_size_base: tables much
#   smaller than a reclaim unit, as on real FDP drives whose units are GBs)
#   W1_IMG=16G  W1_FTL=op=7,ru=8M,handles=16  RUNTIME=15
#   DISCARD=discard (nodiscard: deleted data stays valid to the drive until
#   its blocks are reused, as without online discard)
#   RUNS="fio rocksdb w1 plain"  PLOTS=docs/img (relative to the checkout)
source "$(dirname "$0")/lib.sh"

DRIVE=${DRIVE:-2G}
FTL=${FTL:-op=7,ru=4M,handles=8}
HOT=${HOT:-192M}
COLD=${COLD:-600M}
ROLL_FILES=${ROLL_FILES:-20}
ROLL=${ROLL:-48M}
ROLL_PAUSE=${ROLL_PAUSE:-0.3}
HOT_IO=${HOT_IO:-6G}
DB_FTL=${DB_FTL:-op=14,ru=32M,handles=4}
SST=${SST:-4194304}
BALLAST=${BALLAST:-700M}
KEYS=${KEYS:-500000}
VALUE=${VALUE:-1000}
OVERWRITES=${OVERWRITES:-3}
W1_IMG=${W1_IMG:-16G}
W1_FTL=${W1_FTL:-op=7,ru=8M,handles=16}
RUNS=${RUNS:-fio rocksdb w1 plain}
DISCARD=${DISCARD:-discard}
PLOTS=${PLOTS:-docs/img}

# The tools this experiment needs beyond lib.sh's, from Debian.
missing=()
command -v db_bench >/dev/null || missing+=(rocksdb-tools)
command -v gnuplot >/dev/null || missing+=(gnuplot-nox)
command -v fio >/dev/null || missing+=(fio)
command -v jq >/dev/null || missing+=(jq)
if [ ${#missing[@]} -gt 0 ]; then
	log "installing ${missing[*]}"
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# This script uses neither loopback daemon; lib.sh builds them unless set.
: "${LOOPBACK_BIN:=/bin/true}" "${STOCK_LOOPBACK_BIN:=/bin/true}"
export LOOPBACK_BIN STOCK_LOOPBACK_BIN
bench_init waf
W=$BENCH_DIR
MNT=$W/mnt
IMG=$W/drive.img
SAMPLER=

# sample NAME: record "seconds host_bytes media_bytes" every 2 s in the
# background until stop_sample.
sample() {
	local out=$BENCH_OUT/$1.samples t0=$SECONDS
	: >"$out"
	(
		trap - EXIT INT TERM
		while :; do
			"$STREAMFS_BIN" stats --json "$MNT" 2>/dev/null |
				jq -r --argjson t $((SECONDS - t0)) '"\($t) \(.fdp.host_bytes_written) \(.fdp.media_bytes_written)"' >>"$out" || true
			sleep 2
		done
	) &
	SAMPLER=$!
}
stop_sample() {
	if [ -n "$SAMPLER" ]; then
		kill "$SAMPLER" 2>/dev/null || true
		wait "$SAMPLER" 2>/dev/null || true
	fi
	SAMPLER=
	return 0
}

# fdp_counters: "host media" now.
fdp_counters() {
	"$STREAMFS_BIN" stats --json "$MNT" | jq -r '"\(.fdp.host_bytes_written) \(.fdp.media_bytes_written)"'
}

declare -A RES

# phase_result NAME "host0 media0": record the phase's WAF and per-handle
# WAF, from the counters at its start.
phase_result() {
	local name=$1 h0 m0 h1 m1
	read -r h0 m0 <<<"$2"
	read -r h1 m1 <<<"$(fdp_counters)"
	"$STREAMFS_BIN" stats --json "$MNT" >"$BENCH_OUT/$name.stats.json"
	RES[$name.waf]=$(awk -v a="$h0" -v b="$m0" -v c="$h1" -v d="$m1" 'BEGIN { printf "%.3f", (d - b) / (c - a) }')
	RES[$name.host]=$(awk -v a="$h0" -v c="$h1" 'BEGIN { printf "%.2f", (c - a) / 2^30 }')
	RES[$name.handles]=$(jq -r '[.fdp.handles[] | select(.host_bytes_written > 0) | "h\(.stream)=\(.waf * 1000 | round / 1000)"] | join(" ")' "$BENCH_OUT/$name.stats.json")
	log "$name: phase WAF ${RES[$name.waf]} over ${RES[$name.host]} GiB host writes; cumulative handles: ${RES[$name.handles]}"
}

new_drive() { # FTL-SPEC|"" : a fresh image, modelled or plain
	rm -f "$IMG"
	if [ -n "$1" ]; then
		"$STREAMFS_BIN" mkfs --size "$DRIVE" --ftl "$1" "$IMG" >"$BENCH_OUT/mkfs.txt"
	else
		"$STREAMFS_BIN" mkfs --size "$DRIVE" "$IMG" >"$BENCH_OUT/mkfs.txt"
	fi
}

# ---- fio: hot / cold / rolling ----
fio_run() { # NAME STREAMS(0|1) MODEL(0|1)
	local name=$1 streams=$2 model=$3 c0 roll
	log "fio $name"
	new_drive "$([ "$model" = 1 ] && echo "$FTL")"
	mount_streamfs "$IMG" "$MNT" "$DISCARD" "$BENCH_OUT/$name.log"
	mkdir -p "$MNT/hot" "$MNT/cold" "$MNT/roll"
	if [ "$streams" = 1 ]; then
		"$STREAMFS_BIN" stream set "$MNT/hot" 1 >/dev/null
		"$STREAMFS_BIN" stream set "$MNT/cold" 2 >/dev/null
		"$STREAMFS_BIN" stream set "$MNT/roll" 3 >/dev/null
	fi
	[ "$model" = 1 ] && sample "$name"
	# Fill: cold once, the rolling files, the hot file; all sequential.
	fio --name=cold --directory="$MNT/cold" --rw=write --bs=1M --direct=1 --nrfiles=4 \
		--size="$COLD" --ioengine=psync --fallocate=none --output="$BENCH_OUT/$name.fill-cold.json" --output-format=json
	for i in $(seq 1 "$ROLL_FILES"); do
		dd if=/dev/zero of="$MNT/roll/r$i" bs=1M count=$((${ROLL%M})) oflag=direct status=none
	done
	fio --name=hot --filename="$MNT/hot/hot.dat" --rw=write --bs=1M --direct=1 --size="$HOT" \
		--ioengine=psync --fallocate=none --output="$BENCH_OUT/$name.fill-hot.json" --output-format=json
	df -h "$MNT" | tail -1 >"$BENCH_OUT/$name.df"
	log "fill done: $(cat "$BENCH_OUT/$name.df")"
	[ "$model" = 1 ] && c0=$(fdp_counters)
	# Rolling files: delete one at random, write it again, all the time.
	# Random, not oldest first: deleting in write order would free whole
	# units even when mixed with hot data, which is the one pattern where
	# mixing costs nothing.
	(
		trap - EXIT INT TERM
		while :; do
			i=$((RANDOM % ROLL_FILES + 1))
			rm -f "$MNT/roll/r$i"
			dd if=/dev/zero of="$MNT/roll/r$i" bs=1M count=$((${ROLL%M})) oflag=direct status=none || true
			sleep "$ROLL_PAUSE"
		done
	) &
	roll=$!
	RUNTIME=1800 run_fio "$name" --name=hot --filename="$MNT/hot/hot.dat" --rw=randwrite --bs=4k --direct=1 \
		--size="$HOT" --io_size="$HOT_IO" --ioengine=psync --fallocate=none --randrepeat=0 \
		--norandommap
	kill "$roll" 2>/dev/null
	wait "$roll" 2>/dev/null || true
	RES[$name.kiops]=$(awk -v i="$FIO_IOPS" 'BEGIN { printf "%.1f", i / 1000 }')
	if [ "$model" = 1 ]; then
		phase_result "$name" "$c0"
		stop_sample
	fi
	unmount "$MNT"
}

# ---- RocksDB ----
DB_OPTS=(--key_size=16 --value_size="$VALUE" --compression_type=none --threads=1
	--write_buffer_size=33554432 --target_file_size_base="$SST"
	--max_bytes_for_level_base=134217728 --max_background_jobs=2 --histogram=0
	--statistics=0 --seed=42)

db_run() { # NAME STREAMS(0|1) MODEL(0|1)
	# commit=1: space of deleted tables is reusable once its free is
	# committed; compaction needs it back quickly on a full drive.
	local name=$1 streams=$2 model=$3 c0 opts=$DISCARD,commit=1 t0
	log "rocksdb $name"
	new_drive "$([ "$model" = 1 ] && echo "$DB_FTL")"
	[ "$streams" = 1 ] && opts="$opts,stream_rules=*.log:1;*.sst:2;MANIFEST-*:3"
	mount_streamfs "$IMG" "$MNT" "$opts" "$BENCH_OUT/$name.log"
	mkdir -p "$MNT/ballast" "$MNT/db"
	[ "$streams" = 1 ] && "$STREAMFS_BIN" stream set "$MNT/ballast" 4 >/dev/null
	[ "$model" = 1 ] && sample "$name"
	dd if=/dev/zero of="$MNT/ballast/b" bs=1M count=$((${BALLAST%M})) oflag=direct status=none
	t0=$SECONDS
	db_bench --benchmarks=fillrandom --num="$KEYS" --db="$MNT/db" "${DB_OPTS[@]}" >"$BENCH_OUT/$name.fill.txt" 2>&1
	df -h "$MNT" | tail -1 >"$BENCH_OUT/$name.df"
	log "fill done in $((SECONDS - t0)) s: $(cat "$BENCH_OUT/$name.df")"
	[ "$model" = 1 ] && c0=$(fdp_counters)
	t0=$SECONDS
	# Debian's db_bench (7.8.3) is built with assertions; on this setup it
	# has aborted on one (WritableFileWriter, sync_without_flush_called_)
	# hundreds of thousands of operations in. The drive's counters still
	# tell what was written, so the phase is measured up to there.
	db_bench --benchmarks=overwrite --use_existing_db=1 --num="$KEYS" --writes=$((KEYS * OVERWRITES)) \
		--db="$MNT/db" "${DB_OPTS[@]}" >"$BENCH_OUT/$name.overwrite.txt" 2>&1 ||
		log "db_bench overwrite exited with status $?: $(grep -ao 'finished [0-9]* ops' "$BENCH_OUT/$name.overwrite.txt" | tail -1)"
	RES[$name.secs]=$((SECONDS - t0))
	RES[$name.kops]=$(awk '/^overwrite/ { for (i = 1; i <= NF; i++) if ($(i+1) == "ops/sec") { printf "%.1f", $i / 1000; exit } }' "$BENCH_OUT/$name.overwrite.txt")
	log "overwrite: ${RES[$name.kops]} Kops/s in ${RES[$name.secs]} s"
	if [ "$model" = 1 ]; then
		phase_result "$name" "$c0"
		stop_sample
	fi
	unmount "$MNT"
}

# ---- W1: the streams job with and without the model ----
w1_run() { # NAME FTL-SPEC|""
	local name=$1 spec=$2 j
	log "W1 $name"
	rm -f "$IMG"
	if [ -n "$spec" ]; then
		"$STREAMFS_BIN" mkfs --size "$W1_IMG" --ag-count 64 --ftl "$spec" "$IMG" >/dev/null
	else
		"$STREAMFS_BIN" mkfs --size "$W1_IMG" --ag-count 64 "$IMG" >/dev/null
	fi
	mount_streamfs "$IMG" "$MNT" "" "$BENCH_OUT/$name.log"
	for j in $(seq 0 $((NJOBS - 1))); do
		mkdir -p "$MNT/d$j"
		"$STREAMFS_BIN" stream set "$MNT/d$j" $((j + 1)) >/dev/null
	done
	run_fio "$name" --name=seqwrite --directory="$MNT" --filename_format='d$jobnum/f' --rw=write --bs=4k \
		--direct=1 --ioengine=psync --iodepth=1 --numjobs="$NJOBS" --size=256m --fallocate=none \
		--time_based --runtime="$RUNTIME" --group_reporting
	RES[$name.kiops]=$(awk -v i="$FIO_IOPS" 'BEGIN { printf "%.1f", i / 1000 }')
	unmount "$MNT"
	rm -f "$IMG"
}

for r in $RUNS; do
	case $r in
	fio)
		fio_run fio-nostreams 0 1
		fio_run fio-streams 1 1
		;;
	rocksdb)
		db_run db-nostreams 0 1
		db_run db-streams 1 1
		;;
	w1)
		w1_run w1-plain ""
		w1_run w1-ftl "$W1_FTL"
		w1_run w1-plain2 ""
		w1_run w1-ftl2 "$W1_FTL"
		;;
	plain)
		fio_run fio-plain 1 0
		db_run db-plain 1 0
		;;
	*) die "unknown run $r" ;;
	esac
done

# ---- plots: interval WAF (windows of >= 128 MiB host writes) ----
PLOT_DIR=$PLOTS
[[ $PLOT_DIR == /* ]] || PLOT_DIR=$BENCH_ROOT/$PLOTS
mkdir -p "$PLOT_DIR"
windows() { # SAMPLES > "host_GiB interval_WAF cumulative_WAF"
	awk 'NR == 1 { h0 = $2; m0 = $3 }
		$2 - h0 >= 134217728 { printf "%.3f %.3f %.3f\n", $2 / 2^30, ($3 - m0) / ($2 - h0), $3 / $2; h0 = $2; m0 = $3 }' "$1"
}
plot() { # TITLE OUT NAME-NOSTREAMS NAME-STREAMS
	local title=$1 out=$2 a=$3 b=$4
	[ -s "$BENCH_OUT/$a.samples" ] && [ -s "$BENCH_OUT/$b.samples" ] || return 0
	windows "$BENCH_OUT/$a.samples" >"$BENCH_OUT/$a.win"
	windows "$BENCH_OUT/$b.samples" >"$BENCH_OUT/$b.win"
	gnuplot <<-EOF
		set terminal pngcairo size 900,500 font "sans,11" noenhanced
		set output "$PLOT_DIR/$out"
		set title "$title"
		set xlabel "host GiB written (since mkfs)"
		set ylabel "WAF"
		set yrange [0.9:*]
		set grid
		set key bottom right
		plot "$BENCH_OUT/$a.win" using 1:2 with lines lw 2 lc rgb "#c0392b" title "no streams, per sample (2 s, >= 128 MiB)", \
		     "$BENCH_OUT/$a.win" using 1:3 with lines dt 2 lc rgb "#c0392b" title "no streams, cumulative", \
		     "$BENCH_OUT/$b.win" using 1:2 with lines lw 2 lc rgb "#2471a3" title "streams, per sample (2 s, >= 128 MiB)", \
		     "$BENCH_OUT/$b.win" using 1:3 with lines dt 2 lc rgb "#2471a3" title "streams, cumulative"
	EOF
	log "wrote $PLOT_DIR/$out"
}
plot "fio hot/cold/rolling on a modelled $DRIVE drive ($FTL, $DISCARD)" waf-fio.png fio-nostreams fio-streams
plot "RocksDB db_bench overwrite on a modelled $DRIVE drive ($DB_FTL, $DISCARD)" waf-rocksdb.png db-nostreams db-streams

# ---- summary ----
{
	echo "# waf.sh $(date -u +%F) $DISCARD DRIVE=$DRIVE FTL=$FTL DB_FTL=$DB_FTL SST=$SST HOT=$HOT COLD=$COLD ROLL=${ROLL_FILES}x$ROLL HOT_IO=$HOT_IO BALLAST=$BALLAST KEYS=$KEYS VALUE=$VALUE OVERWRITES=$OVERWRITES"
	for k in $(printf '%s\n' "${!RES[@]}" | sort); do echo "$k ${RES[$k]}"; done
	for p in fio db; do
		a=${RES[$p-nostreams.waf]:-} b=${RES[$p-streams.waf]:-}
		[ -n "$a" ] && [ -n "$b" ] && echo "$p.ratio $(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", b / a }')"
	done
} | tee "$BENCH_OUT/summary.txt"
