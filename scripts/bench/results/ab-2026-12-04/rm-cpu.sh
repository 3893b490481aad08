#!/usr/bin/env bash
# rm -rf of N empty files (4 directories, made with xargs touch, then find + ls -lR)
# on a fresh streamfs: wall time, rm's own CPU (user+sys) and the daemon's CPU.
#   sudo rm-cpu.sh STREAMFS_BINARY [N] [mount options]   (alternate two binaries by hand)
set -euo pipefail
BIN=$1 N=${2:-40000} OPTS=${3:-}
W=/dev/shm/streamfs-rm-cpu.$$; mkdir -p $W/mnt
$BIN mkfs --size 16G --ag-count 16 -f $W/img >/dev/null
$BIN mount ${OPTS:+-o $OPTS} $W/img $W/mnt 2>$W/d.log & pid=$!
for i in $(seq 100); do grep -q serving $W/d.log 2>/dev/null && break; sleep 0.1; done
mkdir $W/mnt/t; for d in 0 1 2 3; do mkdir $W/mnt/t/d$d; done
for d in 0 1 2 3; do (cd $W/mnt/t/d$d && seq -f "f%.0f" 1 $((N/4)) | xargs touch) & done; wait $(jobs -p | grep -v "^$pid$") 2>/dev/null || true
find $W/mnt/t >/dev/null; ls -lR $W/mnt/t >/dev/null
c0=$(awk '{print $14+$15}' /proc/$pid/stat)
t0=$EPOCHREALTIME
/usr/bin/time -f "%U %S" -o $W/rmt rm -rf $W/mnt/t
t1=$EPOCHREALTIME
c1=$(awk '{print $14+$15}' /proc/$pid/stat)
echo "rm_wall=$(echo "$t1 - $t0" | bc) rm_cpu=$(awk '{print $1+$2}' $W/rmt) daemon_cpu=$(echo "($c1 - $c0)/100" | bc -l | cut -c1-5) load=$(cut -d' ' -f1 /proc/loadavg)"
umount $W/mnt; wait $pid || true
rm -rf $W
