#!/bin/sh
# /init of the FDP test guest (see run.sh): loads the NVMe driver, checks
# that the emulated drive shows FDP, runs the backend's VM tests (FDP, and
# ZNS on the zoned namespace of a second controller) and, when the
# initramfs holds streamfs, the filesystem tests (on FDP, then on ZNS);
# prints STREAMFS-FDP: PASS or FAIL on the console and powers off.
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run

t_boot=$(cut -d' ' -f1 /proc/uptime)
arg() { sed -n "s/.*\<streamfs\.$1=\([^ ]*\).*/\1/p" /proc/cmdline; }

finish() {
	t_end=$(cut -d' ' -f1 /proc/uptime)
	echo "STREAMFS-FDP-TIME: boot ${t_boot}s, tests $(awk -v a="$t_boot" -v b="$t_end" 'BEGIN{printf "%.1f", b-a}')s"
	echo "STREAMFS-FDP: $1"
	sync
	poweroff -f
	sleep 10
}
fail() {
	echo "guest: $*"
	finish FAIL
}

while read -r m; do
	insmod "/lib/modules/$m" || fail "insmod $m"
done </modules.order
# ctrl_of SERIAL names the controller (nvmeN) with that serial number: the
# driver probes controllers in parallel, so their numbers are not fixed.
ctrl_of() {
	for c in /sys/class/nvme/nvme*; do
		[ "$(tr -d ' ' <"$c/serial" 2>/dev/null)" = "$1" ] && basename "$c" && return 0
	done
	return 1
}
i=0
while :; do
	fdp=$(ctrl_of deadbeef) && [ -b "/dev/${fdp}n1" ] && [ -c "/dev/ng${fdp#nvme}n1" ] &&
		{ [ "$(arg zns)" != 1 ] || { zns=$(ctrl_of zns0) && [ -c "/dev/ng${zns#nvme}n1" ] && [ -c "/dev/ng${zns#nvme}n2" ]; }; } && break
	i=$((i + 1))
	[ $i -gt 300 ] && fail "no FDP (and zoned) namespaces after 30s"
	sleep 0.1
done
# ns_node NSID prints the suffix (the Y of ngXnY and nvmeXnY) of the zoned
# controller's namespace NSID: the kernel numbers the nodes in the order
# its parallel scan finds the namespaces, not by namespace ID.
ns_node() {
	for n in /dev/ng${zns#nvme}n*; do
		[ "$(nvme get-ns-id "$n" 2>/dev/null | grep -oE '[0-9]+$')" = "$1" ] && echo "${n##*n}" && return 0
	done
	echo "guest: no node for namespace $1 of $zns" >&2
	return 1
}
export STREAMFS_NVME_DEV="/dev/ng${fdp#nvme}n1" STREAMFS_NVME_BLOCK="/dev/${fdp}n1" STREAMFS_TEST_DEV="/dev/${fdp}n1"

# The drive must show FDP before any of our code runs.
nvme id-ctrl "/dev/$fdp" -H >/tmp/id-ctrl 2>&1 || fail "nvme id-ctrl"
grep -i 'Flexible Data Placement' /tmp/id-ctrl | head -n 2
grep -iq 'FDPS.*Supported\|Flexible Data Placement Supported' /tmp/id-ctrl ||
	grep -iE '\[19:19\].*0x1' /tmp/id-ctrl || fail "id-ctrl does not show FDP support"
nvme fdp configs "$STREAMFS_NVME_BLOCK" -e 1 || fail "nvme fdp configs"
nvme fdp status "$STREAMFS_NVME_BLOCK" || fail "nvme fdp status"
# Endurance group 1; bit 0 of the value is FDP enabled.
nvme get-feature "/dev/$fdp" -f 0x1d --cdw11=1 | tee /tmp/fdp-feature || fail "nvme get-feature 0x1d"
grep -qiE 'current value: *0x[0-9a-f]*[13579bdf]$' /tmp/fdp-feature || fail "FDP is not enabled"

echo "guest: backend test"
/bin/nvme-fdpvm.test -test.v -test.run 'TestVM' -test.skip 'TestVMZoned' -test.count=1 || fail "backend VM test"
echo "STREAMFS-FDP-BACKEND: PASS"

if [ "$(arg zns)" = 1 ]; then
	echo "guest: zoned namespace test"
	z1=$(ns_node 1) && z2=$(ns_node 2) || fail "zoned namespaces"
	nvme zns report-zones "/dev/ng${zns#nvme}n$z1" -d 4 || echo "guest: (nvme zns report-zones unavailable)"
	# The block node exists when the kernel has zoned block devices;
	# TestVMZonedOpen opens the namespace through it too when it does.
	zblk=
	[ -b "/dev/${zns}n$z1" ] && zblk="/dev/${zns}n$z1"
	STREAMFS_ZNS_DEV="/dev/ng${zns#nvme}n$z1" STREAMFS_ZNS_BLOCK="$zblk" \
		/bin/nvme-fdpvm.test -test.v -test.run 'TestVMZoned' -test.count=1 ||
		fail "zoned namespace test"
	echo "STREAMFS-ZNS-BACKEND: PASS"
fi

if [ "$(arg bench)" = 1 ]; then
	echo "guest: throughput benchmark"
	/bin/nvme-fdpvm.test -test.run '^$' -test.bench BenchmarkVMWrite -test.benchtime 3s -test.count "$(arg benchcount)" ||
		fail "benchmark"
fi

if [ "$(arg fs)" = 1 ]; then
	/bin/guest-test.sh || fail "filesystem test"
	echo "STREAMFS-FDP-FS: PASS"
	if [ "$(arg zns)" = 1 ]; then
		STREAMFS_ZNS_DEV="/dev/ng${zns#nvme}n$z1" STREAMFS_ZNS_FS_DEV="/dev/ng${zns#nvme}n$z2" \
			/bin/guest-zns-test.sh || fail "filesystem test on ZNS"
		echo "STREAMFS-ZNS-FS: PASS"
	fi
else
	echo "STREAMFS-FDP-FS: SKIP (no streamfs CLI in the initramfs)"
fi
finish PASS
