#!/usr/bin/env bash
# streamfs on an emulated zoned device (mkfs --zoned): three experiments,
# each run on a fresh image.
#
#   seed      seed 2's workload (XFS's inode-to-zone cache: 16 writers to
#             different files, 8 KiB random writes, queue depth 4, libaio +
#             O_DIRECT), scaled: SEED_JOBS files of SEED_FILE each on a
#             SEED_IMG image (SEED_ZONED), written sequentially first, then
#             overwritten at random for SEED_RUNTIME s. Cache on against
#             cache off (-o placement_cache=on|off), ROUNDS rounds, the
#             order alternating per round. Per run: write IOPS, the daemon's
#             CPU per write, and from stats (zones) the bytes written and
#             reclaimed in the random phase, cache hits/misses/stale; after
#             it, from bmap, how many files share each zone and how many
#             zones each file's data is in. PROFILE=1: each seed run's
#             daemon writes a Go CPU profile (NAME.pprof, its whole life:
#             fill and random phase), and where perf is installed the
#             random phase is also recorded with call graphs, kernel
#             included (NAME.perf.data); NAME.pprof.txt has the top
#             functions by cumulative time, NAME.perf.txt the phase's
#             samples split into reclaim, write path, FUSE transport.
#   hotcold   hot/cold mix as waf.sh runs it for FDP: a hot file (HOT)
#             overwritten at random (4-64 KiB) at HOT_RATE until HOT_IO, and,
#             at the same time, cold files written once at COLD_RATE (COLD
#             in all), each group in its own directory; with streams (hot 1,
#             cold 2, set on the directories) and without. Filesystem write
#             amplification of the phase: (written + reclaimed) / written,
#             from stats. ROUNDS rounds, alternating.
#             With ROLL_FILES > 0 the device is held nearly full as waf.sh
#             holds its drive: the cold files (COLD) are written before the
#             phase and stay, ROLL_FILES files of ROLL (stream 3 with
#             streams) are written too, and during the phase one picked at
#             random is deleted and written again at ROLL_RATE, all the
#             time; the fill is sampled every 2 s (NAME.fill: min-max %).
#   verify    overwrite-heavy runs on a VERIFY_IMG image until reclaim has
#             cycled the device CYCLES times: fio random writes with crc32c
#             verify (verified again after a remount); SQLite updates
#             compared with the same script run on tmpfs; pgbench (when
#             PostgreSQL is installed) with its balance invariants checked
#             after the run and after a remount. `streamfs fsck -n` after
#             every run of every experiment; the script fails (after its
#             summary) when one is not clean.
#
# Speeds are only compared within one run (ratios): the machine may be
# shared; the spread over the rounds is reported.
#
# Usage: sudo scripts/bench/zoned.sh
# Environment (besides lib.sh's BENCH_DIR, BENCH_OUT, STREAMFS_BIN):
#   RUNS="seed hotcold verify"  ROUNDS=3
#   SEED_IMG=1G SEED_ZONED=zone=16M,conv=4,max_open=14,max_active=14
#   SEED_JOBS=16 SEED_FILE=40M SEED_RUNTIME=20
#   HC_IMG=1G HC_ZONED=zone=16M,conv=4,max_open=14,max_active=14
#   HOT=150M HOT_IO=2G HOT_RATE=40m COLD=450M COLD_FILE=10M COLD_RATE=10m
#   ROLL_FILES=0 ROLL=48M ROLL_RATE=27m (held full, as waf.sh; e.g. HOT=96M
#   COLD=150M ROLL_FILES=12: 85-92% of a 1G image)
#   VERIFY_IMG=512M VERIFY_ZONED=zone=8M,conv=4,max_open=14,max_active=14
#   CYCLES=4 (device capacities written per verify run)
#   PG_SCALE=10 (pgbench -s)
#   PROFILE=0 (1: CPU profiles of the seed runs' daemons)
#   PLOTS=docs/img (relative to the checkout)  TAG= (suffix of the chart's
#   file name: zoned$TAG.png)  REPLOT=SUMMARY (only redraw the chart from a
#   kept summary.txt; no runs)  RESULTS= (also copy the
#   summary and raw files there)
source "$(dirname "$0")/lib.sh"

