#!/usr/bin/env bash
# Everyday I/O benchmark: what a user meets first — buffered writes and reads,
# names (create, find, ls -lR, rm -rf), unpacking and building a source tree,
# SQLite and PostgreSQL — on streamfs, kernel XFS and go-fuse's loopback
# example, in one run, as ratios to kernel XFS.
#
#   streamfs  over an image file on tmpfs (SFS_AGS allocation groups)
#   xfs       kernel XFS, mkfs.xfs -d agcount=XFS_AGS, on a loop device over an
#             image on the same tmpfs
#   loopback  go-fuse's example/loopback over that XFS, with kernel FUSE
#             passthrough off: ./_loopback is the stock example reduced, with
#             passthrough switchable (the stock example has no such flag and,
#             as root on a kernel with FUSE passthrough, hands file data to
#             the kernel, so it would not measure the FUSE transport)
#
# Every phase starts each filesystem from a fresh mkfs, and runs the three
# filesystems one after another before the next phase, so a slow minute on a
# shared machine hits one phase of all three rather than all of one.
#
#   w1       fio 4 KiB O_DIRECT sequential writes, psync, 16 jobs, one file per
#            job in directory dJ; on streamfs dJ carries stream (J mod N)+1
#            (N = streamfs stream max), time based
#   buf1m    fio buffered 1 MiB writes, 12 jobs in 12 directories, end_fsync;
#            MiB/s over the wall time of fio (so the final fsync counts), and
#            extents per file (streamfs bmap --json; xfs_bmap, for the loopback
#            on its XFS backing files)
#   buf4k    fio buffered 4 KiB writes, 4 jobs in one directory, end_fsync;
#            MiB/s as above, extents per file
#   seqread  fio sequential buffered reads (READ_BS) of the buf4k files, 4 jobs,
#            page cache dropped first (fio's invalidate, posix_fadvise; for the
#            loopback also on its backing files)
#   create   NFILES empty files in 4 directories in parallel (seq | xargs touch)
#   findls   find + ls -lR over them, right after the creates
#   rm       rm -rf of them; on streamfs the FUSE request counters after each
#            of create, findls and rm go to BENCH_OUT/names.ops-*.json
#   tar      tar x of the Go tree ($(go env GOROOT), packed once on the tmpfs)
#            followed by sync -f
#   gobuild  go build with the toolchain, sources, GOCACHE (cold) and GOTMPDIR
#            all in that unpacked tree: cmd/gofmt (quick: an empty main package)
#   sqlite   sqlite3 CLI (rollback journal, synchronous=FULL): SQLITE_ROWS rows
#            inserted SQLITE_BATCH per transaction, delete half, VACUUM (3 rows)
#   pg       PostgreSQL: initdb on the mount as the postgres user, then
#            pgbench -i -s PG_SCALE against a server on it (2 rows); skipped
#            with a message when PostgreSQL cannot be installed
#
# Ratio = speed relative to XFS: rate / XFS's rate, or XFS's time / time, so
# above 1 is faster than XFS whatever the unit. The target column is issue 11's.
#
# Usage: sudo [STREAMFS_BIN=...] scripts/bench/everyday.sh [--quick] [options]
#   --quick        smaller sizes (about 5 minutes instead of about 15)
#   --docs NAME    write docs/everyday-NAME.csv and .md, the chart docs/everyday.png,
#                  and put the table into docs/BENCHMARKS.md between the markers
#                  <!-- everyday-NAME:begin --> and <!-- everyday-NAME:end -->
#                  (appended when missing); unless NAME is "before", the ratios of
#                  docs/everyday-before.csv are shown beside this run's
#   --csv FILE  --md FILE  --png FILE   where the results go (default: BENCH_OUT)
#   --compare CSV  an earlier run's CSV whose streamfs/XFS ratios go beside this run's
# The lead's rerun after the issue-11 work:
#   go build -o /tmp/streamfs-after . && sudo STREAMFS_BIN=/tmp/streamfs-after scripts/bench/everyday.sh --docs after
# Environment (besides lib.sh's BENCH_DIR, BENCH_OUT, STREAMFS_BIN, LOOPBACK_BIN):
#   PHASES="w1 buf1m buf4k names tree sqlite pg"   FSES="streamfs xfs loopback"
#   SFS_AGS=16  XFS_AGS=16  IMG_SIZE=16G  SFS_OPTS=  (extra streamfs -o options)
#   RUNTIME=15 (quick 5)  W1_SIZE=256m  B1_SIZE=256m (quick 64m)  B4_SIZE=256m (quick 64m)
#   READ_BS=128k  NFILES=40000 (quick 20000)  SQLITE_ROWS=200000 (quick 50000)
#   SQLITE_BATCH=1000  PG_SCALE=20 (quick 5)  NO_APT=1 (never call apt-get)
#   WARM=1 (touch IMG_SIZE of tmpfs memory before the first phase; 0 skips)
# shellcheck source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"

