package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestLoopDevice formats and mounts a loop device, so the block backend
// (O_DIRECT on the device) carries the data, and checks it over a remount.
func TestLoopDevice(t *testing.T) {
	requireEnv(t)
	img := filepath.Join(t.TempDir(), "loop.img")
	if err := os.WriteFile(img, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 1<<30); err != nil {
		t.Fatal(err)
	}
	out, err := tryCmd("losetup", "--find", "--show", img)
	if err != nil {
		t.Fatalf("losetup --find --show %s: %v: %s", img, err, out)
	}
	dev := strings.TrimSpace(out)
	t.Cleanup(func() {
		if out, err := tryCmd("losetup", "-d", dev); err != nil {
			t.Errorf("losetup -d %s: %v: %s", dev, err, out)
		}
	})

	// A device has its own size: --size is refused.
	if out, err := tryCmd(streamfsBin, "mkfs", "--size", "1G", dev); err == nil {
		t.Errorf("mkfs --size on a block device succeeded: %s", out)
	}
	streamfs(t, "mkfs", dev)
	m := mountImage(t, dev)
	// The daemon logs its serving line once the mount is tuned, just after
	// the mount point goes live.
	for i := 0; i < 50 && !strings.Contains(m.log.String(), `"backend": `); i++ {
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(m.log.String(), `"backend": "block"`) {
		t.Errorf("a loop device was not served by the block backend:\n%s", m.log.String())
	}
	// mkfs refuses a mounted device.
	if out, err := tryCmd(streamfsBin, "mkfs", "-f", dev); err == nil {
		t.Errorf("mkfs -f of a mounted device succeeded: %s", out)
	}

	want := map[string][]byte{}
	for i, n := range []int{0, 1, 4096, 100000, 1 << 20, 5<<20 + 7} {
		rel := fmt.Sprintf("dir%d/file%d", i%2, i)
		if err := os.MkdirAll(filepath.Dir(m.path(rel)), 0o755); err != nil {
			t.Fatal(err)
		}
		data := randBytes(int64(i), n)
		writeFile(t, m.path(rel), data, 0o644)
		want[rel] = data
	}
	// cp of a larger file, and O_DIRECT through dd.
	src := filepath.Join(t.TempDir(), "src")
	big := randBytes(99, 24<<20)
	if err := os.WriteFile(src, big, 0o644); err != nil {
		t.Fatal(err)
	}
	runCmd(t, "cp", src, m.path("big"))
	runCmd(t, "dd", "if="+src, "of="+m.path("direct"), "bs=1M", "oflag=direct", "status=none")
	want["big"], want["direct"] = big, big
	for rel, data := range want {
		checkContent(t, m.path(rel), data)
	}
	before := manifest(t, m.dir)

	m = m.remount(t)
	for rel, data := range want {
		checkContent(t, m.path(rel), data)
	}
	after := manifest(t, m.dir)
	// With the writeback cache the kernel keeps its own times for regular
	// files and does not advance them for O_DIRECT writes; the daemon
	// stamps those writes, so after a remount the time may only move on.
	for _, f := range []string{"mtime", "ctime"} {
		b, a := manifestField(before["direct"], f), manifestField(after["direct"], f)
		if a < b {
			t.Errorf("direct: %s went back from %d to %d over a remount", f, b, a)
		}
		before["direct"] = setManifestField(before["direct"], f, 0)
		after["direct"] = setManifestField(after["direct"], f, 0)
	}
	compareMaps(t, "loop device after remount", before, after)
	m.unmount(t)

	// The image behind the loop device holds the filesystem.
	info := streamfs(t, "info", dev)
	if !strings.Contains(info, "agcount=") {
		t.Errorf("streamfs info %s: %s", dev, info)
	}
}

// manifestField returns the numeric field f=N of a manifest line.
func manifestField(line, f string) int64 {
	for _, w := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(w, f+"="); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return -1
}

// setManifestField replaces field f of a manifest line with v.
func setManifestField(line, f string, v int64) string {
	ws := strings.Fields(line)
	for i, w := range ws {
		if strings.HasPrefix(w, f+"=") {
			ws[i] = f + "=" + strconv.FormatInt(v, 10)
		}
	}
	return strings.Join(ws, " ")
}