RUNS=${RUNS:-seed hotcold verify}
ROUNDS=${ROUNDS:-3}
SEED_IMG=${SEED_IMG:-1G}
SEED_ZONED=${SEED_ZONED:-zone=16M,conv=4,max_open=14,max_active=14}
SEED_JOBS=${SEED_JOBS:-16}
SEED_FILE=${SEED_FILE:-40M}
SEED_RUNTIME=${SEED_RUNTIME:-20}
HC_IMG=${HC_IMG:-1G}
HC_ZONED=${HC_ZONED:-zone=16M,conv=4,max_open=14,max_active=14}
HOT=${HOT:-150M}
HOT_IO=${HOT_IO:-2G}
HOT_RATE=${HOT_RATE:-40m}
COLD=${COLD:-450M}
COLD_FILE=${COLD_FILE:-10M}
COLD_RATE=${COLD_RATE:-10m}
ROLL_FILES=${ROLL_FILES:-0}
ROLL=${ROLL:-48M}
ROLL_RATE=${ROLL_RATE:-27m}
VERIFY_IMG=${VERIFY_IMG:-512M}
VERIFY_ZONED=${VERIFY_ZONED:-zone=8M,conv=4,max_open=14,max_active=14}
CYCLES=${CYCLES:-4}
PG_SCALE=${PG_SCALE:-10}
PROFILE=${PROFILE:-0}
PLOTS=${PLOTS:-docs/img}
TAG=${TAG:-}
REPLOT=${REPLOT:-}
RESULTS=${RESULTS:-}

PLOT_DIR=$PLOTS
[[ $PLOT_DIR == /* ]] || PLOT_DIR=$BENCH_ROOT/$PLOTS

# chart SUMMARY: the per-round chart ($PLOT_DIR/zoned$TAG.png) from a
# summary.txt, one panel per measure the summary has: throughput on/off
# (KIOPS) and reclaim per byte written on/off of the seed runs, write
# amplification none/streams of the hot/cold runs.
chart() {
	local sum=$1 dat rounds panels=() n fill= day
	grep -q '^seed-[0-9]*.ratio\|^hc-[0-9]*.ratio' "$sum" || return 0
	dat=$(mktemp)
	rounds=$(mktemp)
	awk '$1 ~ /^seed-(on|off)-[0-9]+\.kiops$/ || $1 ~ /^seed-(on|off)-[0-9]+\.reclaim_per_written$/ || $1 ~ /^hc-(none|streams)-[0-9]+\.wa$/ { print $1, $2 }' \
		"$sum" >"$dat"
	# "-" for a measure the summary lacks, so the columns stay in place.
	awk '{ split($1, p, "."); n = split(p[1], q, "-"); r = q[n]; k = q[1] "-" q[2] "." p[2]; v[r, k] = $2; if (r > R) R = r }
		function f(x) { return x == "" ? "-" : x }
		END { for (r = 1; r <= R; r++) printf "%d %s %s %s %s %s %s\n", r,
			f(v[r, "seed-on.kiops"]), f(v[r, "seed-off.kiops"]), f(v[r, "seed-on.reclaim_per_written"]), f(v[r, "seed-off.reclaim_per_written"]),
			f(v[r, "hc-none.wa"]), f(v[r, "hc-streams.wa"]) }' "$dat" >"$rounds"
	[ -z "${BENCH_OUT:-}" ] || cp "$rounds" "$BENCH_OUT/chart.rounds"
	if grep -q '^seed-[0-9]*.ratio' "$sum"; then
		panels+=("set title \"seed 2 workload: 8 KiB random writes, QD4, $SEED_JOBS files\"; set ylabel \"KIOPS\"
			plot \"$rounds\" using 2:xtic(1) title \"cache on\", \"\" using 3 title \"cache off\"")
		panels+=("set title \"seed 2 workload: reclaimed / written\"; set ylabel \"bytes reclaimed per byte written\"
			plot \"$rounds\" using 4:xtic(1) title \"cache on\", \"\" using 5 title \"cache off\"")
	fi
	if grep -q '^hc-[0-9]*.ratio' "$sum"; then
		# Held full (ROLL_FILES > 0): the fill range of the runs in the title.
		fill=$(awk '$1 ~ /^hc-(none|streams)-[0-9]+\.fill$/ { split($2, a, /[-%]/); if (lo == "" || a[1] < lo) lo = a[1]; if (a[2] > hi) hi = a[2] }
			END { if (lo != "") printf ", %d-%d%% full", lo, hi }' "$sum")
		panels+=("set title \"hot/cold mix: filesystem write amplification$fill\"; set ylabel \"(written + reclaimed) / written\"
			plot \"$rounds\" using 6:xtic(1) title \"no streams\", \"\" using 7 title \"streams\"")
	fi
	n=${#panels[@]}
	day=$(sed -n '1s/^# zoned.sh \([0-9-]*\).*/\1/p' "$sum")
	mkdir -p "$PLOT_DIR"
	{
		echo "set terminal pngcairo size $((n > 1 ? 400 * n : 640)),400 font \",10\""
		echo "set output \"$PLOT_DIR/zoned$TAG.png\""
		echo "set multiplot layout 1,$n title \"streamfs on an emulated zoned device (${day:+$day, }per round)\""
		echo "set style data histograms; set style histogram clustered gap 1; set style fill solid 0.8 border -1"
		echo "set key top left; set yrange [0:*]; set xlabel \"round\"; set datafile missing \"-\""
		printf '%s\n' "${panels[@]}"
		echo "unset multiplot"
	} | gnuplot
	rm -f "$dat" "$rounds"
	log "wrote $PLOT_DIR/zoned$TAG.png"
}

if [ -n "$REPLOT" ]; then
	chart "$REPLOT"
	exit 0
fi

# The tools beyond lib.sh's, from Debian.
install_missing gnuplot:gnuplot-nox fio:fio jq:jq sqlite3:sqlite3
# This script uses neither loopback daemon; lib.sh builds them unless set.
: "${LOOPBACK_BIN:=/bin/true}" "${STOCK_LOOPBACK_BIN:=/bin/true}"
export LOOPBACK_BIN STOCK_LOOPBACK_BIN
bench_init zoned
BG=()
trap 'rc=$?; set +e; for p in "${BG[@]}"; do kill "$p" 2>/dev/null; done; (exit $rc); cleanup' EXIT
MNT=$BENCH_DIR/mnt
IMG=$BENCH_DIR/zoned.img
declare -A RES

# bytes SIZE: SIZE with a K/M/G suffix in bytes.
bytes() { numfmt --from=iec "$1"; }

# zone_blocks SPEC: the zone size of a --zoned SPEC in 4 KiB blocks.
zone_blocks() {
	echo $(($(bytes "$(sed -n 's/.*zone=\([^,]*\).*/\1/p' <<<"$1")") / 4096))
}

new_zoned() { # SIZE SPEC
	rm -f "$IMG"
	"$STREAMFS_BIN" mkfs --size "$1" --zoned "$2" "$IMG" >"$BENCH_OUT/mkfs.txt"
}

# zstats: "written reclaimed" (bytes, since mount) from stats.
zstats() {
	"$STREAMFS_BIN" stats --json "$MNT" | jq -r '"\(.zones.written_bytes) \(.zones.reclaimed_bytes)"'
}

# fsck_n NAME: streamfs fsck -n on the unmounted image; records its status
# and keeps its output. A run whose image is not clean fails the script at
# the end (after the summary, so the other runs' results are kept).
FSCK_BAD=()
fsck_n() {
	local rc=0
	"$STREAMFS_BIN" fsck -n "$IMG" >"$BENCH_OUT/$1.fsck" 2>&1 || rc=$?
	RES[$1.fsck]="rc=$rc $(grep -c -i -E 'error|leaked|corrupt' "$BENCH_OUT/$1.fsck" || true) problem-lines"
	log "$1: fsck -n: ${RES[$1.fsck]}"
	[ "$rc" = 0 ] || FSCK_BAD+=("$1")
}

# placement NAME ZONE_BLOCKS DIR: from bmap, the mean number of files with
# data in a zone (over zones holding file data) and the mean number of
# zones a file's data is in.
placement() {
	local name=$1 zb=$2 dir=$3 f
	for f in "$dir"/*; do
		[ -f "$f" ] || continue
		"$STREAMFS_BIN" bmap --json "$f" | jq -r --arg f "${f##*/}" --argjson zb "$zb" \
			'.extents[] | "\($f) \((.block / $zb) | floor) \(((.block + .length / 4096 - 1) / $zb) | floor)"'
	done | awk '{ for (z = $2; z <= $3; z++) { fz[$1 " " z] = 1 } }
		END { for (k in fz) { split(k, a, " "); nf[a[2]]++; nz[a[1]]++ }
			for (z in nf) { zs++; fs += nf[z] } for (f in nz) { fn++; zn += nz[f] }
			printf "%.1f %.1f\n", fs / zs, zn / fn }' >"$BENCH_OUT/$name.placement"
	read -r RES[$name.files_per_zone] RES[$name.zones_per_file] <"$BENCH_OUT/$name.placement"
}

