package integration

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestMountErrors checks that misuse fails clearly: mkfs of a mounted
// image, a non-empty or missing mount point, a missing image.
func TestMountErrors(t *testing.T) {
	requireEnv(t)
	img := mkfs(t, "1G")
	m := mountImage(t, img)
	writeFile(t, m.path("f"), []byte("first mount"), 0o644)
	other := filepath.Join(t.TempDir(), "other")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	// mkfs of the mounted image is refused, with or without -f.
	for _, args := range [][]string{{"mkfs", img}, {"mkfs", "-f", img}} {
		if out, err := tryCmd(streamfsBin, args...); err == nil {
			t.Errorf("streamfs %s on a mounted image succeeded: %s", strings.Join(args, " "), out)
		}
	}
	checkContent(t, m.path("f"), []byte("first mount"))

	// A non-empty mount point.
	img2 := mkfs(t, "1G")
	full := filepath.Join(t.TempDir(), "full")
	if err := os.MkdirAll(filepath.Join(full, "something"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := tryCmd(streamfsBin, "mount", img2, full)
	if exitCode(err) <= 0 || !strings.Contains(out, "not an empty directory") {
		t.Errorf("mount on a non-empty directory: %v, want a clear error and a non-zero exit:\n%s", err, out)
	}
	// A missing mount point, a missing image.
	out, err = tryCmd(streamfsBin, "mount", img2, filepath.Join(t.TempDir(), "nodir"))
	if exitCode(err) <= 0 || !strings.Contains(out, "no such file or directory") {
		t.Errorf("mount on a missing directory: %v:\n%s", err, out)
	}
	missing := filepath.Join(t.TempDir(), "missing.img")
	out, err = tryCmd(streamfsBin, "mount", missing, other)
	if exitCode(err) <= 0 || !strings.Contains(out, missing) || !strings.Contains(out, "no such file or directory") {
		t.Errorf("mount of a missing image: %v, want the path and \"no such file or directory\":\n%s", err, out)
	}
	// An image with no filesystem on it.
	blank := filepath.Join(t.TempDir(), "blank.img")
	if err := os.WriteFile(blank, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(blank, 64<<20); err != nil {
		t.Fatal(err)
	}
	out, err = tryCmd(streamfsBin, "mount", blank, other)
	if exitCode(err) <= 0 || strings.Contains(out, "panic") {
		t.Errorf("mount of a blank image: %v:\n%s", err, out)
	}
	for _, p := range []string{full, other} {
		if isMounted(p) {
			t.Errorf("a failed mount left %s mounted", p)
			_, _ = tryCmd("umount", p)
		}
	}

	// After the first mount is gone, the image mounts again.
	m.unmount(t)
	m2 := mountAt(t, img, other)
	checkContent(t, m2.path("f"), []byte("first mount"))
}

// TestMkfsRefusals checks that mkfs does not overwrite a filesystem
// without -f.
func TestMkfsRefusals(t *testing.T) {
	requireEnv(t)
	img := mkfs(t, "256M")
	out, err := tryCmd(streamfsBin, "mkfs", img)
	if exitCode(err) <= 0 || !strings.Contains(out, "streamfs") || !strings.Contains(out, "-f") {
		t.Errorf("mkfs on an existing streamfs without -f: %v, want a refusal naming the filesystem and -f:\n%s", err, out)
	}
	// The refused mkfs changed nothing: the filesystem still mounts with
	// its data... after -f it is a fresh one.
	m := mountImage(t, img)
	writeFile(t, m.path("old"), []byte("old"), 0o644)
	m.unmount(t)
	if out, err := tryCmd(streamfsBin, "mkfs", img); err == nil {
		t.Errorf("second mkfs without -f succeeded: %s", out)
	}
	m = mountAt(t, img, m.dir)
	checkContent(t, m.path("old"), []byte("old"))
	m.unmount(t)
	streamfs(t, "mkfs", "-f", img)
	m = mountAt(t, img, m.dir)
	if names, err := os.ReadDir(m.dir); err != nil || len(names) != 0 {
		t.Errorf("after mkfs -f: %v %v, want an empty filesystem", names, err)
	}
	m.unmount(t)

	// An ext4 image.
	ext4 := filepath.Join(t.TempDir(), "ext4.img")
	if err := os.WriteFile(ext4, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(ext4, 256<<20); err != nil {
		t.Fatal(err)
	}
	runCmd(t, "mkfs.ext4", "-q", "-F", ext4)
	out, err = tryCmd(streamfsBin, "mkfs", ext4)
	if exitCode(err) <= 0 || !strings.Contains(out, "ext") || !strings.Contains(out, "-f") {
		t.Errorf("mkfs on an ext4 image without -f: %v, want a refusal naming ext4 and -f:\n%s", err, out)
	}
	if out, err := tryCmd("blkid", "-o", "value", "-s", "TYPE", ext4); err == nil && strings.TrimSpace(out) != "ext4" {
		t.Errorf("the refused mkfs damaged the ext4 image: blkid says %q", out)
	}
	streamfs(t, "mkfs", "-f", ext4)
	m = mountImage(t, ext4)
	writeFile(t, m.path("new"), []byte("new"), 0o644)
	checkContent(t, m.path("new"), []byte("new"))
}

// TestSigterm checks that SIGTERM unmounts cleanly: the daemon exits 0, the
// mount is gone and unsynced data was written out.
func TestSigterm(t *testing.T) {
	requireEnv(t)
	img := mkfs(t, "1G")
	m := mountImage(t, img, "commit=3600")
	data := randBytes(5, 3<<20+5)
	if err := os.WriteFile(m.path("unsynced"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := m.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-m.exited
	m.stopped = true
	if m.waitErr != nil {
		t.Errorf("streamfs mount after SIGTERM: %v\n%s", m.waitErr, m.log.String())
	}
	if isMounted(m.dir) {
		t.Fatalf("%s still mounted after SIGTERM", m.dir)
	}
	m = mountAt(t, img, m.dir, "commit=3600")
	checkContent(t, m.path("unsynced"), data)
	if !strings.Contains(m.log.String(), `"replayed_commits": 0,`) {
		t.Errorf("a clean unmount by SIGTERM left commits to replay:\n%s", m.log.String())
	}
}
