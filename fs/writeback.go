package fs

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"
)

// The FUSE writeback cache (CAP_WRITEBACK_CACHE) lets the kernel's page
// cache absorb buffered writes and send them to the daemon as large
// asynchronous WRITEs (up to MaxWrite, 1 MiB) when it writes pages back;
// the daemon allocates blocks only then, so allocation is delayed to
// writeback and each file's data arrives in order and lands contiguously.
// In this mode the kernel owns a regular file's size, mtime and ctime: it
// sends them with SETATTR (on fsync, close and inode writeback), upgrades
// O_WRONLY opens to O_RDWR (it may have to read a partial page) and writes
// dirty pages back before FLUSH and FSYNC, so close and fsync still report
// and cover everything written.

// isWriteback reports whether a WRITE is page-cache writeback: the kernel
// sends those without credentials (fuse_writepage_args: nocreds), so the
// caller's pid is 0, while every write(2) that reaches the daemon directly
// (O_DIRECT, write-through to drop setuid bits) carries the writer's pid.
func isWriteback(ctx context.Context) bool {
	c, ok := ctx.(*fuse.Context)
	return ok && c.Caller.Pid == 0
}

// bdiTuning is what tuneWriteback writes under /sys/class/bdi/MAJ:MIN/.
// The kernel gives every FUSE mount a strict dirty limit of 1% of the
// dirty threshold (BDI_CAP_STRICTLIMIT, max_ratio 1: about 25 MB here),
// because an unprivileged daemon must not be able to pin the machine's
// memory in dirty pages. Under that limit balance_dirty_pages throttles
// every buffered writer as soon as a few MiB are dirty, which is why the
// writeback cache made 1 MiB buffered writes slower than write-through.
// streamfs runs as root and owns its device, so the mount gets the limits
// of a block device (a loop device's defaults): no strict limit, up to the
// whole dirty threshold. The global dirty limits still bound it.
var bdiTuning = []struct{ file, value string }{
	{"strict_limit", "0"},
	{"max_ratio", "100"},
}

// tuneWriteback lifts the FUSE dirty-page limits of the mount at
// mountpoint. Failing (not root, an older kernel without these files) only
// costs speed, so it is logged, not returned.
func tuneWriteback(mountpoint string, log *zap.Logger) {
	if abs, err := filepath.Abs(mountpoint); err == nil {
		mountpoint = abs
	}
	dev, err := mountDevice(mountpoint)
	if err == nil {
		dir := filepath.Join("/sys/class/bdi", dev)
		for _, t := range bdiTuning {
			if werr := os.WriteFile(filepath.Join(dir, t.file), []byte(t.value), 0); werr != nil {
				err = fmt.Errorf("setting %s: %w", t.file, werr)
				break
			}
		}
	}
	if err != nil && log != nil {
		log.Info("writeback cache keeps the kernel's FUSE dirty limits (buffered writes are throttled early)",
			zap.String("mountpoint", mountpoint), zap.Error(err))
	}
}

// mountDevice returns the MAJ:MIN of the mount at mountpoint from
// /proc/self/mountinfo (a stat would be a FUSE request to ourselves).
func mountDevice(mountpoint string) (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("finding the mount's device: %w", err)
	}
	defer f.Close()
	dev := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent MAJ:MIN root mountpoint ...; the last match is the top mount.
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && unescapeMountinfo(fields[4]) == mountpoint {
			dev = fields[2]
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("reading /proc/self/mountinfo: %w", err)
	}
	if dev == "" {
		return "", fmt.Errorf("%s is not in /proc/self/mountinfo", mountpoint)
	}
	return dev, nil
}

// unescapeMountinfo undoes the octal escapes (\040 for a space) of mountinfo.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%3o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