QUICK=0
CSV='' MD='' PNG='' COMPARE='' DOCS=''
while [ $# -gt 0 ]; do
	case $1 in
	--quick) QUICK=1 ;;
	--docs) DOCS=${2:?--docs needs a name}; shift ;;
	--csv) CSV=${2:?--csv needs a file}; shift ;;
	--md) MD=${2:?--md needs a file}; shift ;;
	--png) PNG=${2:?--png needs a file}; shift ;;
	--compare) COMPARE=${2:?--compare needs a CSV file}; shift ;;
	-h | --help) sed -n '2,/^source/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown argument $1 (see --help)" ;;
	esac
	shift
done
if [ "$QUICK" = 1 ]; then
	RUNTIME=${RUNTIME:-5}
	B1_SIZE=${B1_SIZE:-64m}
	B4_SIZE=${B4_SIZE:-64m}
	NFILES=${NFILES:-20000}
	SQLITE_ROWS=${SQLITE_ROWS:-50000}
	PG_SCALE=${PG_SCALE:-5}
	GOBUILD=${GOBUILD:-hello}
fi
RUNTIME=${RUNTIME:-15}
PHASES=${PHASES:-w1 buf1m buf4k names tree sqlite pg}
FSES=${FSES:-streamfs xfs loopback}
SFS_AGS=${SFS_AGS:-16}
XFS_AGS=${XFS_AGS:-16}
IMG_SIZE=${IMG_SIZE:-16G}
WARM=${WARM:-1}
SFS_OPTS=${SFS_OPTS:-}
W1_JOBS=16
W1_SIZE=${W1_SIZE:-256m}
B1_JOBS=12
B1_SIZE=${B1_SIZE:-256m}
B4_JOBS=4
B4_SIZE=${B4_SIZE:-256m}
READ_BS=${READ_BS:-128k}
NFILES=${NFILES:-40000}
NDIRS=4
SQLITE_ROWS=${SQLITE_ROWS:-200000}
SQLITE_BATCH=${SQLITE_BATCH:-1000}
PG_SCALE=${PG_SCALE:-20}
GOBUILD=${GOBUILD:-gofmt}
PG_PORT=${PG_PORT:-54329}

if [ -n "$DOCS" ]; then
	case $DOCS in *[!A-Za-z0-9_-]*) die "--docs NAME: letters, digits, - and _ only" ;; esac
	DOCS_DIR=$(cd "$(dirname "$0")/../.." && pwd)/docs
	mkdir -p "$DOCS_DIR"
	CSV=${CSV:-$DOCS_DIR/everyday-$DOCS.csv}
	MD=${MD:-$DOCS_DIR/everyday-$DOCS.md}
	PNG=${PNG:-$DOCS_DIR/everyday.png}
	if [ -z "$COMPARE" ] && [ "$DOCS" != before ] && [ -s "$DOCS_DIR/everyday-before.csv" ]; then
		COMPARE=$DOCS_DIR/everyday-before.csv
	fi
fi
[ -z "$COMPARE" ] || [ -s "$COMPARE" ] || die "--compare $COMPARE: no such CSV"

