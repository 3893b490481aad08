#!/usr/bin/env bash
# Metadata benchmark: streamfs through FUSE side by side with kernel XFS and
# ext4, each on its own loop device over an image on one private tmpfs, at
# every file count in META_FILES. Per filesystem and count N, from a fresh mkfs:
#
#   create    creat+close N files in one directory (metaops.c, one process)
#   umount    after the creates, timed until the FUSE daemon has exited and
#             released the device (umount returns before that); for XFS/ext4
#             the umount command itself
#   mount     mount with N files (a FUSE mount counts until the mount point is
#             live), then a clean umount and a second mount (their times too)
#   stat      stat of the N files, caches cold (just mounted)
#   readdir   getdents64 over the N-entry directory (1 MiB buffer)
#   append    APPEND_WRITES appending 4 KiB O_DIRECT pwrites, fdatasync each
#   stall     a 4 KiB O_DIRECT sequential writer in directory a/ times every
#             pwrite while a create storm of min(N, STORM_FILES) files runs in
#             directory storm/: longest write and p99
#   rename    rename the N files in their directory
#   unlink    unlink them
#   RSS       the daemon's VmRSS/VmHWM (/proc/PID/status) after the creates,
#             after mount + stat + readdir, and its peak at the end
#
# Metadata bytes come from the loop device's write counter
# (/sys/block/loopN/stat, sectors written), so they are measured alike for the
# three filesystems: per create, from before the create loop until the
# filesystem was unmounted (the daemon exited), so the final checkpoint/log
# flush is included; per append, from before the first write until the last
# fdatasync returned, minus the 4096 data bytes of each write.
#
# Ratios are streamfs / reference: for rates (ops/s) above 1 means streamfs is
# faster; for times, bytes, RSS and latencies above 1 means streamfs is worse.
#
# Usage: sudo scripts/bench/meta.sh [--quick] [--csv FILE]
#   --quick   META_FILES="10000 100000" APPEND_WRITES=4096 STORM_FILES=20000
#             (about 2 minutes with the pre-B+tree streamfs)
#   --csv F   also write the results as CSV (files,metric,unit,fs,value) to F
# Environment (besides lib.sh's BENCH_OUT and STREAMFS_BIN, a prebuilt
# streamfs binary; default: built from this checkout):
#   META_FILES="10000 100000 1000000"  file counts, one full run each
#   FSES="streamfs xfs ext4"           filesystems (the ratios need xfs/ext4)
#   APPEND_WRITES=32768  appends: 256 MiB of journal at 2 blocks per commit,
#                  so journal wraps (checkpoints) are part of the average
#   STORM_FILES=1000000  the storm creates min(N, STORM_FILES) files: as many
#                  as the directory holds, so a full journal can happen during it
#   STALL_MIB=512  the stall writer appends, wrapping there
#   IMG_SIZE=32G  AGS=4 (streamfs --ag-count and mkfs.xfs agcount)
#   SFS_OPTS=   extra streamfs -o options
#   TMPFS_SIZE=12g  size limit of the private tmpfs under /tmp/bench-meta-PID
#   MOUNT_TIMEOUT=900  OP_TIMEOUT=7200  seconds before a mount or a loop is
#                  declared hung
# shellcheck source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"

QUICK=0
CSV=
while [ $# -gt 0 ]; do
	case $1 in
	--quick) QUICK=1 ;;
	--csv) CSV=${2:?--csv needs a file}; shift ;;
	--csv=*) CSV=${1#--csv=} ;;
	-h | --help) sed -n '2,/^source/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown argument $1 (see --help)" ;;
	esac
	shift
done
if [ "$QUICK" = 1 ]; then
	META_FILES=${META_FILES:-10000 100000}
	APPEND_WRITES=${APPEND_WRITES:-4096}
	STORM_FILES=${STORM_FILES:-20000}
fi
META_FILES=${META_FILES:-10000 100000 1000000}
APPEND_WRITES=${APPEND_WRITES:-32768}
STORM_FILES=${STORM_FILES:-1000000}
STALL_MIB=${STALL_MIB:-512}
FSES=${FSES:-streamfs xfs ext4}
IMG_SIZE=${IMG_SIZE:-32G}
AGS=${AGS:-4}
SFS_OPTS=${SFS_OPTS:-}
TMPFS_SIZE=${TMPFS_SIZE:-12g}
MOUNT_TIMEOUT=${MOUNT_TIMEOUT:-900}
OP_TIMEOUT=${OP_TIMEOUT:-7200}

