# Shell functions of the guest's filesystem tests (sourced). The caller
# sets mnt (mount point), log (the daemon's output) and what (the test's
# name in failure messages).
pid=

fail() {
	echo "guest: $what FAIL: $*"
	[ -f "$log" ] && tail -n 20 "$log"
	[ -n "$pid" ] && umount "$mnt" 2>/dev/null
	exit 1
}

# mount_fs OPTIONS DEV mounts DEV on $mnt in the background and waits for
# the mount to show.
mount_fs() {
	streamfs mount -o "$1" "$2" "$mnt" >"$log" 2>&1 &
	pid=$!
	i=0
	until grep -q " $mnt fuse" /proc/mounts; do
		i=$((i + 1))
		kill -0 "$pid" 2>/dev/null || fail "mount daemon exited"
		[ $i -gt 600 ] && fail "not mounted after 60s"
		sleep 0.1
	done
}

umount_fs() {
	umount "$mnt" || fail "umount"
	wait "$pid" || fail "mount daemon exited with status $?"
	pid=
}
