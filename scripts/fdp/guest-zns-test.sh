#!/bin/sh
# Filesystem test on the emulated ZNS namespaces, run by the guest's /init.
# A ZNS namespace has no conventional zones, so the metadata goes to an
# image file in the guest's tmpfs (mkfs --metadev, mount -o metadev=).
#
# STREAMFS_ZNS_DEV (4 open, 6 active zones) is too tight for any stream:
# the zone allocator needs 2 generic slots, a reclaim slot per class and a
# slot per stream, so it offers none; the filesystem mounts and works with
# unstreamed data all the same. STREAMFS_ZNS_FS_DEV (14 open and active,
# 8 MiB zones of 6 MiB capacity, 128 MiB) gets the full test: two
# directories with streams 1 and 2, each stream's data in zones of its own
# (streamfs bmap --json), overwrites past the zones' capacity, which only
# works if reclaim resets zones (and stats counts the resets), then umount,
# fsck, remount and checksums.
set -u
tight=${STREAMFS_ZNS_DEV:?}
dev=${STREAMFS_ZNS_FS_DEV:?}
mnt=/mnt/zns
log=/tmp/streamfs-zns-mount.log
zone=8388608 # zoned.zone_size=8M in run.sh
cap_bytes=$((16 * 6291456)) # 16 zones of 6 MiB capacity (128M namespace)
meta_zones=4                # the 32 MiB metadata image, in 8 MiB zones
what="ZNS FS"
. /bin/guest-lib.sh

# zones FILE prints the zones FILE's extents lie in, one a line, from
# streamfs bmap --json (block numbers of block_size bytes).
zones() {
	streamfs bmap --json "$1" >/tmp/bmap.json || fail "bmap $1"
	bs=$(sed -n 's/.*"block_size":\([0-9]*\).*/\1/p' /tmp/bmap.json)
	tr '{' '\n' </tmp/bmap.json | while read -r x; do
		len=$(echo "$x" | sed -n 's/.*"length":\([0-9]*\).*/\1/p')
		blk=$(echo "$x" | sed -n 's/.*"block":\([0-9]*\).*/\1/p')
		[ -n "$len" ] && [ -n "$blk" ] || continue
		z=$((blk * bs / zone))
		while [ $z -le $(((blk * bs + len - 1) / zone)) ]; do
			echo $z
			z=$((z + 1))
		done
	done | sort -un
}

# zone_states DEV summarises the namespace's zone report: zones by state.
zone_states() {
	nvme zns report-zones "$1" 2>/dev/null | awk '/SLBA/ {
		for (i = 1; i <= NF; i++) if ($i == "State:") n[$(i + 1)]++
	} END { for (s in n) printf "%s=%d ", s, n[s]; print "" }'
}

mkdir -p "$mnt"

echo "guest: ZNS filesystem test, tight limits (4 open, 6 active)"
truncate -s 32M /tmp/meta-tight.img || fail "metadata image"
streamfs mkfs --metadev /tmp/meta-tight.img "$tight" || fail "mkfs (tight)"
streamfs info --metadev /tmp/meta-tight.img "$tight" || fail "info (tight)"
mount_fs metadev=/tmp/meta-tight.img "$tight"
streamfs stats "$mnt" | grep -q 'backend=.*zns' || fail "not on a zns backend: $(streamfs stats "$mnt" | head -n 1)"
max=$(streamfs stream max "$mnt" | grep -oE '[0-9]+' | tail -n 1)
echo "guest: GET_MAX with 4 open / 6 active zones: ${max:-?} streams"
dd if=/dev/urandom of="$mnt/f" bs=64k count=64 conv=fsync 2>/dev/null || fail "write (tight)"
sum=$(md5sum <"$mnt/f")
umount_fs
mount_fs metadev=/tmp/meta-tight.img "$tight"
[ "$(md5sum <"$mnt/f")" = "$sum" ] || fail "checksum after remount (tight)"
umount_fs