# lib.sh's bench_init builds the go-fuse loopback daemons unless given; this
# benchmark does not use them.
LOOPBACK_BIN=${LOOPBACK_BIN:-unused}
STOCK_LOOPBACK_BIN=${STOCK_LOOPBACK_BIN:-unused}
BENCH_DIR=/tmp/bench-meta-$$
need gcc mkfs.ext4 awk

# clean_stale: a killed earlier run (its PID gone) may have left mounts, loop
# devices and its tmpfs under /tmp/bench-meta-PID.
clean_stale() {
	local d pid keep=$BENCH_DIR
	for d in /tmp/bench-meta-*; do
		[ -d "$d" ] || continue
		pid=${d##*-}
		[[ $pid =~ ^[0-9]+$ ]] || continue
		[ "$pid" != $$ ] && kill -0 "$pid" 2>/dev/null && continue
		log "cleaning up after an earlier run: $d"
		BENCH_DIR=$d
		preclean
		umount "$d" 2>/dev/null || umount -l "$d" 2>/dev/null || true
		rm -rf "$d"
	done
	BENCH_DIR=$keep
}

STALL_PID= # the stall writer while it runs
OP_PID=    # the running metaops loop

meta_cleanup() {
	local rc=$? i p
	set +e
	trap - EXIT INT TERM
	for p in "$OP_PID" "$STALL_PID"; do
		[ -n "$p" ] && kill -TERM "$p" 2>/dev/null
	done
	for i in $(printf '%s\n' "${!MOUNTS[@]}" | sort -rn); do
		unmount "${MOUNTS[$i]}"
	done
	for i in "${LOOPS[@]}"; do losetup -d "$i" 2>/dev/null; done
	preclean
	if mountpoint -q "$BENCH_DIR"; then
		umount "$BENCH_DIR" 2>/dev/null || umount -l "$BENCH_DIR"
	fi
	rm -rf "$BENCH_DIR"
	exit "$rc"
}

clean_stale
bench_init meta
trap meta_cleanup EXIT
mount -t tmpfs -o "size=$TMPFS_SIZE,mode=0755" streamfs-bench-meta "$BENCH_DIR"
log "private tmpfs (size=$TMPFS_SIZE) mounted on $BENCH_DIR"
W=$BENCH_DIR
METAOPS=$BENCH_OUT/metaops
gcc -O2 -Wall -o "$METAOPS" "$BENCH_ROOT/scripts/bench/metaops.c"

now() { echo "$EPOCHREALTIME"; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }

# proc_exited PID: true once PID is gone or a zombie.
proc_exited() {
	local st
	st=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null) || return 0
	[ -z "$st" ] || [ "$st" = Z ]
}

# mib_field PID FIELD: a /proc/PID/status field (kB) in MiB.
mib_field() {
	awk -v f="$2:" '$1 == f { printf "%.0f", $2 / 1024 }' "/proc/$1/status" 2>/dev/null || echo -
}

# written_bytes DEV: bytes written to a block device so far (sectors of 512).
written_bytes() {
	awk '{ printf "%.0f", $7 * 512 }' "/sys/block/${1#/dev/}/stat"
}

# run_op NAME metaops-args...: run a metaops loop in the background (so a
# signal is handled at once), fail on errors; sets OPS and SECS.
run_op() {
	local name=$1 rc=0 out
	shift
	out=$BENCH_OUT/$CASE.$name.out
	timeout -k 15 "$OP_TIMEOUT" "$METAOPS" "$@" >"$out" 2>&1 &
	OP_PID=$!
	wait "$OP_PID" || rc=$?
	OP_PID=
	[ "$rc" = 0 ] || { cat "$out" >&2; die "$CASE $name: metaops $* failed (exit $rc)"; }
	OPS=$(sed -n 's/.*ops=\([0-9]*\).*/\1/p' "$out")
	SECS=$(sed -n 's/.*secs=\([0-9.]*\).*/\1/p' "$out")
}

rate() { awk -v n="$1" -v s="$2" 'BEGIN { if (s > 0) printf "%.0f", n / s; else print "-" }'; }

# fs_mkfs FS DEV
fs_mkfs() {
	case $1 in
	streamfs) "$STREAMFS_BIN" mkfs --ag-count "$AGS" -f "$2" >/dev/null ;;
	xfs) mkfs.xfs -f -q -d agcount="$AGS" "$2" ;;
	# one inode per 4 KiB: room for the largest N plus the storm
	ext4) mkfs.ext4 -q -F -i 4096 "$2" ;;
	esac
}

