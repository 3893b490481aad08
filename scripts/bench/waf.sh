#!/usr/bin/env bash
# What streams do to a drive's write amplification: runs on a modelled FDP SSD
# (streamfs mkfs --ftl), each with streams and without, the drive filled to
# about 92%. Every 2 s the daemon's FDP counters are sampled (stats --json),
# giving WAF against host bytes written; gnuplot draws the curves.
#
#   fio       mixed lifetimes on a DRIVE image: a hot region (HOT, ~10% of the
#             drive) overwritten at random in 4-64 KiB blocks, static cold
#             files written once (COLD), and ROLL_FILES large cold files
#             written sequentially that are deleted and rewritten, picked at
#             random, all the time. Hot and rolling writers run together at
#             fixed rates (HOT_RATE, ROLL_RATE), so both runs see the same
#             mix; the hot writer stops after HOT_IO. Each group has its own
#             directory, which carries a stream (hot 1, cold 2, rolling 3) in
#             the streams run; without streams all share handle 1.
#   rocksdb   db_bench fillrandom (DB_FILL), then overwrite, on a DB_DRIVE image with a
#             cold ballast (other data on the drive) beside the database;
#             tables (SST) much smaller than a reclaim unit, as on real FDP
#             drives whose units are GBs. Three runs: no streams; "rules":
#             stream rules put the WAL (*.log) on 1, tables (*.sst) on 2,
#             MANIFEST-* on 6; "levels": the same plus rwhint.so (LD_PRELOAD),
#             which turns RocksDB's own per-level write-lifetime hints
#             (fcntl F_SET_RW_HINT: WAL short, L0/L1 medium, L2 long, L3+
#             extreme) into streams 1-4. The ballast is on stream 7.
#             Mounted without online discard by default, as production
#             file systems are: the drive learns of a deleted table only
#             when its blocks are written again (or at a periodic fstrim,
#             TRIM_EVERY).
#   w1        the write-streams series' fio job (scripts/bench/streams.sh,
#             "streams" run: 16 jobs of 4k O_DIRECT sequential writes, one
#             stream directory per job) on a plain image and on a modelled
#             one: what counting costs.
#   plain     the fio and rocksdb runs once more on a plain image of the same
#             size: throughput without the model.
#
# The WAF reported per run is the one of its measurement phase (after the
# fill): delta media bytes over delta host bytes; "steady" is the same over
# the phase's last quarter of host bytes.
#
# Usage: sudo scripts/bench/waf.sh
# Environment (besides lib.sh's BENCH_DIR, BENCH_OUT, STREAMFS_BIN):
#   DRIVE=2G  FTL=op=7,ru=8M,handles=4  HOT=200M  COLD=300M  ROLL_FILES=14
#   ROLL=100M  HOT_IO=7G (hot bytes overwritten)  HOT_RATE=72m  ROLL_RATE=48m
#   DB_DRIVE=4G  DB_FTL=op=7,ru=16M,handles=8  BALLAST=1900M  KEYS=1000000
#   VALUE=1000  OVERWRITES=4 (x KEYS)  SST=524288 (target_file_size_base)
#   MEMTABLE=4194304  L1=16777216 (max_bytes_for_level_base)
#   W1_IMG=16G  W1_FTL=op=7,ru=8M,handles=16  RUNTIME=15
#   DISCARD=discard (fio runs; nodiscard: deleted data stays valid to the
#   drive until its blocks are reused, as without online discard)
#   DB_DISCARD=nodiscard (rocksdb runs; production mounts rarely use online
#   discard)  TRIM_EVERY=0 (rocksdb runs: seconds between fstrim calls during
#   the overwrite phase, a periodic fstrim; 0 never)
#   DYNAMIC=1 (level_compaction_dynamic_level_bytes: levels sized from the
#   last one, RocksDB's default since 8.4; keeps space amplification ~1.1)
#   PENDING_SOFT=64M PENDING_HARD=256M (pending compaction bytes limits)
#   L0_SLOWDOWN=20 L0_STOP=36 (level0_slowdown/stop_writes_trigger, L0 files)
#   DB_FILL=fillrandom (fillseq: every key once, so the database keeps its
#   size through the overwrites; fillrandom writes ~63% of KEYS and the
#   overwrites add the rest, growing it by half)
#   REGIME=85 REGIME_FROM=0 (the summary's NAME.equal_fill: each mode's WAF
#   against none's over the same host bytes since mkfs, from where both file
#   systems are REGIME percent full, and at least REGIME_FROM GiB, to where
#   the shorter run ends; the fill of each over that range beside it;
#   NAME.equal_fill_nodiscard: the same range of the replays without
#   discard, from NAME.nodiscard.json)
#   COMPARE="BASE.samples OTHER.samples"  only print that comparison for
#             two kept runs (no runs)
#   PLOT_FILL=0 (1: the plots show each run's fill on a right axis)
#   TAG= (suffix of the plot's file name, for several configurations)
#   INFO_LOG=fs (RocksDB's info LOG in the database directory; stderr: in the
#   run's .txt files, off the filesystem)
#   TRACE=1 (rocksdb runs on the model: record the device trace, from mkfs
#   on, and replay it on the same drive with --no-discard, reported beside
#   the live WAF as NAME.nodiscard_waf; 0 skips)
#   REPLOT=1  only redraw the RocksDB plots of docs/BENCHMARKS.md from the
#             samples kept in scripts/bench/results/waf-rocksdb (no runs)
#   RUNS="fio rocksdb w1 plain"  DB_MODES="none rules levels"
#   PLOTS=docs/img (relative to the checkout)
source "$(dirname "$0")/lib.sh"

