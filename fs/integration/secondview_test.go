package integration

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestSecondView: mounting an already-mounted image again gives a second
// view of the same filesystem, as the kernel does for a block device
// (xfstests generic/732), each view with its own ro/rw; the daemon serves
// both and exits once the last is unmounted.
func TestSecondView(t *testing.T) {
	requireEnv(t)
	img := mkfs(t, "1G")
	m := mountImage(t, img)
	writeFile(t, m.path("f"), []byte("first view"), 0o644)

	rw := filepath.Join(t.TempDir(), "rw")
	ro := filepath.Join(t.TempDir(), "ro")
	for _, d := range []string{rw, ro} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, d := range []string{rw, ro} {
			if isMounted(d) {
				_, _ = tryCmd("umount", "-l", d)
			}
		}
	})
	streamfs(t, "mount", img, rw)
	if !isMounted(rw) {
		t.Fatalf("second mount of %s: %s is not mounted", img, rw)
	}
	// The mount helper form (mount -t fuse.streamfs) does the same.
	streamfs(t, img, ro, "-o", "ro")
	if !isMounted(ro) {
		t.Fatalf("read-only second mount of %s: %s is not mounted", img, ro)
	}

	// One filesystem: what one view writes, the others show.
	checkContent(t, filepath.Join(rw, "f"), []byte("first view"))
	writeFile(t, filepath.Join(rw, "g"), []byte("second view"), 0o644)
	checkContent(t, m.path("g"), []byte("second view"))
	checkContent(t, filepath.Join(ro, "g"), []byte("second view"))
	if err := os.WriteFile(filepath.Join(ro, "h"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("create in the read-only view: %v, want EROFS", err)
	}

	// Unmounting a view leaves the filesystem to the others.
	for _, d := range []string{rw, ro} {
		runCmd(t, "umount", d)
	}
	checkContent(t, m.path("g"), []byte("second view"))
	m.unmount(t)
}
