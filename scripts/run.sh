#!/usr/bin/env bash
# Sets up and runs streamfs on its default image, in the foreground:
#   - installs fuse3 if missing (Debian/Ubuntu, as root),
#   - builds the streamfs binary and installs it as
#     ${STREAMFS_BINDIR:-/usr/local/bin}/streamfs, on root's PATH and in
#     the directories mount(8) searches, so the README's commands and
#     mount -t fuse.streamfs work as typed,
#   - creates and formats the default image on first run:
#       ${STREAMFS_IMAGE:-/var/tmp/streamfs/default.img} (4 GiB, sparse),
#   - mounts it on ${STREAMFS_MNT:-/mnt/streamfs}.
# Stop it with Ctrl-C (or umount the mount point).
set -euo pipefail
cd "$(dirname "$0")/.."
IMG=${STREAMFS_IMAGE:-/var/tmp/streamfs/default.img}
MNT=${STREAMFS_MNT:-/mnt/streamfs}
SIZE=${STREAMFS_SIZE:-4G}
BINDIR=${STREAMFS_BINDIR:-/usr/local/bin}
BIN=$BINDIR/streamfs

if ! command -v fusermount3 >/dev/null 2>&1; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		echo "streamfs: installing fuse3 (apt-get)"
		DEBIAN_FRONTEND=noninteractive apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fuse3 >/dev/null
	else
		echo "streamfs needs fuse3 (apt-get install fuse3)" >&2
	fi
fi
command -v go >/dev/null || { echo "streamfs needs Go 1.26 or newer (https://go.dev/dl)" >&2; exit 1; }

# A crashed daemon leaves a dead mount: ls gives ENOTCONN (ECONNABORTED for
# a moment after a daemon that served over io_uring). Say what to do before
# mkdir trips over it.
lserr=$(ls "$MNT" 2>&1 >/dev/null || true)
if [[ $lserr == *"not connected"* || $lserr == *"connection abort"* ]]; then
	echo "streamfs: $MNT is a dead FUSE mount (its daemon died); clear it with: umount -l $MNT" >&2
	exit 1
fi
if mountpoint -q "$MNT" 2>/dev/null; then
	echo "streamfs: $MNT is already a mount point (umount $MNT first)" >&2
	exit 1
fi

mkdir -p "$(dirname "$IMG")" "$BINDIR" "$MNT"
echo "streamfs: building (the first build downloads modules and takes a minute)..."
go build -o "$BIN.new" . && mv -f "$BIN.new" "$BIN"
echo "streamfs: installed $BIN ($("$BIN" version))"
# mount(8) runs mount.fuse3 with no PATH of its own, and mount.fuse3 then
# finds the streamfs helper only in the shell's default directories.
mount_path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
case ":$mount_path:" in
*":$BINDIR:"*) ;;
*) echo "streamfs: note: mount -t fuse.streamfs finds the binary only in $mount_path, not in $BINDIR" ;;
esac
try="streamfs stream max $MNT"
case ":$PATH:" in
*":$BINDIR:"*) ;;
*)
	echo "streamfs: note: $BINDIR is not on your PATH; run it as $BIN"
	try="$BIN stream max $MNT"
	;;
esac
if [ ! -e "$IMG" ]; then
	echo "streamfs: formatting $IMG ($SIZE, sparse)"
	"$BIN" mkfs --size "$SIZE" "$IMG"
fi
echo "streamfs: mounting $IMG on $MNT (try: $try; Ctrl-C unmounts)"
exec "$BIN" mount "$IMG" "$MNT"