# perf_split DATA: shares of the daemon's CPU samples in a perf record of
# the random phase, by the frames on each sample's stack (a sample counts
# for every row whose frames it has): reclaim and its parts (the scan of
# every extent, the copy, the new mapping, the commit), the write path and
# its parts, the FUSE transport (the request loop outside the write path:
# reading requests, writing replies), the Go runtime.
perf_split() {
	perf script -i "$1" -F ip,sym 2>/dev/null | awk '
		function has(k) { return index(st, k) > 0 }
		function add(name, c) { order[name] = order[name] ? order[name] : ++no; if (c) n[name]++ }
		function flush() {
			if (st == "") return
			tot++
			r = has("Store).reclaimOnce"); w = has("Store).Write"); l = has("Server).loop")
			add("reclaim (reclaimOnce)", r)
			add("  scan of all extents (eachDataExtent)", r && has("eachDataExtent"))
			add("  copy: read + append (zoneCopy)", r && has("zoneCopy"))
			add("  new mapping (mapLocked)", r && has("mapLocked"))
			add("  commit (wal Sync)", r && has("Log).Sync"))
			add("write path (Store.Write)", w)
			add("  data append (zoneAppend)", w && has("zoneAppend"))
			add("  extent tree (mapLocked)", w && has("mapLocked"))
			add("  zone allocator (zoneAlloc)", w && has("zoneAlloc"))
			add("FUSE transport (request loop minus Store.Write)", l && !w)
			add("  reading requests (readRequest)", has("readRequest") && !has("handleRequest"))
			add("  writing replies (fuseFD.write)", has("fuseFD).write"))
			add("    kernel: completing the request (fuse_request_end)", has("fuseFD).write") && has("fuse_request_end"))
			add("Go runtime and the rest", !r && !l)
			add("  goroutine stack growth (morestack)", has("runtime.morestack"))
			add("all pwrite to the image", has("sys_pwrite64"))
			st = ""
		}
		/^[^ \t]/ || /^$/ { flush(); next }
		{ st = st "|" $0 }
		END {
			flush()
			printf "%d samples\n", tot
			for (k in order) o[order[k]] = k
			for (i = 1; i <= no; i++) printf "%5.1f%%  %s\n", 100 * n[o[i]] / tot, o[i]
		}'
}