# fs_mount FS DEV MNT: mount, set MOUNT_S (seconds) and, for streamfs, PID.
fs_mount() {
	local fs=$1 dev=$2 mnt=$3 t0 t
	mkdir -p "$mnt"
	MOUNT_N=$((${MOUNT_N:-0} + 1))
	t0=$(now)
	case $fs in
	streamfs)
		"$STREAMFS_BIN" mount ${SFS_OPTS:+-o "$SFS_OPTS"} "$dev" "$mnt" \
			2>"$BENCH_OUT/$CASE.daemon$MOUNT_N.log" &
		PID=$!
		MOUNTS+=("$mnt")
		DAEMON_PID[$mnt]=$PID
		t=$((MOUNT_TIMEOUT * 100))
		# 10 ms polls: the mount time resolution
		while ! mountpoint -q "$mnt"; do
			if proc_exited "$PID"; then
				cat "$BENCH_OUT/$CASE.daemon$MOUNT_N.log" >&2
				die "$CASE: streamfs daemon exited before mounting"
			fi
			t=$((t - 1))
			[ "$t" -gt 0 ] || die "$CASE: not mounted after $MOUNT_TIMEOUT s"
			sleep 0.01
		done
		;;
	xfs) mount -t xfs "$dev" "$mnt"; MOUNTS+=("$mnt") ;;
	# noinit_itable: no background inode-table zeroing in the write counters
	ext4) mount -t ext4 -o noinit_itable "$dev" "$mnt"; MOUNTS+=("$mnt") ;;
	esac
	MOUNT_S=$(elapsed "$t0" "$(now)")
}

# fs_umount FS MNT: unmount, set UMOUNT_S: for streamfs until the daemon has
# exited (it has then written its last checkpoint and released the device).
fs_umount() {
	local fs=$1 mnt=$2 t0 t rc=0
	t0=$(now)
	umount "$mnt" || die "$CASE: umount $mnt failed"
	if [ "$fs" = streamfs ]; then
		t=$((MOUNT_TIMEOUT * 100))
		while ! proc_exited "$PID"; do
			t=$((t - 1))
			[ "$t" -gt 0 ] || die "$CASE: daemon $PID still running $MOUNT_TIMEOUT s after umount"
			sleep 0.01
		done
		UMOUNT_S=$(elapsed "$t0" "$(now)")
		wait "$PID" || rc=$?
		[ "$rc" = 0 ] || log "$CASE: streamfs daemon exited with status $rc (see $BENCH_OUT/$CASE.daemon$MOUNT_N.log)"
	else
		UMOUNT_S=$(elapsed "$t0" "$(now)")
	fi
	unmount "$mnt" # bookkeeping only: already unmounted
}

# sfs_stats NAME: keep streamfs's own counters (checkpoints written, ...) with
# the raw output; not every version has them, so failure is no error.
sfs_stats() {
	[ "$FS" = streamfs ] || return 0
	"$STREAMFS_BIN" stats --json "$W/mnt-$FS" >"$BENCH_OUT/$CASE.$1.stats.json" 2>&1 || true
}

declare -A RES=() # "N|metric|fs" -> value
METRICS=(
	"create|creates/s" "stat|stats/s" "readdir|entries/s" "rename|renames/s" "unlink|unlinks/s"
	"mount|s" "mount2|s" "umount_dirty|s" "umount_clean|s"
	"rss_created|MiB" "hwm_created|MiB" "rss_loaded|MiB" "hwm_end|MiB"
	"stall_max|ms" "stall_p99|ms" "stall_writes|writes" "storm|creates/s"
	"meta_per_create|bytes" "meta_per_append|bytes" "append_sync|writes/s"
)
declare -A LABEL=(
	[create]="create (creat+close)" [stat]="stat, cold" [readdir]="readdir of the N-entry dir"
	[rename]="rename (same dir)" [unlink]="unlink"
	[mount]="mount with N files" [mount2]="mount again" [umount_dirty]="umount after creates"
	[umount_clean]="umount, clean"
	[rss_created]="daemon VmRSS after creates" [hwm_created]="daemon VmHWM after creates"
	[rss_loaded]="daemon VmRSS after mount+stat+readdir" [hwm_end]="daemon VmHWM at the end"
	[stall_max]="4k O_DIRECT writer: longest write during storm" [stall_p99]="4k O_DIRECT writer: p99 during storm"
	[stall_writes]="4k writes done during storm" [storm]="storm creates (other dir)"
	[meta_per_create]="metadata written per create" [meta_per_append]="metadata written per 4k append+fdatasync"
	[append_sync]="4k append+fdatasync"
)
put() { RES["$N|$1|$FS"]=$2; }

