#!/usr/bin/env bash
# Sets up and runs streamfs on its default image, in the foreground:
#   - installs fuse3 if missing (Debian/Ubuntu, as root),
#   - builds the streamfs binary,
#   - creates and formats the default image on first run:
#       ${STREAMFS_IMAGE:-/var/tmp/streamfs/default.img} (4 GiB, sparse),
#   - mounts it on ${STREAMFS_MNT:-/mnt/streamfs}.
# Stop it with Ctrl-C (or umount the mount point).
set -euo pipefail
cd "$(dirname "$0")/.."
IMG=${STREAMFS_IMAGE:-/var/tmp/streamfs/default.img}
MNT=${STREAMFS_MNT:-/mnt/streamfs}
SIZE=${STREAMFS_SIZE:-4G}
BIN=${STREAMFS_BIN:-/var/tmp/streamfs/streamfs}

if ! command -v fusermount3 >/dev/null 2>&1; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		DEBIAN_FRONTEND=noninteractive apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fuse3 >/dev/null
	else
		echo "streamfs needs fuse3 (apt-get install fuse3)" >&2
	fi
fi
command -v go >/dev/null || { echo "streamfs needs Go 1.26 or newer (https://go.dev/dl)" >&2; exit 1; }

mkdir -p "$(dirname "$IMG")" "$(dirname "$BIN")" "$MNT"
go build -o "$BIN" .
if [ ! -e "$IMG" ]; then
	"$BIN" mkfs --size "$SIZE" "$IMG"
fi
if mountpoint -q "$MNT"; then
	echo "$MNT is already a mount point (umount $MNT first)" >&2
	exit 1
fi
echo "streamfs: mounting $IMG on $MNT (try: $BIN stream max $MNT; Ctrl-C unmounts)"
exec "$BIN" mount "$IMG" "$MNT"