# ---- seed 2: inode-to-zone cache on/off ----
seed_run() { # NAME on|off
	local name=$1 cache=$2 w0 r0 w1 r1 t0 pid zb prof= perf=
	log "seed $name (cache $cache)"
	new_zoned "$SEED_IMG" "$SEED_ZONED"
	[ "$PROFILE" = 1 ] && prof=$BENCH_OUT/$name.pprof
	mount_streamfs "$IMG" "$MNT" "placement_cache=$cache" "$BENCH_OUT/$name.log" "$prof"
	pid=${DAEMON_PID[$MNT]}
	# The files, written sequentially, then the measured random phase.
	fio --name=seed --directory="$MNT" --rw=write --bs=1M --direct=1 --ioengine=psync \
		--numjobs="$SEED_JOBS" --size="$SEED_FILE" --fallocate=none \
		--output="$BENCH_OUT/$name.fill.json" --output-format=json >/dev/null
	read -r w0 r0 <<<"$(zstats)"
	t0=$(cpu_ticks "$pid")
	if [ "$PROFILE" = 1 ] && command -v perf >/dev/null; then
		perf record -q -g -p "$pid" -o "$BENCH_OUT/$name.perf.data" -- sleep "$SEED_RUNTIME" 2>"$BENCH_OUT/$name.perf.log" &
		perf=$!
	fi
	RUNTIME=$SEED_RUNTIME run_fio "$name" --name=seed --directory="$MNT" --rw=randwrite --bs=8k \
		--iodepth=4 --ioengine=libaio --direct=1 --numjobs="$SEED_JOBS" --size="$SEED_FILE" \
		--fallocate=none --randrepeat=0 --norandommap --time_based --runtime="$SEED_RUNTIME" --group_reporting
	RES[$name.cpu_us]=$(cpu_us_per_write "$name" $(($(cpu_ticks "$pid") - t0)))
	"$STREAMFS_BIN" stats --json "$MNT" >"$BENCH_OUT/$name.stats.json"
	read -r w1 r1 <<<"$(zstats)"
	RES[$name.kiops]=$(awk -v i="$FIO_IOPS" 'BEGIN { printf "%.2f", i / 1000 }')
	RES[$name.written_mib]=$(((w1 - w0) >> 20))
	RES[$name.reclaimed_mib]=$(((r1 - r0) >> 20))
	RES[$name.wa]=$(awk -v w="$((w1 - w0))" -v r="$((r1 - r0))" 'BEGIN { printf "%.3f", (w + r) / w }')
	# Reclaim bytes per byte written: the runs write different amounts.
	RES[$name.reclaim_per_written]=$(awk -v w="$((w1 - w0))" -v r="$((r1 - r0))" 'BEGIN { printf "%.3f", r / w }')
	RES[$name.cache]=$(jq -r '.zones.alloc | "hits=\(.cache_hits) misses=\(.cache_misses) stale=\(.cache_stale) waits=\(.waits)"' "$BENCH_OUT/$name.stats.json")
	placement "$name" "$(zone_blocks "$SEED_ZONED")" "$MNT"
	log "$name: ${RES[$name.kiops]} KIOPS, ${RES[$name.cpu_us]} us CPU/write, written ${RES[$name.written_mib]} MiB, reclaimed ${RES[$name.reclaimed_mib]} MiB (WA ${RES[$name.wa]}), ${RES[$name.cache]}, files/zone ${RES[$name.files_per_zone]}, zones/file ${RES[$name.zones_per_file]}"
	if [ -n "$perf" ]; then
		if wait "$perf"; then
			perf_split "$BENCH_OUT/$name.perf.data" >"$BENCH_OUT/$name.perf.txt"
		else
			log "$name: perf record failed; see $BENCH_OUT/$name.perf.log"
		fi
	fi
	unmount "$MNT"
	if [ -n "$prof" ] && [ -s "$prof" ]; then
		go tool pprof -top -cum -nodecount=40 "$STREAMFS_BIN" "$prof" >"$prof.txt" 2>&1 || true
	fi
	fsck_n "$name"
}