# run_case FS N: the whole sequence on a fresh filesystem.
run_case() {
	FS=$1
	N=$2
	CASE=$FS-$N
	MOUNT_N=0
	PID=
	local img=$W/$FS.img mnt=$W/mnt-$FS dev w0 storm out rc=0
	local sfs=0
	if [ "$FS" = streamfs ]; then sfs=1; fi
	log "$CASE: mkfs"
	truncate -s "$IMG_SIZE" "$img"
	dev=$(losetup -f --show "$img")
	LOOPS+=("$dev")
	fs_mkfs "$FS" "$dev"
	fs_mount "$FS" "$dev" "$mnt"
	mkdir "$mnt/d" "$mnt/a" "$mnt/storm"

	log "$CASE: create $N"
	w0=$(written_bytes "$dev")
	run_op create create "$mnt/d" "$N" f
	put create "$(rate "$OPS" "$SECS")"
	if [ "$sfs" = 1 ]; then
		put rss_created "$(mib_field "$PID" VmRSS)"
		put hwm_created "$(mib_field "$PID" VmHWM)"
	fi
	sfs_stats created
	fs_umount "$FS" "$mnt"
	put umount_dirty "$UMOUNT_S"
	put meta_per_create "$(awk -v a="$w0" -v b="$(written_bytes "$dev")" -v n="$N" 'BEGIN { printf "%.0f", (b - a) / n }')"

	log "$CASE: mount, umount, mount"
	fs_mount "$FS" "$dev" "$mnt"
	put mount "$MOUNT_S"
	fs_umount "$FS" "$mnt"
	put umount_clean "$UMOUNT_S"
	fs_mount "$FS" "$dev" "$mnt"
	put mount2 "$MOUNT_S"

	log "$CASE: stat, readdir"
	run_op stat stat "$mnt/d" "$N" f
	put stat "$(rate "$OPS" "$SECS")"
	run_op readdir readdir "$mnt/d"
	[ "$OPS" -ge "$N" ] || die "$CASE: readdir saw $OPS entries, want $N + 2"
	put readdir "$(rate "$OPS" "$SECS")"
	if [ "$sfs" = 1 ]; then put rss_loaded "$(mib_field "$PID" VmRSS)"; fi

	log "$CASE: append $APPEND_WRITES x 4k + fdatasync"
	w0=$(written_bytes "$dev")
	run_op append append "$mnt/a/wal" "$APPEND_WRITES" 1
	put append_sync "$(rate "$OPS" "$SECS")"
	put meta_per_append "$(awk -v a="$w0" -v b="$(written_bytes "$dev")" -v n="$APPEND_WRITES" \
		'BEGIN { printf "%.0f", (b - a - n * 4096) / n }')"

	storm=$((N < STORM_FILES ? N : STORM_FILES))
	log "$CASE: stall writer during a storm of $storm creates"
	rm -f "$W/stall.stop"
	out=$BENCH_OUT/$CASE.stall.out
	timeout -k 15 "$OP_TIMEOUT" "$METAOPS" stall "$mnt/a/writer" "$W/stall.stop" "$STALL_MIB" >"$out" 2>&1 &
	STALL_PID=$!
	run_op storm create "$mnt/storm" "$storm" s
	put storm "$(rate "$OPS" "$SECS")"
	touch "$W/stall.stop"
	wait "$STALL_PID" || rc=$?
	STALL_PID=
	[ "$rc" = 0 ] || { cat "$out" >&2; die "$CASE: stall writer failed (exit $rc)"; }
	put stall_max "$(sed -n 's/.*max_us=\([0-9]*\).*/\1/p' "$out" | awk '{ printf "%.2f", $1 / 1000 }')"
	put stall_p99 "$(sed -n 's/.*p99_us=\([0-9]*\).*/\1/p' "$out" | awk '{ printf "%.2f", $1 / 1000 }')"
	put stall_writes "$(sed -n 's/.*ops=\([0-9]*\).*/\1/p' "$out")"

	log "$CASE: rename, unlink"
	run_op rename rename "$mnt/d" "$N" f g
	put rename "$(rate "$OPS" "$SECS")"
	run_op unlink unlink "$mnt/d" "$N" g
	put unlink "$(rate "$OPS" "$SECS")"
	if [ "$sfs" = 1 ]; then put hwm_end "$(mib_field "$PID" VmHWM)"; fi
	sfs_stats end
	fs_umount "$FS" "$mnt"
	if [ "$sfs" = 1 ]; then
		# the device must be free and consistent once the daemon is gone
		rc=0
		"$STREAMFS_BIN" fsck -n "$dev" >"$BENCH_OUT/$CASE.fsck.out" 2>&1 || rc=$?
		FSCK["$N"]=$rc
	fi
	detach_loop "$dev"
	rm -f "$img"
	log "$CASE: done"
}