# ---- tools: install what is missing from Debian, unless NO_APT=1
PG_BIN=
find_pg() {
	local d
	PG_BIN=
	for d in $(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V -r); do
		if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/pgbench" ]; then
			PG_BIN=$d
			return 0
		fi
	done
	return 1
}
install_tools() {
	local pkgs=() c
	declare -A pkg=([fio]=fio [jq]=jq [mkfs.xfs]=xfsprogs [xfs_bmap]=xfsprogs [sqlite3]=sqlite3
		[gnuplot]=gnuplot-nox [runuser]=util-linux [tar]=tar [xargs]=findutils)
	for c in "${!pkg[@]}"; do
		command -v "$c" >/dev/null 2>&1 || pkgs+=("${pkg[$c]}")
	done
	if [[ " $PHASES " == *" pg "* ]] && ! find_pg; then pkgs+=(postgresql); fi
	[ ${#pkgs[@]} -gt 0 ] || return 0
	if [ "${NO_APT:-0}" = 1 ]; then
		log "missing packages (NO_APT=1, not installing): ${pkgs[*]}"
		return 0
	fi
	log "installing: ${pkgs[*]}"
	apt-get update -qq >/dev/null 2>&1 || log "apt-get update failed; trying the install anyway"
	# postgresql's package would start a cluster of its own: tell it not to
	# (policy-rc.d), the benchmark runs its own server on the mount.
	local prc=/usr/sbin/policy-rc.d made=0
	if [ ! -e "$prc" ]; then
		printf '#!/bin/sh\nexit 101\n' >"$prc" && chmod +x "$prc" && made=1
	fi
	mapfile -t pkgs < <(printf '%s\n' "${pkgs[@]}" | sort -u)
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}" \
		>"${TMPDIR:-/tmp}/everyday-apt.log" 2>&1 || log "apt-get install failed (see ${TMPDIR:-/tmp}/everyday-apt.log)"
	[ "$made" = 1 ] && rm -f "$prc"
	return 0
}
install_tools
need sqlite3 gnuplot runuser tar xargs xfs_bmap go
if [[ " $PHASES " == *" pg "* ]]; then
	if ! find_pg || ! id postgres >/dev/null 2>&1; then
		log "PostgreSQL (initdb, pg_ctl, pgbench and a postgres user) not available and not installable: skipping the pg phase"
		PHASES=${PHASES/pg/}
		PG_SKIPPED=1
	fi
fi

bench_init everyday
W=$BENCH_DIR
MNT=$W/mnt
GOROOT_SRC=$(go env GOROOT)

# The server must be stopped before its filesystem can be unmounted.
PG_RUNNING=
pg_stop() {
	[ -n "$PG_RUNNING" ] || return 0
	runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$PG_RUNNING" -m fast -w -t 60 stop >/dev/null 2>&1 ||
		runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$PG_RUNNING" -m immediate -w -t 30 stop >/dev/null 2>&1 || true
	PG_RUNNING=
}
everyday_cleanup() {
	local rc=$?
	pg_stop
	(exit "$rc")
	cleanup
}
trap everyday_cleanup EXIT

# ---- workloads: key|label|unit|better(hi/lo)|issue-11 target ratio
WORKLOADS=(
	"w1|4 KiB O_DIRECT writes, psync, $W1_JOBS jobs, streams (W1)|KIOPS|hi|1.0"
	"buf1m|buffered 1 MiB writes, $B1_JOBS jobs in $B1_JOBS directories, end_fsync ($B1_SIZE each)|MiB/s|hi|1.0"
	"buf4k|buffered 4 KiB writes, $B4_JOBS jobs, end_fsync ($B4_SIZE each)|MiB/s|hi|0.8"
	"seqread|sequential buffered reads, $READ_BS, $B4_JOBS jobs, cold page cache|MiB/s|hi|"
	"create|create $((NFILES / 1000))k empty files, $NDIRS directories in parallel (xargs touch)|files/s|hi|0.4"
	"findls|find + ls -lR over those $((NFILES / 1000))k files|s|lo|0.5"
	"rm|rm -rf of them|s|lo|0.4"
	"tar|tar x of the Go tree, then sync -f|s|lo|"
	"gobuild|go build ($GOBUILD), toolchain, sources, cold GOCACHE and GOTMPDIR on the mount|s|lo|"
	"sqlite_insert|SQLite: insert $((SQLITE_ROWS / 1000))k rows, $SQLITE_BATCH per transaction|s|lo|"
	"sqlite_delete|SQLite: delete half of them|s|lo|"
	"sqlite_vacuum|SQLite: VACUUM|s|lo|"
	"pg_initdb|PostgreSQL: initdb|s|lo|"
	"pgbench|PostgreSQL: pgbench -i -s $PG_SCALE|s|lo|"
)
declare -A VAL EXTAVG EXTMAX

now() { echo "$EPOCHREALTIME"; }
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.3f", b - a }'; }

# ---- filesystems
# setup_fs FS NAME [allow_other]: a fresh filesystem; sets T (an empty
# directory on it to work in) and BACKING (for the loopback: the same
# directory on the XFS below, where xfs_bmap works).
setup_fs() {
	local fs=$1 name=$2 other=${3:-0} opts=$SFS_OPTS
	case $fs in
	streamfs)
		mkfs_streamfs "$W/sfs.img" "$IMG_SIZE" "$SFS_AGS"
		[ "$other" = 1 ] && opts=${opts:+$opts,}allow_other
		mount_streamfs "$W/sfs.img" "$MNT" "$opts" "$BENCH_OUT/$name.streamfs.daemon.log"
		T=$MNT/t
		;;
	xfs)
		mount_xfs "$W/xfs.img" "$IMG_SIZE" "$W/xfs" "$XFS_AGS"
		T=$W/xfs/t
		;;
	loopback)
		mount_xfs "$W/xfs.img" "$IMG_SIZE" "$W/xfs" "$XFS_AGS"
		local extra=()
		[ "$other" = 1 ] && extra=(-allowother)
		mount_loopback "$LOOPBACK_BIN" "$W/xfs/lb" "$MNT" "$BENCH_OUT/$name.loopback.daemon.log" "${extra[@]}"
		T=$MNT/t
		;;
	*) die "unknown filesystem $fs" ;;
	esac
	mkdir "$T"
	BACKING=$T
	[ "$fs" = loopback ] && BACKING=$W/xfs/lb/t
	return 0
}

teardown_fs() {
	case $1 in
	streamfs) unmount "$MNT"; rm -f "$W/sfs.img" ;;
	xfs) umount_xfs "$W/xfs" "$W/xfs.img" ;;
	loopback) unmount "$MNT"; umount_xfs "$W/xfs" "$W/xfs.img" ;;
	esac
}