# ---- hot/cold ----
hotcold_run() { # NAME STREAMS(0|1)
	local name=$1 streams=$2 w0 r0 w1 r1 cold n stop sampler= i
	log "hotcold $name"
	new_zoned "$HC_IMG" "$HC_ZONED"
	mount_streamfs "$IMG" "$MNT" "" "$BENCH_OUT/$name.log"
	mkdir -p "$MNT/hot" "$MNT/cold" "$MNT/roll"
	if [ "$streams" = 1 ]; then
		"$STREAMFS_BIN" stream set "$MNT/hot" 1 >/dev/null
		"$STREAMFS_BIN" stream set "$MNT/cold" 2 >/dev/null
		"$STREAMFS_BIN" stream set "$MNT/roll" 3 >/dev/null
	fi
	n=$(($(bytes "$COLD") / $(bytes "$COLD_FILE")))
	if [ "$ROLL_FILES" -gt 0 ]; then
		# Held full: the static cold files and the rolling files first.
		fio --name=cold --directory="$MNT/cold" --rw=write --bs=1M --direct=1 --nrfiles="$n" \
			--size="$COLD" --ioengine=psync --fallocate=none --output="$BENCH_OUT/$name.fill-cold.json" --output-format=json >/dev/null
		for i in $(seq 1 "$ROLL_FILES"); do
			fio --name=roll --filename="$MNT/roll/r$i" --rw=write --bs=1M --direct=1 --size="$ROLL" \
				--ioengine=psync --fallocate=none >/dev/null
		done
	fi
	fio --name=hot --filename="$MNT/hot/hot.dat" --rw=write --bs=1M --direct=1 --size="$HOT" \
		--ioengine=psync --fallocate=none --output="$BENCH_OUT/$name.fill-hot.json" --output-format=json >/dev/null
	read -r w0 r0 <<<"$(zstats)"
	stop=$BENCH_DIR/$name.stop
	rm -f "$stop"
	if [ "$ROLL_FILES" -gt 0 ]; then
		# Rolling files: one picked at random deleted and written again, all
		# the time, until the hot writer is done (the file in hand is
		# finished, so every rewrite is whole and counted).
		: >"$BENCH_OUT/$name.rolled"
		(
			trap - EXIT INT TERM
			while [ ! -e "$stop" ]; do
				i=$((RANDOM % ROLL_FILES + 1))
				rm -f "$MNT/roll/r$i"
				fio --name=roll --filename="$MNT/roll/r$i" --rw=write --bs=1M --direct=1 --size="$ROLL" \
					--ioengine=psync --fallocate=none --rate="$ROLL_RATE" >/dev/null 2>&1 || exit 1
				echo "$i" >>"$BENCH_OUT/$name.rolled"
			done
		) &
		cold=$!
		(
			trap - EXIT INT TERM
			while [ ! -e "$stop" ]; do
				df --output=pcent "$MNT" | tail -1 | tr -dc 0-9
				echo
				sleep 2
			done
		) >"$BENCH_OUT/$name.fill" &
		sampler=$!
		BG+=("$sampler")
	else
		# Cold files, each written once, at COLD_RATE, while the hot file is
		# overwritten: both kinds of data reach the open zones at once.
		(
			trap - EXIT INT TERM
			for i in $(seq 1 "$n"); do
				fio --name=cold --filename="$MNT/cold/c$i" --rw=write --bs=64k --direct=1 --size="$COLD_FILE" \
					--ioengine=psync --fallocate=none --rate="$COLD_RATE" >/dev/null 2>&1 || exit 1
			done
		) &
		cold=$!
	fi
	BG+=("$cold")
	RUNTIME=1800 run_fio "$name" --name=hot --filename="$MNT/hot/hot.dat" --rw=randwrite \
		--bssplit=4k/20:16k/40:64k/40 --direct=1 --size="$HOT" --io_size="$HOT_IO" --ioengine=psync \
		--fallocate=none --randrepeat=0 --norandommap --rate="$HOT_RATE"
	touch "$stop"
	wait "$cold" || die "$name: a cold or rolling writer failed"
	if [ "$ROLL_FILES" -gt 0 ]; then
		wait "$sampler" 2>/dev/null || true
		RES[$name.fill]=$(sort -n "$BENCH_OUT/$name.fill" | sed -n '1p;$p' | paste -sd- | sed 's/$/%/')
		RES[$name.rolled_mib]=$(($(wc -l <"$BENCH_OUT/$name.rolled") * $(bytes "$ROLL") >> 20))
	fi
	"$STREAMFS_BIN" stats --json "$MNT" >"$BENCH_OUT/$name.stats.json"
	read -r w1 r1 <<<"$(zstats)"
	df -h "$MNT" | tail -1 >"$BENCH_OUT/$name.df"
	RES[$name.written_mib]=$(((w1 - w0) >> 20))
	RES[$name.reclaimed_mib]=$(((r1 - r0) >> 20))
	RES[$name.wa]=$(awk -v w="$((w1 - w0))" -v r="$((r1 - r0))" 'BEGIN { printf "%.3f", (w + r) / w }')
	RES[$name.streams]=$(jq -r '[.zones.streams | to_entries[] | "s\(.key): \(.value.written_bytes / 1048576 | floor) MiB written, \(.value.reclaimed_bytes / 1048576 | floor) reclaimed"] | join("; ")' "$BENCH_OUT/$name.stats.json")
	log "$name: WA ${RES[$name.wa]}: written ${RES[$name.written_mib]} MiB, reclaimed ${RES[$name.reclaimed_mib]} MiB (since mount: ${RES[$name.streams]}); $(cat "$BENCH_OUT/$name.df")${RES[$name.fill]:+; fill ${RES[$name.fill]}, rolled ${RES[$name.rolled_mib]} MiB}"
	unmount "$MNT"
	fsck_n "$name"
}

