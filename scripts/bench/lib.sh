# shellcheck shell=bash
# Shared helpers for the streamfs benchmark scripts in this directory.
# Sourced, not run. Needs: root, /dev/fuse, fuse3, fio, xfsprogs, jq, go.
#
# Environment (all optional):
#   BENCH_DIR      scratch directory for images and mount points; it should be
#                  on tmpfs (default /dev/shm/streamfs-bench-NAME). Removed on exit.
#   BENCH_OUT      where fio JSON, daemon logs, stats and profiles are kept
#                  (default /tmp/streamfs-bench-NAME; emptied at start).
#   STREAMFS_BIN   a prebuilt streamfs binary (default: built from this checkout)
#   LOOPBACK_BIN   a prebuilt ./_loopback (go-fuse loopback with kernel passthrough
#                  off; default: built from this checkout)
#   STOCK_LOOPBACK_BIN  a prebuilt go-fuse example/loopback (as root on a kernel
#                  with FUSE passthrough it passes file data through the kernel;
#                  default: built from the go-fuse version this module requires)
#   RUNTIME        seconds per fio run (default 15)
#   NJOBS          fio jobs / files (default 16)

set -euo pipefail

BENCH_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
RUNTIME=${RUNTIME:-15}
NJOBS=${NJOBS:-16}

FIO_PID=    # the running fio (timeout) process
MOUNTS=()   # mount points we mounted, in order
LOOPS=()    # loop devices we attached
declare -A DAEMON_PID=()  # mount point -> FUSE daemon pid