# extents KEY FS FILE...: extents per file (average, max) into EXTAVG/EXTMAX.
# Files are named as seen through the mount; the loopback's are looked up on
# its XFS backing (BACKING).
extents() {
	local key=$1 fs=$2 f out=$BENCH_OUT/$1.$2.extents.txt
	shift 2
	: >"$out"
	for f in "$@"; do
		case $fs in
		streamfs) "$STREAMFS_BIN" bmap --json "$f" | jq -r --arg f "${f#"$T"/}" '"\($f) \(.extents | length)"' >>"$out" ;;
		# xfs_bmap: one "N: [a..b]: c..d" line per extent; holes say "hole"
		xfs | loopback) xfs_bmap "$BACKING/${f#"$T"/}" | awk -v f="${f#"$T"/}" '$1 ~ /^[0-9]+:$/ && $3 != "hole" { n++ } END { print f, n + 0 }' >>"$out" ;;
		esac
	done
	read -r "EXTAVG[$key.$fs]" "EXTMAX[$key.$fs]" < <(awk '{ t += $2; if ($2 > m) m = $2 } END { printf "%.1f %d\n", NR ? t / NR : 0, m }' "$out")
}

# size_bytes 256m -> bytes (fio's K/M/G suffixes, powers of 1024)
size_bytes() {
	awk -v s="$1" 'BEGIN { n = s + 0; u = tolower(substr(s, length(s)));
		if (u == "k") n *= 1024; else if (u == "m") n *= 1048576; else if (u == "g") n *= 1073741824; printf "%d", n }'
}

# fio_wall NAME [fio args...]: run_fio, timing the whole fio run (FIO_WALL, s).
fio_wall() {
	local t0
	t0=$(now)
	run_fio "$@"
	FIO_WALL=$(since "$t0")
}

# ---- phases: each runs one filesystem from mkfs to teardown
phase_w1() {
	local fs=$1 j max=0
	setup_fs "$fs" w1
	for ((j = 0; j < W1_JOBS; j++)); do mkdir "$T/d$j"; done
	if [ "$fs" = streamfs ]; then
		max=$("$STREAMFS_BIN" stream max "$T" | grep -o '[0-9]\+' | tail -1)
		[ "${max:-0}" -gt 0 ] || die "streamfs stream max $T: no streams"
		for ((j = 0; j < W1_JOBS; j++)); do
			"$STREAMFS_BIN" stream set "$T/d$j" $((j % max + 1)) >/dev/null
		done
	fi
	# shellcheck disable=SC2016
	run_fio "w1.$fs" --name=w1 --directory="$T" --filename_format='d$jobnum/f' --rw=write --bs=4k \
		--direct=1 --ioengine=psync --iodepth=1 --numjobs="$W1_JOBS" --size="$W1_SIZE" \
		--fallocate=none --time_based --runtime="$RUNTIME" --group_reporting
	VAL[w1.$fs]=$(awk -v i="$FIO_IOPS" 'BEGIN { printf "%.1f", i / 1000 }')
	teardown_fs "$fs"
}

phase_buf1m() {
	local fs=$1 j files=()
	setup_fs "$fs" buf1m
	for ((j = 0; j < B1_JOBS; j++)); do mkdir "$T/d$j"; files+=("$T/d$j/f"); done
	# shellcheck disable=SC2016
	fio_wall "buf1m.$fs" --name=buf1m --directory="$T" --filename_format='d$jobnum/f' --rw=write \
		--bs=1M --ioengine=psync --numjobs="$B1_JOBS" --size="$B1_SIZE" --fallocate=none \
		--end_fsync=1 --group_reporting
	VAL[buf1m.$fs]=$(awk -v b="$(size_bytes "$B1_SIZE")" -v n="$B1_JOBS" -v t="$FIO_WALL" 'BEGIN { printf "%.0f", b * n / 1048576 / t }')
	extents buf1m "$fs" "${files[@]}"
	teardown_fs "$fs"
}

phase_buf4k() {
	local fs=$1 j files=()
	setup_fs "$fs" buf4k
	mkdir "$T/b"
	for ((j = 0; j < B4_JOBS; j++)); do files+=("$T/b/b4.$j.0"); done
	fio_wall "buf4k.$fs" --name=b4 --directory="$T/b" --rw=write --bs=4k --ioengine=psync \
		--numjobs="$B4_JOBS" --size="$B4_SIZE" --fallocate=none --end_fsync=1 --group_reporting
	VAL[buf4k.$fs]=$(awk -v b="$(size_bytes "$B4_SIZE")" -v n="$B4_JOBS" -v t="$FIO_WALL" 'BEGIN { printf "%.0f", b * n / 1048576 / t }')
	extents buf4k "$fs" "${files[@]}"
	# the same job name reads the same files; invalidate=1 (fio's default)
	# drops their cached pages first, and for the loopback dd drops those of
	# its backing files too, or it would read from XFS's page cache
	if [ "$fs" = loopback ]; then
		for ((j = 0; j < B4_JOBS; j++)); do dd if="$BACKING/b/b4.$j.0" iflag=nocache count=0 status=none; done
	fi
	run_fio "seqread.$fs" --name=b4 --directory="$T/b" --rw=read --bs="$READ_BS" --ioengine=psync \
		--numjobs="$B4_JOBS" --size="$B4_SIZE" --invalidate=1 --group_reporting
	VAL[seqread.$fs]=$(jq '[.jobs[].read.bw_bytes] | add / 1048576 | floor' "$BENCH_OUT/seqread.$fs.json")
	teardown_fs "$fs"
}