# ---- overwrite-heavy runs with verification ----
# cycled NAME W0 R0: device capacities written (and reclaim passes) since the counters W0 R0.
cycled() {
	local w r cap
	read -r w r <<<"$(zstats)"
	cap=$("$STREAMFS_BIN" stats --json "$MNT" | jq '.zones.space.total * 4096')
	RES[$1.cycles]=$(awk -v w="$((w + r - $2 - $3))" -v c="$cap" 'BEGIN { printf "%.1f", w / c }')
	RES[$1.resets]=$("$STREAMFS_BIN" stats --json "$MNT" | jq '.zones.reclaim_resets')
	RES[$1.wa]=$(awk -v w="$((w - $2))" -v r="$((r - $3))" 'BEGIN { printf "%.3f", (w + r) / w }')
}

remount() { # NAME [OPTS]
	unmount "$MNT"
	mount_streamfs "$IMG" "$MNT" "${2:-}" "$BENCH_OUT/$1.log2"
}

verify_fio() {
	local name=verify-fio cap size io
	new_zoned "$VERIFY_IMG" "$VERIFY_ZONED"
	mount_streamfs "$IMG" "$MNT" "" "$BENCH_OUT/$name.log"
	cap=$("$STREAMFS_BIN" stats --json "$MNT" | jq '.zones.space.total * 4096')
	# Files of 60% of the device, overwritten CYCLES capacities' worth.
	size=$((cap * 6 / 10 / 4 / 1048576))M
	# Each loop writes every file once and verifies it.
	io=$(((CYCLES * 10 + 5) / 6))
	local args=(--name=verify --directory="$MNT" --numjobs=4 --size="$size" --bssplit=4k/30:16k/40:128k/30
		--direct=1 --ioengine=libaio --iodepth=4 --fallocate=none --verify=crc32c --verify_fatal=1 --verify_state_save=0)
	RUNTIME=1800 run_fio "$name" --rw=randwrite --loops="$io" --randrepeat=0 --do_verify=1 "${args[@]}"
	cycled "$name" 0 0
	local a b
	a=$(cd "$MNT" && sha256sum verify.* | sha256sum | cut -c1-16)
	remount "$name"
	b=$(cd "$MNT" && sha256sum verify.* | sha256sum | cut -c1-16)
	[ "$a" = "$b" ] || die "$name: the files changed over a remount ($a, then $b)"
	RES[$name.verify]="ok (fio crc32c verify of every write; contents equal after remount, $a)"
	unmount "$MNT"
	fsck_n "$name"
}