echo "guest: ZNS filesystem test (14 open and active)"
truncate -s 32M /tmp/meta.img || fail "metadata image"
streamfs mkfs --metadev /tmp/meta.img "$dev" || fail "mkfs"
mount_fs metadev=/tmp/meta.img "$dev"
max=$(streamfs stream max "$mnt" | grep -oE '[0-9]+' | tail -n 1)
echo "guest: GET_MAX with 14 open / 14 active zones: ${max:-?} streams"
[ "${max:-0}" -ge 2 ] || fail "stream max is '${max:-}', want >= 2"
for s in 1 2; do
	mkdir "$mnt/s$s" || fail "mkdir s$s"
	streamfs stream set "$mnt/s$s" "$s" || fail "stream set s$s"
done

# Four 4 MiB sources; round r writes source (i+r)%4 to file i, so every
# round changes every file.
for i in 0 1 2 3; do
	dd if=/dev/urandom of=/tmp/r$i bs=64k count=64 2>/dev/null || fail "random source"
done
files="s1/f0 s1/f1 s2/f0 s2/f1"
rounds=7 # 7 x 16 MiB = 112 MiB, past the 96 MiB the zones hold without a reset
r=0
while [ $r -lt $rounds ]; do
	i=0
	for f in $files; do
		dd if=/tmp/r$(((i + r) % 4)) of="$mnt/$f" bs=1M conv=notrunc,fsync 2>/dev/null ||
			fail "write $f, round $r"
		i=$((i + 1))
	done
	[ $r = 0 ] && echo "guest: zones after the first round: $(zone_states "$dev")"
	r=$((r + 1))
done
sync
written=$((rounds * 4 * 4194304))
echo "guest: ${written} bytes of file data written to ${cap_bytes} bytes of zone capacity"
[ $written -gt $cap_bytes ] || fail "the overwrites do not exceed the zone capacity"
echo "guest: zones after the overwrites: $(zone_states "$dev")"
resets=$(streamfs stats --json "$mnt" | sed -n 's/.*"reclaim_resets":\([0-9]*\).*/\1/p')
echo "guest: reclaim resets: ${resets:-?}"
[ "${resets:-0}" -gt 0 ] || fail "no zone reset after the overwrites"

check_zones() {
	for f in $files; do
		zones "$mnt/$f" >"/tmp/zones.$(echo "$f" | tr / _)" || fail "zones of $f"
		echo "guest: $f in zones $(tr '\n' ' ' <"/tmp/zones.$(echo "$f" | tr / _)")"
	done
	cat /tmp/zones.s1_* | sort -un >/tmp/zones.1
	cat /tmp/zones.s2_* | sort -un >/tmp/zones.2
	[ -s /tmp/zones.1 ] && [ -s /tmp/zones.2 ] || fail "no extents"
	shared=$(sort -n /tmp/zones.1 /tmp/zones.2 | uniq -d | tr '\n' ' ')
	[ -z "$shared" ] || fail "streams 1 and 2 share zones $shared"
	[ "$(head -n 1 /tmp/zones.1)" -ge $meta_zones ] && [ "$(head -n 1 /tmp/zones.2)" -ge $meta_zones ] ||
		fail "file data in the metadata device's zones"
}
check_zones
(cd "$mnt" && md5sum $files) >/tmp/zns-sums || fail "md5sum"
umount_fs

echo "guest: fsck -n"
streamfs fsck -n --metadev /tmp/meta.img "$dev" | tee /tmp/fsck.out | sed 's/^/guest: /'
grep -q ': clean$' /tmp/fsck.out || fail "fsck -n"

mount_fs metadev=/tmp/meta.img "$dev"
(cd "$mnt" && md5sum -c /tmp/zns-sums) || fail "checksums after remount"
[ "$(streamfs stream get "$mnt/s2" | grep -oE '[0-9]+' | tail -n 1)" = 2 ] ||
	fail "stream of s2 lost across remount"
check_zones
umount_fs
echo "guest: ZNS filesystem test passed"