# names_ops FS STEP: on streamfs, keep the daemon's FUSE request counters
# (stats --json, fuse_ops) after STEP, so requests per file can be read off.
names_ops() {
	[ "$1" = streamfs ] || return 0
	"$STREAMFS_BIN" stats --json "$MNT" >"$BENCH_OUT/names.ops-$2.json" || true
}

phase_names() {
	local fs=$1 d t0 per=$((NFILES / NDIRS)) pids=() p
	setup_fs "$fs" names
	names_ops "$fs" 0-start
	for ((d = 0; d < NDIRS; d++)); do mkdir "$T/d$d"; done
	t0=$(now)
	for ((d = 0; d < NDIRS; d++)); do
		(cd "$T/d$d" && seq -f "f%.0f" 1 "$per" | xargs touch) &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || die "create on $fs failed"; done
	VAL[create.$fs]=$(awk -v n=$((per * NDIRS)) -v t="$(since "$t0")" 'BEGIN { printf "%.0f", n / t }')
	names_ops "$fs" 1-create
	t0=$(now)
	find "$T" >/dev/null
	ls -lR "$T" >/dev/null
	VAL[findls.$fs]=$(since "$t0")
	names_ops "$fs" 2-findls
	local n
	n=$(find "$T" -type f | wc -l)
	[ "$n" = $((per * NDIRS)) ] || die "$fs: $n files after creating $((per * NDIRS))"
	t0=$(now)
	rm -rf "$T"
	VAL[rm.$fs]=$(since "$t0")
	names_ops "$fs" 3-rm
	teardown_fs "$fs"
}

# The Go tree: packed once; unpacked, then built with its own toolchain.
prepare_tree() {
	[ -s "$W/go.tar" ] && return 0
	log "packing $GOROOT_SRC"
	tar -C "$(dirname "$GOROOT_SRC")" -cf "$W/go.tar" "$(basename "$GOROOT_SRC")"
	TREE_FILES=$(tar -tf "$W/go.tar" | wc -l)
	TREE_MIB=$(($(stat -c %s "$W/go.tar") / 1048576))
}
phase_tree() {
	local fs=$1 t0 g
	prepare_tree
	setup_fs "$fs" tree
	t0=$(now)
	tar -C "$T" -xf "$W/go.tar"
	sync -f "$T"
	VAL[tar.$fs]=$(since "$t0")
	g=$T/$(basename "$GOROOT_SRC")
	mkdir "$T/gocache" "$T/gotmp"
	local target=cmd/gofmt dir=$T
	if [ "$GOBUILD" = hello ]; then
		mkdir "$T/hello"
		printf 'module hello\n\ngo 1.21\n' >"$T/hello/go.mod"
		printf 'package main\n\nfunc main() {}\n' >"$T/hello/main.go"
		target=. dir=$T/hello
	fi
	t0=$(now)
	(cd "$dir" && env GOROOT="$g" GOCACHE="$T/gocache" GOTMPDIR="$T/gotmp" GOENV=off GOFLAGS= \
		GOTOOLCHAIN=local GOPROXY=off CGO_ENABLED=0 GOPATH="$T/gopath" \
		"$g/bin/go" build -o "$T/built.bin" "$target") >"$BENCH_OUT/gobuild.$fs.log" 2>&1 ||
		{ cat "$BENCH_OUT/gobuild.$fs.log" >&2; die "go build on $fs failed"; }
	VAL[gobuild.$fs]=$(since "$t0")
	teardown_fs "$fs"
}