log() { printf '[%(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

need() {
	local c
	for c in "$@"; do command -v "$c" >/dev/null 2>&1 || die "missing tool: $c"; done
}

# install_missing CMD:PACKAGE ...: installs from Debian the packages whose
# command is not on PATH.
install_missing() {
	local missing=() p
	for p in "$@"; do command -v "${p%%:*}" >/dev/null || missing+=("${p#*:}"); done
	[ ${#missing[@]} -eq 0 ] && return
	log "installing ${missing[*]}"
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

# fuse_abort MNT: abort the FUSE connection behind MNT (for a hung daemon).
fuse_abort() {
	local dev minor
	dev=$(mountpoint -d "$1" 2>/dev/null) || return 0
	minor=${dev#*:}
	if [ -w "/sys/fs/fuse/connections/$minor/abort" ]; then
		log "aborting FUSE connection $minor ($1)"
		echo 1 >"/sys/fs/fuse/connections/$minor/abort" || true
	fi
}

# wait_pid PID SECONDS: wait for a (non-child or child) process to exit.
wait_pid() {
	local pid=$1 t=$(($2 * 10))
	while kill -0 "$pid" 2>/dev/null; do
		[ "$t" -le 0 ] && return 1
		sleep 0.1
		t=$((t - 1))
	done
	wait "$pid" 2>/dev/null || true
	return 0
}

# unmount MNT: unmount and, for a FUSE mount, wait for its daemon to exit
# (a CPU profile is written at exit). Escalates: umount, lazy umount, abort, kill.
unmount() {
	local mnt=$1 pid=${DAEMON_PID[$1]:-}
	if mountpoint -q "$mnt"; then
		if ! umount "$mnt" 2>/dev/null; then
			sleep 1
			if ! umount "$mnt"; then
				log "umount $mnt failed; lazy unmount"
				fuse_abort "$mnt"
				umount -l "$mnt" || true
			fi
		fi
	fi
	if [ -n "$pid" ]; then
		if ! wait_pid "$pid" 60; then
			log "daemon $pid for $mnt did not exit 60 s after unmount; killing it"
			kill "$pid" 2>/dev/null || true
			wait_pid "$pid" 5 || kill -9 "$pid" 2>/dev/null || true
		fi
		unset "DAEMON_PID[$mnt]"
	fi
	local i
	for i in "${!MOUNTS[@]}"; do [ "${MOUNTS[$i]}" = "$mnt" ] && unset "MOUNTS[$i]"; done
	return 0
}

detach_loop() {
	local d=$1 i
	losetup -d "$d" 2>/dev/null || true
	for i in "${!LOOPS[@]}"; do [ "${LOOPS[$i]}" = "$d" ] && unset "LOOPS[$i]"; done
	return 0
}

cleanup() {
	local rc=$? i
	set +e
	trap - EXIT INT TERM
	if [ -n "${FIO_PID:-}" ] && kill -0 "$FIO_PID" 2>/dev/null; then
		log "stopping fio"
		kill -TERM "$FIO_PID" 2>/dev/null
		wait_pid "$FIO_PID" 20 || kill -KILL "$FIO_PID" 2>/dev/null
	fi
	for i in $(printf '%s\n' "${!MOUNTS[@]}" | sort -rn); do
		unmount "${MOUNTS[$i]}"
	done
	for i in "${LOOPS[@]}"; do losetup -d "$i" 2>/dev/null; done
	preclean
	rm -rf "$BENCH_DIR"
	exit "$rc"
}

# preclean: undo anything a killed earlier run left under $BENCH_DIR.
preclean() {
	local m f d
	[ -d "$BENCH_DIR" ] || return 0
	# deepest mounts first
	while read -r m; do
		[ -n "$m" ] || continue
		fuse_abort "$m"
		umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
	done < <(awk -v d="$BENCH_DIR" 'index($2, d"/") == 1 { print length($2), $2 }' /proc/mounts | sort -rn | cut -d' ' -f2-)
	for f in "$BENCH_DIR"/*.img; do
		[ -e "$f" ] || continue
		for d in $(losetup -j "$f" -O NAME -n 2>/dev/null); do losetup -d "$d" 2>/dev/null || true; done
	done
	return 0
}

# bench_init NAME: set up scratch/output directories, binaries and the trap.
bench_init() {
	local name=$1
	[ "$(id -u)" = 0 ] || die "run as root (mounts, loop devices)"
	[ -e /dev/fuse ] || die "/dev/fuse missing"
	need fio jq mkfs.xfs losetup mountpoint
	BENCH_DIR=${BENCH_DIR:-/dev/shm/streamfs-bench-$name}
	BENCH_OUT=${BENCH_OUT:-/tmp/streamfs-bench-$name}
	trap cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	preclean
	rm -rf "$BENCH_DIR" "$BENCH_OUT"
	mkdir -p "$BENCH_DIR" "$BENCH_OUT"
	if [ -z "${STREAMFS_BIN:-}" ]; then
		need go
		STREAMFS_BIN=$BENCH_OUT/streamfs
		log "building streamfs"
		(cd "$BENCH_ROOT" && go build -o "$STREAMFS_BIN" .)
	fi
	if [ -z "${LOOPBACK_BIN:-}" ]; then
		need go
		LOOPBACK_BIN=$BENCH_OUT/loopback
		log "building loopback (passthrough off)"
		(cd "$BENCH_ROOT" && go build -o "$LOOPBACK_BIN" ./scripts/bench/_loopback)
	fi
	if [ -z "${STOCK_LOOPBACK_BIN:-}" ]; then
		need go
		STOCK_LOOPBACK_BIN=$BENCH_OUT/loopback-example
		log "building go-fuse example/loopback"
		(cd "$BENCH_ROOT" && go build -o "$STOCK_LOOPBACK_BIN" github.com/hanwen/go-fuse/v2/example/loopback)
	fi
	log "scratch $BENCH_DIR ($(stat -f -c %T "$BENCH_DIR")), output $BENCH_OUT"
}

# wait_mounted MNT PID LOG: wait up to 20 s for MNT to become a mount point.
wait_mounted() {
	local mnt=$1 pid=$2 logf=$3 t=200
	while ! mountpoint -q "$mnt"; do
		if ! kill -0 "$pid" 2>/dev/null; then
			cat "$logf" >&2
			die "daemon for $mnt exited before mounting"
		fi
		[ "$t" -le 0 ] && { cat "$logf" >&2; die "$mnt not mounted after 20 s"; }
		sleep 0.1
		t=$((t - 1))
	done
}

# mkfs_streamfs IMG SIZE AGS
mkfs_streamfs() {
	rm -f "$1"
	"$STREAMFS_BIN" mkfs --size "$2" --ag-count "$3" -f "$1" >/dev/null
}

# mount_streamfs IMG MNT OPTS LOG [PROFILE]: mount in the background.
mount_streamfs() {
	local img=$1 mnt=$2 opts=$3 logf=$4 prof=${5:-} pid
	mkdir -p "$mnt"
	if [ -n "$prof" ]; then
		STREAMFS_CPUPROFILE=$prof "$STREAMFS_BIN" mount ${opts:+-o "$opts"} "$img" "$mnt" 2>"$logf" &
	else
		"$STREAMFS_BIN" mount ${opts:+-o "$opts"} "$img" "$mnt" 2>"$logf" &
	fi
	pid=$!
	MOUNTS+=("$mnt")
	DAEMON_PID[$mnt]=$pid
	wait_mounted "$mnt" "$pid" "$logf"
}

# mount_loopback BIN ORIG MNT LOG [extra flags]: a go-fuse loopback daemon.
mount_loopback() {
	local bin=$1 orig=$2 mnt=$3 logf=$4 pid
	shift 4
	mkdir -p "$mnt" "$orig"
	"$bin" -directmount "$@" "$mnt" "$orig" >"$logf" 2>&1 &
	pid=$!
	MOUNTS+=("$mnt")
	DAEMON_PID[$mnt]=$pid
	wait_mounted "$mnt" "$pid" "$logf"
}

# mount_xfs IMG SIZE MNT AGCOUNT: kernel XFS on a loop device over IMG.
mount_xfs() {
	local img=$1 size=$2 mnt=$3 ags=$4 dev
	rm -f "$img"
	truncate -s "$size" "$img"
	dev=$(losetup -f --show "$img")
	LOOPS+=("$dev")
	XFS_LOOPDEV=$dev
	mkfs.xfs -f -q -d agcount="$ags" "$dev"
	mkdir -p "$mnt"
	mount -t xfs "$dev" "$mnt"
	MOUNTS+=("$mnt")
}

umount_xfs() {
	unmount "$1"
	detach_loop "$XFS_LOOPDEV"
	rm -f "$2"
}

# run_fio NAME [fio args...]: run fio with a timeout; JSON goes to $BENCH_OUT/NAME.json.
# Sets FIO_IOPS to the summed write IOPS. Fails loudly on fio errors or a hang.
run_fio() {
	local name=$1 out rc=0
	shift
	out=$BENCH_OUT/$name.json
	log "fio $name: $*"
	# in the background, so a signal to this script is handled at once
	timeout -k 15 $((RUNTIME + 120)) fio --output-format=json --output="$out" "$@" \
		>"$BENCH_OUT/$name.fio.log" 2>&1 &
	FIO_PID=$!
	wait "$FIO_PID" || rc=$?
	FIO_PID=
	if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
		die "fio $name hung (timeout after $((RUNTIME + 120)) s); see $BENCH_OUT/$name.fio.log"
	fi
	if [ "$rc" != 0 ]; then
		cat "$BENCH_OUT/$name.fio.log" >&2
		die "fio $name failed (exit $rc)"
	fi
	local err
	err=$(jq '[.jobs[].error] | add' "$out")
	[ "$err" = 0 ] || die "fio $name: job error $err; see $out"
	FIO_IOPS=$(jq '[.jobs[].write.iops] | add | floor' "$out")
}

# cpu_ticks PID: user+system clock ticks the process has used so far.
cpu_ticks() {
	awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0
}

# cpu_us_per_write NAME TICKS: daemon CPU microseconds per write of fio run NAME.
cpu_us_per_write() {
	local writes
	writes=$(jq '[.jobs[].write.total_ios] | add' "$BENCH_OUT/$1.json")
	awk -v t="$2" -v hz="$(getconf CLK_TCK)" -v w="$writes" \
		'BEGIN { if (w > 0) printf "%.1f", t * 1e6 / hz / w; else print "-" }'
}

# ratio A B: A/B with 2 decimals ("-" if B is 0 or missing).
ratio() {
	awk -v a="${1:-0}" -v b="${2:-0}" 'BEGIN { if (b + 0 == 0) print "-"; else printf "%.2f", a / b }'
}

# median of the arguments
median() {
	printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print int((v[NR / 2] + v[NR / 2 + 1]) / 2) }'
}