verify_sqlite() {
	local name=verify-sqlite ref=$BENCH_OUT/sqlite-ref.db script=$BENCH_OUT/sqlite.sql cap rows txs
	new_zoned "$VERIFY_IMG" "$VERIFY_ZONED"
	mount_streamfs "$IMG" "$MNT" "" "$BENCH_OUT/$name.log"
	cap=$("$STREAMFS_BIN" stats --json "$MNT" | jq '.zones.space.total * 4096')
	# A table of 4 KiB rows filling ~30% of the device, then transactions
	# of 200 updates of random rows (a seeded awk, so the script is the
	# same for the reference run) until CYCLES capacities were rewritten
	# in rows (SQLite writes each about twice: journal and table).
	rows=$((cap * 3 / 10 / 4096))
	txs=$((cap * CYCLES / 2 / 4096 / 200))
	awk -v rows="$rows" -v txs="$txs" 'BEGIN {
		srand(7)
		print "PRAGMA journal_mode=DELETE; PRAGMA synchronous=FULL;"
		print "CREATE TABLE t(id INTEGER PRIMARY KEY, n INTEGER, v BLOB);"
		print "BEGIN;"
		for (i = 1; i <= rows; i++) printf "INSERT INTO t VALUES(%d, 0, zeroblob(4000));\n", i
		print "COMMIT;"
		for (x = 0; x < txs; x++) {
			print "BEGIN;"
			for (j = 0; j < 200; j++) {
				id = int(rand() * rows) + 1
				printf "UPDATE t SET n = n + 1, v = CAST(printf(\"%%.4000c\", char(65 + (n + %d) %% 26)) AS BLOB) WHERE id = %d;\n", x, id
			}
			print "COMMIT;"
		}
	}' >"$script"
	rm -f "$ref"
	sqlite3 "$ref" <"$script" >/dev/null
	log "$name: $rows rows, $txs transactions of 200 updates"
	timeout 1800 sqlite3 "$MNT/t.db" <"$script" >/dev/null || die "$name: sqlite3 failed"
	cycled "$name" 0 0
	remount "$name"
	local a b ic
	ic=$(sqlite3 "$MNT/t.db" 'PRAGMA integrity_check;')
	a=$(sqlite3 "$MNT/t.db" .dump | sha256sum | cut -c1-16)
	b=$(sqlite3 "$ref" .dump | sha256sum | cut -c1-16)
	[ "$ic" = ok ] && [ "$a" = "$b" ] || die "$name: integrity_check '$ic', dump $a, reference $b"
	RES[$name.verify]="ok (integrity_check ok; dump after remount equals the reference's, $a)"
	unmount "$MNT"
	fsck_n "$name"
}

verify_pgbench() {
	local name=verify-pgbench bin pg=$MNT/pg sock=$BENCH_DIR/pgsock cap
	bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
	if [ -z "$bin" ] || ! id postgres >/dev/null 2>&1 || ! command -v pgbench >/dev/null; then
		log "$name: PostgreSQL not installed (Debian: postgresql); skipped"
		RES[$name.verify]="skipped: PostgreSQL not installed"
		return 0
	fi
	new_zoned "$VERIFY_IMG" "$VERIFY_ZONED"
	mount_streamfs "$IMG" "$MNT" "allow_other" "$BENCH_OUT/$name.log"
	cap=$("$STREAMFS_BIN" stats --json "$MNT" | jq '.zones.space.total * 4096')
	mkdir -p "$pg" "$sock"
	chown postgres "$pg" "$sock"
	pgsu() { (cd / && runuser -u postgres -- "$@"); }
	: >"$BENCH_OUT/$name.pglog"
	chown postgres "$BENCH_OUT/$name.pglog"
	pgsu "$bin/initdb" -D "$pg" -A trust >"$BENCH_OUT/$name.initdb" 2>&1 || die "$name: initdb failed"
	pg_start() {
		pgsu "$bin/pg_ctl" -D "$pg" -l "$BENCH_OUT/$name.pglog" -w \
			-o "-k $sock -c listen_addresses='' -c shared_buffers=32MB -c max_wal_size=64MB -c checkpoint_timeout=30s" start >/dev/null ||
			die "$name: postgres did not start; see $BENCH_OUT/$name.pglog"
		PG_UP=1
	}
	pg_stop() {
		[ "${PG_UP:-0}" = 1 ] && pgsu "$bin/pg_ctl" -D "$pg" -m fast -w stop >/dev/null
		PG_UP=0
	}
	pg_start
	pgsu pgbench -h "$sock" -i -s "$PG_SCALE" postgres >"$BENCH_OUT/$name.init" 2>&1 || { pg_stop; die "$name: pgbench -i failed"; }
	# Transactions until the device's capacity was written CYCLES times.
	local w r t=0
	while :; do
		pgsu pgbench -h "$sock" -c 4 -j 2 -T 30 postgres >>"$BENCH_OUT/$name.run" 2>&1 || { pg_stop; die "$name: pgbench failed"; }
		t=$((t + 30))
		read -r w r <<<"$(zstats)"
		awk -v d="$((w + r))" -v c="$cap" -v k="$CYCLES" 'BEGIN { exit !(d >= c * k) }' && break
		[ "$t" -ge 300 ] && break
	done
	local check="SELECT (SELECT sum(abalance) FROM pgbench_accounts) = (SELECT sum(delta) FROM pgbench_history)
		AND (SELECT sum(tbalance) FROM pgbench_tellers) = (SELECT sum(delta) FROM pgbench_history)
		AND (SELECT sum(bbalance) FROM pgbench_branches) = (SELECT sum(delta) FROM pgbench_history)"
	local c1 c2
	c1=$(pgsu psql -h "$sock" -Atc "$check" postgres)
	cycled "$name" 0 0
	pg_stop
	remount "$name" allow_other
	pg_start
	c2=$(pgsu psql -h "$sock" -Atc "$check" postgres)
	pgsu psql -h "$sock" -Atc "CREATE EXTENSION IF NOT EXISTS amcheck; SELECT count(*) FROM (SELECT bt_index_check(c.oid, true) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam WHERE a.amname = 'btree') x;" postgres \
		>"$BENCH_OUT/$name.amcheck" 2>&1 || { pg_stop; die "$name: amcheck failed; see $BENCH_OUT/$name.amcheck"; }
	pg_stop
	[ "$c1" = t ] && [ "$c2" = t ] || die "$name: balances do not add up (after run: $c1, after remount: $c2)"
	RES[$name.verify]="ok ($t s of pgbench -c 4; balances add up after the run and after remount; amcheck of every btree index clean)"
	unmount "$MNT"
	fsck_n "$name"
}