prepare_sqlite() {
	[ -s "$W/insert.sql" ] && return 0
	awk -v n="$SQLITE_ROWS" -v b="$SQLITE_BATCH" 'BEGIN {
		print "CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, v INTEGER, payload TEXT);"
		print "CREATE INDEX t_name ON t (name);"
		srand(11)
		for (i = 1; i <= n; i++) {
			if ((i - 1) % b == 0) print "BEGIN;"
			printf "INSERT INTO t (name, v, payload) VALUES (%cuser%d%c, %d, %c%s%c);\n", 39, int(rand() * 1e9), 39, i, 39, sprintf("%0100d", i), 39
			if (i % b == 0 || i == n) print "COMMIT;"
		}
	}' >"$W/insert.sql"
}
phase_sqlite() {
	local fs=$1 t0 db
	prepare_sqlite
	setup_fs "$fs" sqlite
	db=$T/bench.db
	t0=$(now)
	sqlite3 "$db" <"$W/insert.sql"
	VAL[sqlite_insert.$fs]=$(since "$t0")
	t0=$(now)
	sqlite3 "$db" 'DELETE FROM t WHERE id % 2 = 0;'
	VAL[sqlite_delete.$fs]=$(since "$t0")
	t0=$(now)
	sqlite3 "$db" 'VACUUM;'
	VAL[sqlite_vacuum.$fs]=$(since "$t0")
	local rows
	rows=$(sqlite3 "$db" 'SELECT count(*) FROM t;')
	[ "$rows" = $((SQLITE_ROWS - SQLITE_ROWS / 2)) ] || die "sqlite on $fs: $rows rows left, expected $((SQLITE_ROWS - SQLITE_ROWS / 2))"
	teardown_fs "$fs"
}

phase_pg() {
	local fs=$1 t0 pgdata sock=$W/pgsock
	local plog=$BENCH_OUT/pg.$fs.log
	setup_fs "$fs" pg 1
	mkdir -p "$sock"
	chown postgres: "$sock" "$T"
	: >"$plog"
	chown postgres: "$plog"
	pgdata=$T/pgdata
	t0=$(now)
	runuser -u postgres -- "$PG_BIN/initdb" -D "$pgdata" -A trust -U postgres -E UTF8 --locale=C \
		>"$BENCH_OUT/initdb.$fs.log" 2>&1 || { cat "$BENCH_OUT/initdb.$fs.log" >&2; die "initdb on $fs failed"; }
	VAL[pg_initdb.$fs]=$(since "$t0")
	PG_RUNNING=$pgdata
	runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$pgdata" -l "$plog" -w -t 120 \
		-o "-c listen_addresses= -k $sock -p $PG_PORT" start >/dev/null ||
		{ cat "$plog" >&2; die "postgres on $fs did not start"; }
	t0=$(now)
	runuser -u postgres -- "$PG_BIN/pgbench" -i -s "$PG_SCALE" -h "$sock" -p "$PG_PORT" postgres \
		>"$BENCH_OUT/pgbench.$fs.log" 2>&1 || { cat "$BENCH_OUT/pgbench.$fs.log" >&2; die "pgbench on $fs failed"; }
	VAL[pgbench.$fs]=$(since "$t0")
	pg_stop
	teardown_fs "$fs"
}

# ---- run (the inputs are made first, outside every timing)
[[ " $PHASES " == *" tree "* ]] && prepare_tree
[[ " $PHASES " == *" sqlite "* ]] && prepare_sqlite
# Memory a VM has not touched since it booted is slow to touch the first time
# (seen here: 350 MB/s into tmpfs, against 1.0-1.3 GB/s once touched), and
# the images live on tmpfs: the first filesystem of the first phases would
# pay for it. Touch IMG_SIZE of it once, outside every timing (WARM=0 skips).
if [ "$WARM" != 0 ]; then
	log "touching $IMG_SIZE of tmpfs memory once (WARM=0 skips)"
	dd if=/dev/zero of="$W/warm" bs=1M count=$(($(size_bytes "$IMG_SIZE") / 1048576)) status=none 2>/dev/null || true
	rm -f "$W/warm"
fi
T_START=$(now)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
for ph in $PHASES; do
	for fs in $FSES; do
		log "phase $ph on $fs"
		case $ph in
		w1 | buf1m | buf4k | names | tree | sqlite | pg) "phase_$ph" "$fs" ;;
		*) die "unknown phase $ph" ;;
		esac
	done
done
TOTAL=$(since "$T_START")
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
log "all phases done in ${TOTAL}s"

