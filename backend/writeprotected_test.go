package backend

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func TestWriteProtected(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "img")
	if err := os.WriteFile(img, make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	if wp, err := WriteProtected(img); wp || err != nil {
		t.Errorf("writable image: %v, %v; want false, nil", wp, err)
	}
	// A missing path is Open's to explain.
	if wp, err := WriteProtected(filepath.Join(dir, "missing")); wp || err != nil {
		t.Errorf("missing path: %v, %v; want false, nil", wp, err)
	}
	// An immutable file cannot be opened for writing, even by root.
	if os.Geteuid() != 0 {
		return
	}
	if out, err := exec.Command("chattr", "+i", img).CombinedOutput(); err != nil {
		t.Logf("chattr +i not available here (%v: %s); immutable case skipped", err, out)
		return
	}
	t.Cleanup(func() { _ = exec.Command("chattr", "-i", img).Run() })
	if wp, err := WriteProtected(img); !wp || err != nil {
		t.Errorf("immutable image: %v, %v; want true, nil", wp, err)
	}
}
