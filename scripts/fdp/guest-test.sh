#!/bin/sh
# Filesystem test on the emulated FDP drive, run by the guest's /init: mkfs
# and mount streamfs on the namespace with the nvme backend, write files in
# directories carrying streams 2..4, and check with nvme-cli that each
# stream's data consumed only its own reclaim unit handle; then remount and
# verify checksums. Stream 1 shares placement identifier 0 with unstreamed
# writes (metadata), so isolation is checked from stream 2 up.
set -u
dev=${STREAMFS_TEST_DEV:-/dev/nvme0n1}
mnt=/mnt/streamfs
log=/tmp/streamfs-mount.log
lba=$(sed -n 's/.*streamfs\.lba=\([0-9]*\).*/\1/p' /proc/cmdline)
lba=${lba:-4096}
ru_blocks=$((8388608 / lba)) # fdp.runs=8M in run.sh
what=FS
. /bin/guest-lib.sh

# ruamw prints "PID RUAMW" per placement identifier from nvme fdp status.
ruamw() {
	nvme fdp status "$dev" | awk '
		/^Placement Identifier/ { p = $3; sub(";", "", p) }
		/RUAMW/ { print p, $NF }'
}

echo "guest: filesystem test"
streamfs mkfs -f --backend nvme "$dev" || fail "mkfs"
mkdir -p "$mnt"
mount_fs backend=nvme "$dev"
streamfs stats "$mnt" || fail "stats"
streamfs stats "$mnt" | grep -q 'backend=nvme' || fail "not on the nvme backend"
max=$(streamfs stream max "$mnt" | grep -oE '[0-9]+' | tail -n 1)
[ "${max:-0}" -ge 4 ] || fail "stream max is '${max:-}', want >= 4"

for s in 2 3 4; do
	mkdir "$mnt/s$s" || fail "mkdir s$s"
	streamfs stream set "$mnt/s$s" "$s" || fail "stream set s$s"
done
sync
ruamw >/tmp/ruamw.before || fail "nvme fdp status"

# Stream s gets s-1 files of 1 MiB: 1, 2 and 3 MiB, all under one reclaim
# unit, and distinct so that one stream's data landing on another's handle
# shows.
for s in 2 3 4; do
	n=1
	while [ $n -lt $s ]; do
		dd if=/dev/urandom of="$mnt/s$s/f$n" bs=64k count=16 conv=fsync 2>/dev/null ||
			fail "write s$s/f$n"
		n=$((n + 1))
	done
done
sync
ruamw >/tmp/ruamw.after || fail "nvme fdp status"
(cd "$mnt" && md5sum s*/f*) >/tmp/sums || fail "md5sum"

echo "guest: handle  before  after  consumed(blocks)"
ok=1
while read -r p before; do
	after=$(awk -v p="$p" '$1 == p { print $2 }' /tmp/ruamw.after)
	if [ "$after" -le "$before" ]; then
		used=$((before - after))
	else
		used=$((before + ru_blocks - after)) # moved to a fresh reclaim unit
	fi
	s=$((p + 1))
	echo "guest: pid $p (stream $s)  $before  $after  $used"
	case $s in
	2 | 3 | 4)
		# Exactly the stream's file data: (s-1) MiB.
		want=$(((s - 1) * 1048576 / lba))
		[ "$used" -eq "$want" ] || {
			echo "guest: stream $s consumed $used blocks, want $want"
			ok=0
		}
		;;
	1) ;; # metadata and unstreamed writes land here too
	*)
		[ "$used" -eq 0 ] || {
			echo "guest: unused pid $p consumed $used blocks"
			ok=0
		}
		;;
	esac
done </tmp/ruamw.before
[ $ok = 1 ] || fail "placement isolation"

umount_fs
mount_fs backend=nvme "$dev"
(cd "$mnt" && md5sum -c /tmp/sums) || fail "checksums after remount"
[ "$(streamfs stream get "$mnt/s3" | grep -oE '[0-9]+' | tail -n 1)" = 3 ] ||
	fail "stream of s3 lost across remount"
umount_fs
echo "guest: filesystem test passed"