# ---- results
# speed KEY FS: speed relative to XFS (rate ratio, or inverse time ratio)
speed() {
	local key=$1 fs=$2 better=$3 v=${VAL[$1.$2]:-} x=${VAL[$1.xfs]:-}
	if [ -z "$v" ] || [ -z "$x" ]; then echo -; return; fi
	if [ "$better" = hi ]; then ratio "$v" "$x"; else ratio "$x" "$v"; fi
}
# An earlier run's ratio is shown only where its workload was the same
# (the label carries the sizes, so a --quick run is not set beside a full one).
declare -A BEFORE
if [ -n "$COMPARE" ]; then
	declare -A LABEL_NOW
	for w in "${WORKLOADS[@]}"; do IFS='|' read -r key label _ <<<"$w"; LABEL_NOW[$key]=$label; done
	while IFS=, read -r key _ _ _ _ _ r _ _ _ _ _ _ _ _ label; do
		label=${label#\"}
		label=${label%\"}
		if [ "$label" = "${LABEL_NOW[$key]:-}" ]; then BEFORE[$key]=$r; else log "--compare: $key differs ($label), not compared"; fi
	done < <(tail -n +2 "$COMPARE")
fi

CSV=${CSV:-$BENCH_OUT/everyday.csv}
MD=${MD:-$BENCH_OUT/everyday.md}
PNG=${PNG:-$BENCH_OUT/everyday.png}
{
	# the label last: it holds commas, and a reader can take "the rest"
	echo "key,unit,better,streamfs,xfs,loopback,streamfs_xfs,loopback_xfs,target,ext_avg_streamfs,ext_max_streamfs,ext_avg_xfs,ext_max_xfs,ext_avg_loopback,ext_max_loopback,workload"
	for w in "${WORKLOADS[@]}"; do
		IFS='|' read -r key label unit better target <<<"$w"
		[ -n "${VAL[$key.streamfs]:-}${VAL[$key.xfs]:-}${VAL[$key.loopback]:-}" ] || continue
		printf '%s,%s,%s,%s,%s,%s,%s,%s,%s' "$key" "$unit" "$better" \
			"${VAL[$key.streamfs]:-}" "${VAL[$key.xfs]:-}" "${VAL[$key.loopback]:-}" \
			"$(speed "$key" streamfs "$better")" "$(speed "$key" loopback "$better")" "$target"
		for fs in streamfs xfs loopback; do printf ',%s,%s' "${EXTAVG[$key.$fs]:-}" "${EXTMAX[$key.$fs]:-}"; done
		printf ',"%s"\n' "$label"
	done
} >"$CSV"

fmt_val() { # VALUE UNIT: a table cell
	case $2 in
	s) awk -v v="$1" 'BEGIN { if (v == "") print "-"; else if (v < 10) printf "%.2f s\n", v; else printf "%.1f s\n", v }' ;;
	files/s) awk -v v="$1" 'BEGIN { if (v == "") print "-"; else printf "%.1fk/s\n", v / 1000 }' ;;
	*) echo "${1:--} $2" ;;
	esac
}

SFS_SHA=$(sha256sum "$STREAMFS_BIN" | cut -c1-12)
{
	echo "#### everyday.sh: streamfs, kernel XFS and go-fuse loopback"
	echo
	echo "- $(date -u '+%Y-%m-%d %H:%M UTC'), kernel $(uname -r), $(nproc) CPUs, $(awk '/MemTotal/ { printf "%d GiB", $2 / 1048576 }' /proc/meminfo) RAM; load average $LOAD_START at the start, $LOAD_END at the end; $(awk -v t="$TOTAL" 'BEGIN { printf "%.1f", t / 60 }') min$([ "$QUICK" = 1 ] && echo ", --quick")"
	echo "- streamfs: \`$STREAMFS_BIN\` (sha256 $SFS_SHA, $("$STREAMFS_BIN" version 2>/dev/null | head -1)), ${SFS_AGS} AGs, -o ${SFS_OPTS:-<defaults>}, $IMG_SIZE sparse image on tmpfs"
	echo "- kernel XFS: mkfs.xfs -d agcount=$XFS_AGS on a loop device over a $IMG_SIZE image on the same tmpfs"
	echo "- go-fuse loopback: go-fuse's example/loopback (scripts/bench/_loopback, kernel FUSE passthrough off, 1 s entry and attribute timeouts) over that XFS"
	echo "- $(fio --version), sqlite $(sqlite3 --version | cut -d' ' -f1)$([ -n "$PG_BIN" ] && [ -z "${PG_SKIPPED:-}" ] && echo ", PostgreSQL $("$PG_BIN/postgres" --version | awk '{ print $3 }')"), $(go version | cut -d' ' -f3); Go tree: ${TREE_FILES:-?} entries, ${TREE_MIB:-?} MiB"
	echo "- each phase makes every filesystem afresh; ratio = speed relative to XFS (rate / XFS rate, or XFS time / time): above 1 is faster than XFS"
	[ -n "${PG_SKIPPED:-}" ] && echo "- PostgreSQL could not be installed: pg rows skipped"
	echo
	if [ -n "$COMPARE" ]; then
		echo "| workload | streamfs | kernel XFS | go-fuse loopback | streamfs / XFS | before | loopback / XFS | target |"
		echo "|---|---|---|---|---|---|---|---|"
	else
		echo "| workload | streamfs | kernel XFS | go-fuse loopback | streamfs / XFS | loopback / XFS | target |"
		echo "|---|---|---|---|---|---|---|"
	fi
	for w in "${WORKLOADS[@]}"; do
		IFS='|' read -r key label unit better target <<<"$w"
		[ -n "${VAL[$key.streamfs]:-}${VAL[$key.xfs]:-}${VAL[$key.loopback]:-}" ] || continue
		row="| $label | $(fmt_val "${VAL[$key.streamfs]:-}" "$unit") | $(fmt_val "${VAL[$key.xfs]:-}" "$unit") | $(fmt_val "${VAL[$key.loopback]:-}" "$unit") | **$(speed "$key" streamfs "$better")** |"
		[ -n "$COMPARE" ] && row="$row ${BEFORE[$key]:--} |"
		row="$row $(speed "$key" loopback "$better") | ${target:+≥ $target} |"
		echo "$row"
	done
	if [ -n "${EXTAVG[buf1m.xfs]:-}${EXTAVG[buf4k.xfs]:-}${EXTAVG[buf1m.streamfs]:-}" ]; then
		echo
		echo "Extents per file after the buffered-write runs, average (max): streamfs \`bmap --json\`, XFS \`xfs_bmap\` (the loopback's files on its XFS)."
		echo
		echo "| run | streamfs | kernel XFS | go-fuse loopback |"
		echo "|---|---|---|---|"
		for key in buf1m buf4k; do
			row="| $key |"
			for fs in streamfs xfs loopback; do
				if [ -n "${EXTAVG[$key.$fs]:-}" ]; then row="$row ${EXTAVG[$key.$fs]} (${EXTMAX[$key.$fs]}) |"; else row="$row - |"; fi
			done
			echo "$row"
		done
	fi
} >"$MD"