declare -A FSCK=()
for N in $META_FILES; do
	if ! [[ $N =~ ^[1-9][0-9]*$ ]]; then die "META_FILES: bad count $N"; fi
	for fs in $FSES; do
		run_case "$fs" "$N"
	done
done

# bin_id: the commit the streamfs binary was built from (Go's build info), or its checksum.
bin_id() {
	local rev=
	command -v go >/dev/null && rev=$(go version -m "$STREAMFS_BIN" 2>/dev/null | awk '$2 == "vcs.revision" { print substr($3, 1, 12) }')
	[ -n "$rev" ] && { echo "commit $rev"; return; }
	echo "sha256 $(sha256sum "$STREAMFS_BIN" | cut -c1-12)"
}

# ---- results
{
	echo "## streamfs metadata benchmark"
	echo
	echo "- $(date -u '+%Y-%m-%d %H:%M UTC'), kernel $(uname -r), $(nproc) CPUs, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)"
	echo "- streamfs: \`$STREAMFS_BIN\` ($(bin_id)), --ag-count $AGS, -o ${SFS_OPTS:-<defaults>}"
	echo "- XFS (agcount=$AGS) and ext4 (-i 4096, noinit_itable): kernel, each on a loop device; all images $IMG_SIZE sparse on one private tmpfs"
	echo "- every filesystem freshly made per file count; one directory of N files named f0..f(N-1)"
	echo "- metadata bytes: sectors written on the filesystem's loop device (/sys/block/loopN/stat);"
	echo "  per create: from before the creates until unmounted (daemon exited); per append: during the"
	echo "  $APPEND_WRITES appending 4 KiB O_DIRECT writes with fdatasync each, minus 4096 data bytes per write"
	echo "- stall: 4 KiB O_DIRECT sequential pwrites to a/writer (wrapping at $STALL_MIB MiB), each timed,"
	echo "  while min(N, $STORM_FILES) files are created in storm/"
	echo "- umount: until the FUSE daemon exited (device released); mount: until the mount point is live"
	echo "- ratio = streamfs / reference. Rates (/s): >1 streamfs faster. Times, bytes, MiB, ms: >1 streamfs worse"
	for N in $META_FILES; do
		echo
		echo "### $N files"
		echo
		hdr="| metric | unit |"
		for fs in $FSES; do hdr="$hdr $fs |"; done
		echo "$hdr streamfs/xfs | streamfs/ext4 |"
		echo "|---|---|$(for _ in $FSES; do printf -- '---:|'; done)---:|---:|"
		for m in "${METRICS[@]}"; do
			key=${m%%|*}
			unit=${m#*|}
			row="| ${LABEL[$key]} | $unit |"
			any=0
			for fs in $FSES; do
				v=${RES["$N|$key|$fs"]:-}
				[ -n "$v" ] && any=1
				row="$row ${v:--} |"
			done
			[ "$any" = 1 ] || continue
			s=${RES["$N|$key|streamfs"]:-}
			for ref in xfs ext4; do
				r=${RES["$N|$key|$ref"]:-}
				if [ -n "$s" ] && [ -n "$r" ]; then row="$row $(ratio "$s" "$r") |"; else row="$row - |"; fi
			done
			echo "$row"
		done
		if [ -n "${FSCK[$N]:-}" ]; then
			echo
			echo "streamfs fsck -n after the final unmount: exit ${FSCK[$N]} (0 = clean)"
		fi
	done
	echo
	echo "raw output: $BENCH_OUT"
} | tee "$BENCH_OUT/results.md"

if [ -n "$CSV" ]; then
	{
		echo "files,metric,unit,fs,value"
		for N in $META_FILES; do
			for m in "${METRICS[@]}"; do
				for fs in $FSES; do
					v=${RES["$N|${m%%|*}|$fs"]:-}
					[ -n "$v" ] && echo "$N,${m%%|*},${m#*|},$fs,$v"
				done
			done
		done
	} >"$CSV"
	log "CSV in $CSV"
fi
