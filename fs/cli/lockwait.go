package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/streamfs/streamfs/backend"
)

// lockWait bounds how long mkfs, mount and fsck wait for a device's lock.
// A FUSE mount that is not fuseblk gets no DESTROY: umount returns while
// the daemon is still writing its final checkpoint and holds the lock.
// STREAMFS_LOCK_WAIT=SECONDS changes it (0: do not wait).
func lockWait() time.Duration {
	if v, err := strconv.Atoi(os.Getenv("STREAMFS_LOCK_WAIT")); err == nil && v >= 0 {
		return time.Duration(v) * time.Second
	}
	return 30 * time.Second
}

// openWaiting opens the device like backend.Open, but while its lock (or
// its metadata device's) is held by a process that is not serving a mount
// (a daemon still exiting after umount) it waits, up to lockWait, saying so
// once on stderr.
func openWaiting(path string, o backend.OpenOptions, stderr io.Writer, cmd string) (backend.Device, error) {
	deadline := time.Now().Add(lockWait())
	said := false
	for {
		dev, err := backend.Open(path, o)
		if err == nil || !errors.Is(err, backend.ErrBusy) || time.Now().After(deadline) {
			return dev, err
		}
		paths := []string{path}
		if o.MetaPath != "" {
			paths = append(paths, o.MetaPath)
		}
		for _, p := range paths {
			if mounted, _ := backend.IsMounted(p); mounted {
				return nil, err
			}
		}
		if !said {
			who := "another process"
			pid := lockHolder(path)
			if pid == 0 && o.MetaPath != "" {
				pid = lockHolder(o.MetaPath)
			}
			if pid > 0 {
				who = fmt.Sprintf("PID %d", pid)
				if c, rerr := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); rerr == nil {
					who += " (" + strings.TrimSpace(string(c)) + ")"
				}
			}
			fmt.Fprintf(stderr, "streamfs %s: waiting for the device lock held by %s…\n", cmd, who)
			said = true
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// lockHolder returns the PID holding a flock on path, from /proc/locks, or 0.
func lockHolder(path string) int {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0
	}
	want := fmt.Sprintf("%02x:%02x:%d", unix.Major(uint64(st.Dev)), unix.Minor(uint64(st.Dev)), st.Ino)
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		// "1: FLOCK  ADVISORY  WRITE 1234 00:2b:5678 0 EOF"; blocked
		// waiters have "->" after the number.
		f := strings.Fields(line)
		if len(f) < 6 || f[1] != "FLOCK" || f[5] != want {
			continue
		}
		if pid, err := strconv.Atoi(f[4]); err == nil && pid > 0 {
			return pid
		}
	}
	return 0
}