# ---- chart: streamfs/XFS (and the earlier run's) and loopback/XFS per workload, log scale
chart() {
	local dat=$BENCH_OUT/everyday.chart.dat
	: >"$dat"
	declare -A short=([w1]="W1 O_DIRECT" [buf1m]="buffered 1M x12" [buf4k]="buffered 4k x4" [seqread]="seq read"
		[create]="create" [findls]="find+ls -lR" [rm]="rm -rf" [tar]="tar x" [gobuild]="go build"
		[sqlite_insert]="SQLite insert" [sqlite_delete]="SQLite delete" [sqlite_vacuum]="SQLite VACUUM"
		[pg_initdb]="initdb" [pgbench]="pgbench -i")
	for w in "${WORKLOADS[@]}"; do
		IFS='|' read -r key _ _ better target <<<"$w"
		[ -n "${VAL[$key.streamfs]:-}${VAL[$key.xfs]:-}" ] || continue
		printf '"%s" %s %s %s %s\n' "${short[$key]}" "$(speed "$key" streamfs "$better")" \
			"${BEFORE[$key]:--}" "$(speed "$key" loopback "$better")" "${target:--}" >>"$dat"
	done
	local plot="'$dat' using 2:xtic(1) title 'streamfs / XFS' lc rgb '#8e2bd6'"
	[ -n "$COMPARE" ] && plot="$plot, '' using 3 title 'streamfs / XFS, before' lc rgb '#b0b0b0'"
	plot="$plot, '' using 4 title 'go-fuse loopback / XFS' lc rgb '#2aa889'"
	if awk '$NF != "-" { f = 1 } END { exit !f }' "$dat"; then
		plot="$plot, '' using (\$0):5 with points pt 9 ps 1.6 lc rgb 'black' title 'issue 11 target'"
	fi
	gnuplot <<-EOF
		set terminal pngcairo noenhanced size 1100,560 font 'sans,10'
		set output '$PNG'
		set title "Everyday I/O: speed relative to kernel XFS, one run ($(date -u +%Y-%m-%d), $(nproc) CPUs)"
		set style data histograms
		set style histogram clustered gap 1
		set style fill solid 0.85 border -1
		set boxwidth 0.9
		set datafile missing '-'
		set logscale y
		set yrange [0.02:*]
		set ytics (0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 4, 8, 16)
		set grid ytics
		set ylabel 'speed / XFS (log scale; above 1 = faster than XFS)'
		set xtics rotate by -35 scale 0
		set key top right
		set arrow from graph 0, first 1 to graph 1, first 1 nohead lw 2 lc rgb '#444444'
		plot $plot
	EOF
}
chart || log "chart failed (gnuplot); the table and CSV are written"

# ---- docs/BENCHMARKS.md: replace (or append) this run's section
if [ -n "$DOCS" ]; then
	bm=$DOCS_DIR/BENCHMARKS.md
	begin="<!-- everyday-$DOCS:begin -->" end="<!-- everyday-$DOCS:end -->"
	[ -f "$bm" ] || printf '# Benchmarks\n' >"$bm"
	if grep -qF "$begin" "$bm" && grep -qF "$end" "$bm"; then
		awk -v b="$begin" -v e="$end" -v f="$MD" '
			$0 == b { print; while ((getline l < f) > 0) print l; skip = 1; next }
			$0 == e { skip = 0 }
			!skip' "$bm" >"$bm.tmp" && mv "$bm.tmp" "$bm"
	else
		{ echo; echo "### everyday.sh --docs $DOCS"; echo; echo "$begin"; cat "$MD"; echo "$end"; } >>"$bm"
	fi
	log "updated $bm ($begin)"
fi

cat "$MD"
log "CSV $CSV, table $MD, chart $PNG, raw output $BENCH_OUT"