for r in $RUNS; do
	case $r in
	seed)
		for i in $(seq 1 "$ROUNDS"); do
			if [ $((i % 2)) = 1 ]; then
				seed_run "seed-on-$i" on
				seed_run "seed-off-$i" off
			else
				seed_run "seed-off-$i" off
				seed_run "seed-on-$i" on
			fi
			RES[seed-$i.ratio]=$(ratio "${RES[seed-on-$i.kiops]}" "${RES[seed-off-$i.kiops]}")
			RES[seed-$i.reclaim_ratio]=$(ratio "${RES[seed-on-$i.reclaim_per_written]}" "${RES[seed-off-$i.reclaim_per_written]}")
		done
		;;
	hotcold)
		for i in $(seq 1 "$ROUNDS"); do
			if [ $((i % 2)) = 1 ]; then
				hotcold_run "hc-none-$i" 0
				hotcold_run "hc-streams-$i" 1
			else
				hotcold_run "hc-streams-$i" 1
				hotcold_run "hc-none-$i" 0
			fi
			RES[hc-$i.ratio]=$(awk -v a="${RES[hc-streams-$i.wa]}" -v b="${RES[hc-none-$i.wa]}" 'BEGIN { printf "%.3f", a / b }')
		done
		;;
	verify)
		verify_fio
		verify_sqlite
		verify_pgbench
		;;
	*) die "unknown run $r" ;;
	esac
done

# ---- summary ----
{
	echo "# zoned.sh $(date -u +%F) RUNS=\"$RUNS\" ROUNDS=$ROUNDS SEED_IMG=$SEED_IMG SEED_ZONED=$SEED_ZONED SEED_JOBS=$SEED_JOBS SEED_FILE=$SEED_FILE SEED_RUNTIME=$SEED_RUNTIME HC_IMG=$HC_IMG HC_ZONED=$HC_ZONED HOT=$HOT HOT_IO=$HOT_IO HOT_RATE=$HOT_RATE COLD=$COLD COLD_FILE=$COLD_FILE COLD_RATE=$COLD_RATE ROLL_FILES=$ROLL_FILES ROLL=$ROLL ROLL_RATE=$ROLL_RATE VERIFY_IMG=$VERIFY_IMG VERIFY_ZONED=$VERIFY_ZONED CYCLES=$CYCLES PG_SCALE=$PG_SCALE"
	for k in $(printf '%s\n' "${!RES[@]}" | sort); do echo "$k ${RES[$k]}"; done
	# medians and ranges of the per-round ratios
	span() { # LABEL KEYSUFFIX PREFIX
		local v
		v=$(for k in "${!RES[@]}"; do if [[ $k == $3-[0-9]*.$2 ]]; then echo "${RES[$k]}"; fi; done | sort -g)
		[ -n "$v" ] || return 0
		echo "$1 median $(awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }' <<<"$v") range $(head -1 <<<"$v")-$(tail -1 <<<"$v") (n=$(wc -l <<<"$v"))"
	}
	span seed.throughput_on/off ratio seed
	span seed.reclaim_per_written_on/off reclaim_ratio seed
	span hotcold.wa_streams/none ratio hc
} | tee "$BENCH_OUT/summary.txt"

chart "$BENCH_OUT/summary.txt"
if [ -n "$RESULTS" ]; then
	mkdir -p "$RESULTS"
	cp "$BENCH_OUT"/summary.txt "$BENCH_OUT"/*.json "$BENCH_OUT"/*.fsck "$BENCH_OUT"/*.placement "$BENCH_OUT"/*.fill "$BENCH_OUT"/*.pprof.txt "$BENCH_OUT"/*.perf.txt "$RESULTS"/ 2>/dev/null || true
	cp "$BENCH_OUT"/chart.rounds "$RESULTS"/ 2>/dev/null || true
	log "results copied to $RESULTS"
fi
[ ${#FSCK_BAD[@]} = 0 ] || die "fsck -n not clean after: ${FSCK_BAD[*]} (see $BENCH_OUT/NAME.fsck)"
