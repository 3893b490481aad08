#!/bin/sh
# /init of the FDP test guest (see run.sh): loads the NVMe driver, checks
# that the emulated drive shows FDP, runs the backend's VM test and, when the
# initramfs holds streamfs, the filesystem test; prints STREAMFS-FDP: PASS or
# FAIL on the console and powers off.
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
i=0
while [ ! -b /dev/nvme0n1 ] || [ ! -c /dev/ng0n1 ]; do
	i=$((i + 1))
	[ $i -gt 300 ] && fail "no /dev/nvme0n1 and /dev/ng0n1 after 30s"
	sleep 0.1
done

# The drive must show FDP before any of our code runs.
nvme id-ctrl /dev/nvme0 -H >/tmp/id-ctrl 2>&1 || fail "nvme id-ctrl"
grep -i 'Flexible Data Placement' /tmp/id-ctrl | head -n 2
grep -iq 'FDPS.*Supported\|Flexible Data Placement Supported' /tmp/id-ctrl ||
	grep -iE '\[19:19\].*0x1' /tmp/id-ctrl || fail "id-ctrl does not show FDP support"
nvme fdp configs /dev/nvme0n1 -e 1 || fail "nvme fdp configs"
nvme fdp status /dev/nvme0n1 || fail "nvme fdp status"
# Endurance group 1; bit 0 of the value is FDP enabled.
nvme get-feature /dev/nvme0 -f 0x1d --cdw11=1 | tee /tmp/fdp-feature || fail "nvme get-feature 0x1d"
grep -qiE 'current value: *0x[0-9a-f]*[13579bdf]$' /tmp/fdp-feature || fail "FDP is not enabled"

echo "guest: backend test"
/bin/nvme-fdpvm.test -test.v -test.run 'TestVM' -test.count=1 || fail "backend VM test"
echo "STREAMFS-FDP-BACKEND: PASS"

if [ "$(arg bench)" = 1 ]; then
	echo "guest: throughput benchmark"
	/bin/nvme-fdpvm.test -test.run '^$' -test.bench BenchmarkVMWrite -test.benchtime 3s -test.count "$(arg benchcount)" ||
		fail "benchmark"
fi

if [ "$(arg fs)" = 1 ]; then
	/bin/guest-test.sh || fail "filesystem test"
	echo "STREAMFS-FDP-FS: PASS"
else
	echo "STREAMFS-FDP-FS: SKIP (no streamfs CLI in the initramfs)"
fi
finish PASS
