package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestTarTree copies the Go toolchain's source tree in with tar, compares
// every file's sha256, remounts, compares again, and tars it back out.
func TestTarTree(t *testing.T) {
	requireEnv(t)
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Fatalf("go env GOROOT: %v", err)
	}
	src := filepath.Join(strings.TrimSpace(string(out)), "src")
	if _, err := os.Stat(src); err != nil {
		t.Fatalf("Go source tree: %v", err)
	}
	want := treeHashes(t, src)
	if len(want) < 1000 {
		t.Fatalf("only %d entries in %s", len(want), src)
	}

	img := mkfs(t, "2G")
	m := mountImage(t, img)
	x := m.path("x")
	if err := os.Mkdir(x, 0o755); err != nil {
		t.Fatal(err)
	}
	sh(t, "tar -C '"+src+"' -cf - . | tar -C '"+x+"' -xf -")
	compareMaps(t, "after tar in", want, treeHashes(t, x))

	m = m.remount(t)
	compareMaps(t, "after remount", want, treeHashes(t, x))

	back := filepath.Join(t.TempDir(), "back")
	if err := os.Mkdir(back, 0o755); err != nil {
		t.Fatal(err)
	}
	sh(t, "tar -C '"+x+"' -cf - . | tar -C '"+back+"' -xf -")
	compareMaps(t, "after tar out", want, treeHashes(t, back))
}