DRIVE=${DRIVE:-2G}
FTL=${FTL:-op=7,ru=8M,handles=4}
HOT=${HOT:-200M}
COLD=${COLD:-300M}
ROLL_FILES=${ROLL_FILES:-14}
ROLL=${ROLL:-100M}
HOT_IO=${HOT_IO:-7G}
HOT_RATE=${HOT_RATE:-72m}
ROLL_RATE=${ROLL_RATE:-48m}
DB_DRIVE=${DB_DRIVE:-4G}
DB_FTL=${DB_FTL:-op=7,ru=16M,handles=8}
SST=${SST:-524288}
MEMTABLE=${MEMTABLE:-4194304}
L1=${L1:-16777216}
BALLAST=${BALLAST:-1900M}
KEYS=${KEYS:-1000000}
VALUE=${VALUE:-1000}
OVERWRITES=${OVERWRITES:-4}
W1_IMG=${W1_IMG:-16G}
W1_FTL=${W1_FTL:-op=7,ru=8M,handles=16}
RUNS=${RUNS:-fio rocksdb w1 plain}
DB_MODES=${DB_MODES:-none rules levels}
DISCARD=${DISCARD:-discard}
DB_DISCARD=${DB_DISCARD:-nodiscard}
TRIM_EVERY=${TRIM_EVERY:-0}
DYNAMIC=${DYNAMIC:-1}
PENDING_SOFT=${PENDING_SOFT:-67108864}
PENDING_HARD=${PENDING_HARD:-268435456}
L0_SLOWDOWN=${L0_SLOWDOWN:-20}
L0_STOP=${L0_STOP:-36}
TAG=${TAG:-}
TRACE=${TRACE:-1}
REGIME=${REGIME:-85}
REGIME_FROM=${REGIME_FROM:-0}
DB_FILL=${DB_FILL:-fillrandom}
INFO_LOG=${INFO_LOG:-fs}
PLOTS=${PLOTS:-docs/img}

