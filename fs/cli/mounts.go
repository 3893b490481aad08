package cli

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// streamfsMounts returns the mount points of path's streamfs mounts, from
// /proc/self/mountinfo: live ones, and dead ones whose daemon is gone (the
// kernel answers ENOTCONN there).
func streamfsMounts(path string) (live, dead []string) {
	abs, err := absPath(path)
	if err != nil {
		return nil, nil
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, nil
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		sep := slices.Index(f, "-")
		if sep < 5 || sep+2 >= len(f) || !strings.HasPrefix(f[sep+1], "fuse.streamfs") ||
			filepath.Clean(unescapeOctal(f[sep+2])) != filepath.Clean(abs) {
			continue
		}
		mnt := unescapeOctal(f[4])
		d, err := os.Open(mnt)
		switch {
		case err == nil:
			d.Close()
			live = append(live, mnt)
		case deadMountErr(err):
			dead = append(dead, mnt)
		}
	}
	return live, dead
}

// deadMountErr reports the errors a FUSE mount whose daemon died answers:
// ENOTCONN, or ECONNABORTED while the kernel still tears down the rings of
// a daemon that served over io_uring.
func deadMountErr(err error) bool {
	return errors.Is(err, syscall.ENOTCONN) || errors.Is(err, syscall.ECONNABORTED)
}

// unescapeOctal undoes /proc's octal escapes (\040 for a space).
func unescapeOctal(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