PLOT_DIR=$PLOTS
[[ $PLOT_DIR == /* ]] || PLOT_DIR=$BENCH_ROOT/$PLOTS
# Plots: interval WAF (windows of >= 512 MiB host writes) from NAME.samples
# in SAMPLES_DIR (this run's BENCH_OUT, or with REPLOT the kept results).
windows() { # SAMPLES > "host_GiB interval_WAF cumulative_WAF fill_percent"
	awk 'NR == 1 { h0 = $2; m0 = $3 }
		$2 - h0 >= 536870912 { printf "%.3f %.3f %.3f %.1f\n", $2 / 2^30, ($3 - m0) / ($2 - h0), $3 / $2, 100 * $4 / $5; h0 = $2; m0 = $3 }' "$1"
}
# PLOT_FILL=1 adds each run's file-system fill (right axis).
plot() { # TITLE OUT NAME:LABEL... (runs without samples are left out)
	local title=$1 out=$2 spec name label i=0 cmds=() colors=("#c0392b" "#d68910" "#2471a3" "#229954") y2= h=500
	[ "${PLOT_FILL:-0}" = 1 ] && y2='set y2label "file system full (%)"; set y2range [0:100]; set y2tics; set ytics nomirror; set key below' h=580
	shift 2
	for spec in "$@"; do
		name=${spec%%:*} label=${spec#*:}
		[ -s "$SAMPLES_DIR/$name.samples" ] || continue
		windows "$SAMPLES_DIR/$name.samples" >"$WIN_DIR/$name.win"
		cmds+=("\"$WIN_DIR/$name.win\" using 1:2 with lines lw 2 lc rgb \"${colors[i]}\" title \"$label, interval\"")
		cmds+=("\"$WIN_DIR/$name.win\" using 1:3 with lines dt 2 lc rgb \"${colors[i]}\" title \"$label, since mkfs\"")
		[ -n "$y2" ] && cmds+=("\"$WIN_DIR/$name.win\" using 1:4 axes x1y2 with lines dt 3 lc rgb \"${colors[i]}\" title \"$label, full (%)\"")
		i=$((i + 1))
	done
	[ "$i" -ge 2 ] || return 0
	gnuplot <<-EOF
		set terminal pngcairo size 900,$h font "sans,11" noenhanced
		set output "$PLOT_DIR/$out"
		set title "$title"
		set xlabel "host GiB written (since mkfs)"
		set ylabel "WAF"
		set yrange [0.9:*]
		set grid
		set key top left
		$y2
		plot $(IFS=,; echo "${cmds[*]}")
	EOF
	log "wrote $PLOT_DIR/$out"
}
# equal_window BASE OTHER [FROM]: WAF of two runs' samples over the same
# range of host bytes since mkfs, from where both file systems are at least
# FROM percent full (default REGIME) to where the shorter run ends; the fill
# each run had over that range beside it. REGIME_FROM (GiB) starts the
# range no earlier than that many host bytes since mkfs. Runs of one workload at equal
# host bytes and equal fill, whatever their phases took.
equal_window() {
	awk -v from="${3:-$REGIME}" -v skip="$REGIME_FROM" -v gib=$((1 << 30)) '
		FNR == 1 { f++ }
		{ n[f]++; h[f, n[f]] = $2; m[f, n[f]] = $3; u[f, n[f]] = 100 * $4 / $5 }
		!(f in reach) && 100 * $4 / $5 >= from { reach[f] = $2 }
		END {
			if (!(1 in reach) || !(2 in reach)) { print "equal_window: a run never reached " from "% full"; exit }
			h0 = reach[1] > reach[2] ? reach[1] : reach[2]
			if (h0 < skip * gib) h0 = skip * gib
			h1 = h[1, n[1]] < h[2, n[2]] ? h[1, n[1]] : h[2, n[2]]
			if (h1 <= h0) { print "equal_window: no common range"; exit }
			for (r = 1; r <= 2; r++) {
				a = 0; lo = 100; hi = 0; s = 0; k = 0
				for (i = 1; i <= n[r]; i++) {
					if (h[r, i] < h0 || h[r, i] > h1) continue
					if (!a) a = i
					b = i; s += u[r, i]; k++
					if (u[r, i] < lo) lo = u[r, i]
					if (u[r, i] > hi) hi = u[r, i]
				}
				w[r] = (m[r, b] - m[r, a]) / (h[r, b] - h[r, a])
				printf "%.3f fill %.0f-%.0f%% (mean %.1f%%) over %.2f GiB; ", w[r], lo, hi, s / k, (h[r, b] - h[r, a]) / gib
			}
			printf "window %.2f-%.2f GiB host since mkfs; ratio %.3f; bytes %.0f %.0f\n", h0 / gib, h1 / gib, w[2] / w[1], h0, h1
		}' "$1" "$2"
}
# replay_window REPLAY.json H0 H1: the WAF of a replay (waf replay --json)
# over its intervals that end in (H0, H1] host bytes since mkfs.
replay_window() {
	jq -r --argjson a "$2" --argjson b "$3" '[.intervals[] | select(.host_bytes_end > $a and .host_bytes_end <= $b)] |
		if length == 0 then "nan" else ((map(.media_bytes) | add) / (map(.host_bytes) | add) * 1000 | round / 1000) end' "$1"
}
# COMPARE="BASE.samples OTHER.samples": only print equal_window for two
# runs' kept samples, and stop.
if [ -n "${COMPARE:-}" ]; then
	# shellcheck disable=SC2086 # two paths
	equal_window $COMPARE
	exit 0
fi
# REPLOT=1: draw the RocksDB plots of docs/BENCHMARKS.md from the samples
# kept in scripts/bench/results/waf-rocksdb and waf-rocksdb-held (see their
# READMEs), and stop.
if [ "${REPLOT:-0}" = 1 ]; then
	command -v gnuplot >/dev/null || die "REPLOT needs gnuplot (Debian: gnuplot-nox)"
	SAMPLES_DIR=$BENCH_ROOT/scripts/bench/results/waf-rocksdb
	WIN_DIR=$(mktemp -d)
	trap 'rm -rf "$WIN_DIR"' EXIT
	mkdir -p "$PLOT_DIR"
	plot "RocksDB fillrandom+overwrite, modelled 4G drive (op=7,ru=16M,handles=8, nodiscard)" waf-rocksdb-4g.png \
		4g-none:"no streams" 4g-rules:"WAL/SST rules" 4g-levels:"rules + level hints"
	plot "RocksDB fillrandom+overwrite, modelled 2G drive (op=7,ru=8M,handles=8, nodiscard)" waf-rocksdb-2g.png \
		2g-none:"no streams" 2g-rules:"WAL/SST rules" 2g-levels:"rules + level hints"
	plot "RocksDB fillrandom+overwrite, modelled 2G drive (op=7,ru=8M,handles=8, nodiscard, fstrim every 60s)" waf-rocksdb-2g-fstrim.png \
		2g-fstrim-none:"no streams" 2g-fstrim-levels:"rules + level hints"
	plot "RocksDB fillrandom+overwrite, modelled 2G drive (op=7,ru=8M,handles=8): online discard; persistent isolation" waf-rocksdb-2g-discard.png \
		2g-discard-none:"discard, no streams" 2g-discard-levels:"discard, rules + level hints" \
		2g-persistent-levels:"nodiscard, persistent, rules + level hints"
	# Near full with fillrandom: ENOSPC at 97% (results/waf-rocksdb-regime).
	SAMPLES_DIR=$BENCH_ROOT/scripts/bench/results/waf-rocksdb-regime
	plot "RocksDB fillrandom+overwrite, modelled 2G drive (op=7,ru=8M,handles=8, discard)" waf-rocksdb-regime.png \
		db-none:"no streams" db-levels:"rules + level hints"
	# The regime of docs/BENCHMARKS.md's current RocksDB result.
	SAMPLES_DIR=$BENCH_ROOT/scripts/bench/results/waf-rocksdb-held PLOT_FILL=1
	plot "RocksDB fillseq+overwrite held ~90% full, modelled 2G drive (op=7,ru=8M,handles=8, discard)" waf-rocksdb-held.png \
		db-none:"no streams" db-levels:"rules + level hints"
	exit 0
fi

# The tools this experiment needs beyond lib.sh's, from Debian.
install_missing db_bench:rocksdb-tools gnuplot:gnuplot-nox fio:fio jq:jq
# This script uses neither loopback daemon; lib.sh builds them unless set.
: "${LOOPBACK_BIN:=/bin/true}" "${STOCK_LOOPBACK_BIN:=/bin/true}"
export LOOPBACK_BIN STOCK_LOOPBACK_BIN
bench_init waf
# The background loops (sampler, fstrim, rolling writer) end with the script.
BG=()
# set +e: a loop that already ended (kill fails) or a failed run's status
# must not end the trap before cleanup unmounts and removes BENCH_DIR.
trap 'rc=$?; set +e; stop_sample; for p in "${BG[@]}"; do kill "$p" 2>/dev/null; done; (exit $rc); cleanup' EXIT
W=$BENCH_DIR
MNT=$W/mnt
IMG=$W/drive.img
SAMPLER=

# sample NAME: record "seconds host_bytes media_bytes fs_used fs_size db_bytes"
# every 2 s in the background until stop_sample (db_bytes: the apparent size
# of the database directory, if there is one).
sample() {
	local out=$BENCH_OUT/$1.samples errs=$BENCH_OUT/$1.model-errors t0=$SECONDS
	: >"$out"
	: >"$errs"
	(
		trap - EXIT INT TERM
		while :; do
			# A model error is kept beside the samples: phase_result
			# fails the run on it even if it has cleared since.
			"$STREAMFS_BIN" stats --json "$MNT" 2>/dev/null |
				jq -r --argjson t $((SECONDS - t0)) --arg df "$(df --output=used,size -B1 "$MNT" 2>/dev/null | tail -1)" \
					'"\($t) \(.fdp.host_bytes_written) \(.fdp.media_bytes_written) \($df) \(.fdp.model_error // "")"' |
				awk -v errs="$errs" -v db="$(du -sb "$MNT/db" 2>/dev/null | cut -f1)" \
					'NF > 5 { print > errs } { print $1, $2, $3, $4, $5, db + 0 }' >>"$out" || true
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

# model_ok NAME: numbers from a model that stopped counting, or whose state
# save failed, cannot be trusted; the experiment stops with the reason.
model_ok() {
	local e
	e=$("$STREAMFS_BIN" stats --json "$MNT" | jq -r '[.fdp_error, .fdp.model_error] | map(select(. != null and . != "")) | join("; ")')
	[ -z "$e" ] || die "$1: the drive model reports: $e"
	[ ! -s "$BENCH_OUT/$1.model-errors" ] || die "$1: the drive model reported during the run: $(tail -1 "$BENCH_OUT/$1.model-errors")"
}

# phase_result NAME "host0 media0": record the phase's WAF and per-handle
# WAF, from the counters at its start.
phase_result() {
	local name=$1 h0 m0 h1 m1
	model_ok "$name"
	read -r h0 m0 <<<"$2"
	read -r h1 m1 <<<"$(fdp_counters)"
	"$STREAMFS_BIN" stats --json "$MNT" >"$BENCH_OUT/$name.stats.json"
	RES[$name.waf]=$(awk -v a="$h0" -v b="$m0" -v c="$h1" -v d="$m1" 'BEGIN { printf "%.3f", (d - b) / (c - a) }')
	RES[$name.host]=$(awk -v a="$h0" -v c="$h1" 'BEGIN { printf "%.2f", (c - a) / 2^30 }')
	# steady: the last quarter of the phase's host bytes, from the samples
	RES[$name.steady]=$(awk -v h0="$h0" -v m0="$m0" -v h1="$h1" -v m1="$m1" '
		$2 >= h0 + 0.75 * (h1 - h0) && !s { hs = $2; ms = $3; s = 1 }
		END { if (s && h1 > hs) printf "%.3f", (m1 - ms) / (h1 - hs); else printf "nan" }' "$BENCH_OUT/$name.samples")
	RES[$name.handles]=$(jq -r '[.fdp.handles[] | select(.host_bytes_written > 0) | "h\(.stream)=\(.waf * 1000 | round / 1000)"] | join(" ")' "$BENCH_OUT/$name.stats.json")
	log "$name: phase WAF ${RES[$name.waf]} (steady ${RES[$name.steady]}) over ${RES[$name.host]} GiB host writes; cumulative handles: ${RES[$name.handles]}"
}

new_drive() { # SIZE FTL-SPEC|"" [TRACE-FILE] : a fresh image, modelled or plain
	rm -f "$IMG"
	if [ -n "${3:-}" ]; then
		rm -f "$3"
		"$STREAMFS_BIN" mkfs --size "$1" --ftl "$2" --ftl-trace "$3" "$IMG" >"$BENCH_OUT/mkfs.txt"
	elif [ -n "$2" ]; then
		"$STREAMFS_BIN" mkfs --size "$1" --ftl "$2" "$IMG" >"$BENCH_OUT/mkfs.txt"
	else
		"$STREAMFS_BIN" mkfs --size "$1" "$IMG" >"$BENCH_OUT/mkfs.txt"
	fi
}

# ---- fio: hot / cold / rolling ----
fio_run() { # NAME STREAMS(0|1) MODEL(0|1)
	local name=$1 streams=$2 model=$3 c0 roll rolled
	log "fio $name"
	new_drive "$DRIVE" "$([ "$model" = 1 ] && echo "$FTL")"
	mount_streamfs "$IMG" "$MNT" "$DISCARD" "$BENCH_OUT/$name.log"
	mkdir -p "$MNT/hot" "$MNT/cold" "$MNT/roll"
	if [ "$streams" = 1 ]; then
		"$STREAMFS_BIN" stream set "$MNT/hot" 1 >/dev/null
		"$STREAMFS_BIN" stream set "$MNT/cold" 2 >/dev/null
		"$STREAMFS_BIN" stream set "$MNT/roll" 3 >/dev/null
	fi
	[ "$model" = 1 ] && sample "$name"
	# Fill, all sequential: static cold files, the rolling files, the hot region.
	fio --name=cold --directory="$MNT/cold" --rw=write --bs=1M --direct=1 --nrfiles=2 \
		--size="$COLD" --ioengine=psync --fallocate=none --output="$BENCH_OUT/$name.fill-cold.json" --output-format=json
	for i in $(seq 1 "$ROLL_FILES"); do
		dd if=/dev/zero of="$MNT/roll/r$i" bs=1M count=$((${ROLL%M})) oflag=direct status=none
	done
	fio --name=hot --filename="$MNT/hot/hot.dat" --rw=write --bs=1M --direct=1 --size="$HOT" \
		--ioengine=psync --fallocate=none --output="$BENCH_OUT/$name.fill-hot.json" --output-format=json
	df -h "$MNT" | tail -1 >"$BENCH_OUT/$name.df"
	log "fill done: $(cat "$BENCH_OUT/$name.df")"
	[ "$model" = 1 ] && c0=$(fdp_counters)
	# Rolling files: delete one picked at random, write it again at
	# ROLL_RATE, all the time. Random, not oldest first: deleting in write
	# order frees whole units even when mixed with hot data, the one
	# pattern where mixing costs nothing. Each rewrite is counted.
	: >"$BENCH_OUT/$name.rolled"
	(
		trap - EXIT INT TERM
		while :; do
			i=$((RANDOM % ROLL_FILES + 1))
			rm -f "$MNT/roll/r$i"
			fio --name=roll --filename="$MNT/roll/r$i" --rw=write --bs=1M --direct=1 --size="$ROLL" \
				--ioengine=psync --fallocate=none --rate="$ROLL_RATE" >/dev/null 2>&1 &&
				echo "$i" >>"$BENCH_OUT/$name.rolled"
		done
	) &
	roll=$!
	BG+=("$roll")
	RUNTIME=1800 run_fio "$name" --name=hot --filename="$MNT/hot/hot.dat" --rw=randwrite \
		--bssplit=4k/20:16k/40:64k/40 --direct=1 --size="$HOT" --io_size="$HOT_IO" --ioengine=psync \
		--fallocate=none --randrepeat=0 --norandommap --rate="$HOT_RATE"
	kill "$roll" 2>/dev/null
	wait "$roll" 2>/dev/null || true
	rolled=$(wc -l <"$BENCH_OUT/$name.rolled")
	RES[$name.rollshare]=$(awk -v n="$rolled" -v f="${ROLL%M}" -v h="$(jq '.jobs[0].write.io_bytes' "$BENCH_OUT/$name.json")" \
		'BEGIN { r = n * f * 2^20; printf "%.2f", r / (r + h) }')
	RES[$name.rate]=$(jq '.jobs[0].write.bw_bytes / 1048576 | floor' "$BENCH_OUT/$name.json")
	if [ "$model" = 1 ]; then
		phase_result "$name" "$c0"
		stop_sample
	fi
	# Throughput, after the measured phase: the hot writer alone, unthrottled.
	run_fio "$name-kiops" --name=hot --filename="$MNT/hot/hot.dat" --rw=randwrite --bs=4k --direct=1 \
		--size="$HOT" --ioengine=psync --fallocate=none --randrepeat=0 --norandommap \
		--time_based --runtime="$RUNTIME"
	RES[$name.kiops]=$(awk -v i="$FIO_IOPS" 'BEGIN { printf "%.1f", i / 1000 }')
	log "$name: rolling share ${RES[$name.rollshare]}, hot ${RES[$name.rate]} MiB/s, then 4k ${RES[$name.kiops]} KIOPS alone"
	unmount "$MNT"
}

# ---- RocksDB ----
# pending_compaction_bytes limits: RocksDB slows, then stops, writes when
# compaction falls behind by this much. Its defaults (64/128 GiB) are meant
# for databases of terabytes; for one of 1 GiB on two busy cores the backlog
# grew to 0.9 GiB of dead versions (ENOSPC on a drive kept full). These
# limits scale them to the database.
# manual_wal_flush: RocksDB buffers the WAL (1 MiB) as a kernel page cache
# would; without it every ~1 KB put reaches the drive as a whole 4 KiB page
# through a FUSE daemon without a writeback cache.
DB_OPTS=(--key_size=16 --value_size="$VALUE" --compression_type=none --threads=1
	--write_buffer_size="$MEMTABLE" --target_file_size_base="$SST"
	--max_bytes_for_level_base="$L1" --max_background_jobs=2 --histogram=0
	--manual_wal_flush=1 --statistics=0 --seed=42 --stats_dump_period_sec=60 --level_compaction_dynamic_level_bytes="$DYNAMIC"
	--soft_pending_compaction_bytes_limit="$PENDING_SOFT" --hard_pending_compaction_bytes_limit="$PENDING_HARD"
	--level0_slowdown_writes_trigger="$L0_SLOWDOWN" --level0_stop_writes_trigger="$L0_STOP")
# INFO_LOG=stderr keeps RocksDB's info LOG off the filesystem (it grows
# without bound and, never deleted, is data of a lifetime of its own): the
# lines go to the run's .txt files instead.
[ "$INFO_LOG" = stderr ] && DB_OPTS+=(--use_stderr_info_logger=1)

RWHINT=
db_run() { # NAME MODE(none|rules|levels) MODEL(0|1)
	# commit=1: space of deleted tables is reusable once its free is
	# committed; compaction needs it back quickly on a full drive.
	local name=$1 mode=$2 model=$3 c0 opts=$DB_DISCARD,commit=1 t0 pre=() rc=0 trim= trace=
	log "rocksdb $name"
	if [ "$model" = 1 ] && [ "$TRACE" = 1 ]; then
		trace=$BENCH_OUT/$name.trace
		opts="$opts,ftl_trace=$trace"
	fi
	new_drive "$DB_DRIVE" "$([ "$model" = 1 ] && echo "$DB_FTL")" "$trace"
	[ "$mode" != none ] && opts="$opts,stream_rules=*.log:1;*.sst:2;MANIFEST-*:6"
	[ "$mode" = levels ] && pre=(env LD_PRELOAD="$RWHINT")
	mount_streamfs "$IMG" "$MNT" "$opts" "$BENCH_OUT/$name.log"
	mkdir -p "$MNT/ballast" "$MNT/db"
	[ "$mode" != none ] && "$STREAMFS_BIN" stream set "$MNT/ballast" 7 >/dev/null
	[ "$model" = 1 ] && sample "$name"
	dd if=/dev/zero of="$MNT/ballast/b" bs=1M count=$((${BALLAST%M})) oflag=direct status=none
	t0=$SECONDS
	"${pre[@]}" db_bench --benchmarks="$DB_FILL" --num="$KEYS" --db="$MNT/db" "${DB_OPTS[@]}" \
		>"$BENCH_OUT/$name.fill.txt" 2>&1 || die "db_bench $DB_FILL failed; see $BENCH_OUT/$name.fill.txt"
	df -h "$MNT" | tail -1 >"$BENCH_OUT/$name.df"
	log "fill done in $((SECONDS - t0)) s: $(cat "$BENCH_OUT/$name.df")"
	RES[$name.fillkops]=$(awk -v b="$DB_FILL" '$1 == b { for (i = 1; i <= NF; i++) if ($(i+1) == "ops/sec") { printf "%.1f", $i / 1000; exit } }' "$BENCH_OUT/$name.fill.txt")
	[ "$model" = 1 ] && c0=$(fdp_counters)
	t0=$SECONDS
	if [ "$TRIM_EVERY" -gt 0 ]; then
		# A periodic fstrim (a timer, as distributions ship it), scaled to
		# the run: it tells the drive which blocks the filesystem freed.
		(
			trap - EXIT INT TERM
			while sleep "$TRIM_EVERY"; do
				fstrim "$MNT" 2>>"$BENCH_OUT/$name.fstrim" || true
				echo "$((SECONDS - t0))" >>"$BENCH_OUT/$name.fstrim"
			done
		) &
		trim=$!
		BG+=("$trim")
	fi
	"${pre[@]}" db_bench --benchmarks=overwrite --use_existing_db=1 --num="$KEYS" \
		--writes="$(awk -v k="$KEYS" -v o="$OVERWRITES" 'BEGIN { printf "%d", k * o }')" \
		--db="$MNT/db" "${DB_OPTS[@]}" >"$BENCH_OUT/$name.overwrite.txt" 2>&1 || rc=$?
	[ "$rc" = 0 ] || log "db_bench overwrite exited with status $rc: $(grep -ao 'finished [0-9]* ops' "$BENCH_OUT/$name.overwrite.txt" | tail -1)"
	if [ -n "$trim" ]; then
		kill "$trim" 2>/dev/null || true
		wait "$trim" 2>/dev/null || true
	fi
	RES[$name.overwrite_rc]=$rc
	RES[$name.secs]=$((SECONDS - t0))
	RES[$name.kops]=$(awk '/^overwrite/ { for (i = 1; i <= NF; i++) if ($(i+1) == "ops/sec") { printf "%.1f", $i / 1000; exit } }' "$BENCH_OUT/$name.overwrite.txt")
	df -h "$MNT" | tail -1 >>"$BENCH_OUT/$name.df"
	# RocksDB's last per-level compaction table (bytes written per level,
	# since the overwrite's open): what lifetimes the host bytes have.
	awk '/Compaction Stats \[default\]/ { n = 0; blk = "" } { if (n < 12) { blk = blk $0 "\n"; n++ } }
		/^ Sum / && n { last = blk } END { printf "%s", last }' \
		"$([ "$INFO_LOG" = stderr ] && echo "$BENCH_OUT/$name.overwrite.txt" || echo "$MNT/db/LOG")" >"$BENCH_OUT/$name.levels" 2>/dev/null || true
	log "overwrite: ${RES[$name.kops]} Kops/s in ${RES[$name.secs]} s"
	if [ "$model" = 1 ]; then
		phase_result "$name" "$c0"
		stop_sample
	fi
	unmount "$MNT"
	if [ -n "$trace" ]; then
		# The same run on the same drive as if mounted without discard
		# (whole run, from mkfs on; the live whole-run WAF beside it).
		RES[$name.replay_waf]=$("$STREAMFS_BIN" waf replay --ftl "$DB_FTL" --json "$trace" | jq '.waf * 1000 | round / 1000')
		"$STREAMFS_BIN" waf replay --ftl "$DB_FTL" --no-discard --interval 64M --json "$trace" >"$BENCH_OUT/$name.nodiscard.json"
		RES[$name.nodiscard_waf]=$(jq '.waf * 1000 | round / 1000' "$BENCH_OUT/$name.nodiscard.json")
		log "$name: whole run replayed ${RES[$name.replay_waf]}, without discard ${RES[$name.nodiscard_waf]}"
	fi
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

if [[ " $RUNS " == *" rocksdb "* || " $RUNS " == *" plain "* ]] && [[ " $DB_MODES " == *" levels "* ]]; then
	need cc
	RWHINT=$BENCH_OUT/rwhint.so
	cc -O2 -Wall -shared -fPIC -o "$RWHINT" "$BENCH_ROOT/scripts/bench/rwhint.c" -ldl
fi

for r in $RUNS; do
	case $r in
	fio)
		fio_run fio-nostreams 0 1
		fio_run fio-streams 1 1
		;;
	rocksdb)
		for m in $DB_MODES; do db_run "db-$m" "$m" 1; done
		;;
	w1)
		w1_run w1-plain ""
		w1_run w1-ftl "$W1_FTL"
		w1_run w1-plain2 ""
		w1_run w1-ftl2 "$W1_FTL"
		;;
	plain)
		fio_run fio-plain 1 0
		db_run db-plain "${DB_MODES##* }" 0
		;;
	*) die "unknown run $r" ;;
	esac
done

# ---- plots ----
SAMPLES_DIR=$BENCH_OUT WIN_DIR=$BENCH_OUT
mkdir -p "$PLOT_DIR"
plot "fio hot/cold/rolling, modelled $DRIVE drive ($FTL, $DISCARD)" waf-fio.png \
	fio-nostreams:"no streams" fio-streams:"streams"
trims=
if [ "$TRIM_EVERY" -gt 0 ]; then trims=", fstrim every ${TRIM_EVERY}s"; fi
plot "RocksDB $DB_FILL+overwrite, modelled $DB_DRIVE drive ($DB_FTL, $DB_DISCARD$trims)" "waf-rocksdb$TAG.png" \
	db-none:"no streams" db-rules:"WAL/SST rules" db-levels:"rules + level hints"

# ---- summary ----
{
	echo "# waf.sh $(date -u +%F) $DISCARD DRIVE=$DRIVE FTL=$FTL HOT=$HOT COLD=$COLD ROLL=${ROLL_FILES}x$ROLL HOT_IO=$HOT_IO HOT_RATE=$HOT_RATE ROLL_RATE=$ROLL_RATE DB_DRIVE=$DB_DRIVE DB_FTL=$DB_FTL DB_DISCARD=$DB_DISCARD TRIM_EVERY=$TRIM_EVERY DYNAMIC=$DYNAMIC BALLAST=$BALLAST KEYS=$KEYS VALUE=$VALUE OVERWRITES=$OVERWRITES SST=$SST MEMTABLE=$MEMTABLE L1=$L1 DB_FILL=$DB_FILL PENDING_SOFT=$PENDING_SOFT PENDING_HARD=$PENDING_HARD L0_SLOWDOWN=$L0_SLOWDOWN L0_STOP=$L0_STOP INFO_LOG=$INFO_LOG REGIME=$REGIME REGIME_FROM=$REGIME_FROM"
	for k in $(printf '%s\n' "${!RES[@]}" | sort); do echo "$k ${RES[$k]}"; done
	ratio() { # LABEL BASE OTHER
		local a=${RES[$2.waf]:-} b=${RES[$3.waf]:-} sa=${RES[$2.steady]:-} sb=${RES[$3.steady]:-}
		[ -n "$a" ] && [ -n "$b" ] || return 0
		echo "$1.ratio $(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", b / a }') steady $(awk -v a="$sa" -v b="$sb" 'BEGIN { if (a > 0) printf "%.3f", b / a; else print "nan" }')"
	}
	ratio fio fio-nostreams fio-streams
	ratio db-rules db-none db-rules
	ratio db-levels db-none db-levels
	for m in rules levels; do
		if [ ! -s "$BENCH_OUT/db-none.samples" ] || [ ! -s "$BENCH_OUT/db-$m.samples" ]; then continue; fi
		eq=$(equal_window "$BENCH_OUT/db-none.samples" "$BENCH_OUT/db-$m.samples")
		echo "db-$m.equal_fill $eq"
		# The same window of the replays without discard.
		read -r h0 h1 <<<"${eq##* bytes }"
		if [ -s "$BENCH_OUT/db-none.nodiscard.json" ] && [ -s "$BENCH_OUT/db-$m.nodiscard.json" ] && [[ $eq == *" bytes "* ]]; then
			echo "db-$m.equal_fill_nodiscard $(replay_window "$BENCH_OUT/db-none.nodiscard.json" "$h0" "$h1") $(replay_window "$BENCH_OUT/db-$m.nodiscard.json" "$h0" "$h1")" |
				awk '{ printf "%s none %s, %s; ratio %.3f\n", $1, $2, $3, $3 / $2 }'
		fi
	done
} | tee "$BENCH_OUT/summary.txt"
