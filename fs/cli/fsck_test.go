package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/streamfs/streamfs/backend"
	"github.com/streamfs/streamfs/fs/format"
	"github.com/streamfs/streamfs/fs/meta"
)

func fsckImage(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "img")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, 32<<20); err != nil {
		t.Fatal(err)
	}
	dev, err := backend.OpenFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if _, err := meta.Mkfs(dev, format.MkfsParams{}); err != nil {
		t.Fatal(err)
	}
	return path
}

func runFsck(args ...string) (int, string) {
	var out, errb bytes.Buffer
	code := Main(append([]string{"fsck"}, args...), &out, &errb)
	return code, out.String() + errb.String()
}

func TestFsckExitCodes(t *testing.T) {
	img := fsckImage(t)
	if code, out := runFsck(img); code != 0 || !strings.Contains(out, "clean") {
		t.Fatalf("clean image: exit %d\n%s", code, out)
	}
	if code, out := runFsck("-n", img); code != 0 {
		t.Fatalf("-n: exit %d\n%s", code, out)
	}
	for _, args := range [][]string{{}, {"-n", "-y", img}, {"--bogus", img}, {img, img}} {
		if code, out := runFsck(args...); code != 16 {
			t.Errorf("fsck %q: exit %d, want 16 (usage)\n%s", args, code, out)
		}
	}
	if code, _ := runFsck(filepath.Join(t.TempDir(), "missing")); code != 8 {
		t.Errorf("missing image: exit %d, want 8", code)
	}
	foreign := filepath.Join(t.TempDir(), "zeros")
	os.WriteFile(foreign, make([]byte, 1<<20), 0o644)
	if code, out := runFsck(foreign); code != 8 {
		t.Errorf("foreign image: exit %d, want 8\n%s", code, out)
	}
	// A mounted (locked) device is refused.
	held, err := backend.OpenFile(img, false)
	if err != nil {
		t.Fatal(err)
	}
	code, out := runFsck("-y", img)
	held.Close()
	if code != 8 || !strings.Contains(out, "in use") {
		t.Errorf("locked image: exit %d, want 8\n%s", code, out)
	}
	// A corrupt primary superblock: -n reports it, -y rewrites it.
	fh, err := os.OpenFile(img, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fh.WriteAt(make([]byte, 512), 0)
	fh.Close()
	if code, out := runFsck("-n", img); code != 4 || !strings.Contains(out, "primary superblock") {
		t.Fatalf("corrupt primary, -n: exit %d, want 4\n%s", code, out)
	}
	if code, out := runFsck("-y", img); code != 1 {
		t.Fatalf("corrupt primary, -y: exit %d, want 1\n%s", code, out)
	}
	if code, out := runFsck(img); code != 0 {
		t.Fatalf("after repair: exit %d, want 0\n%s", code, out)
	}
}

// On an emulated zoned image, info shows the zone geometry (text and JSON,
// from the image's label) and fsck -v lists the sequential zones.
func TestZonedInfoAndFsck(t *testing.T) {
	img := filepath.Join(t.TempDir(), "z.img")
	var out, errb bytes.Buffer
	if code := Main([]string{"mkfs", "--size", "129M", "--zoned", "zone=8M,conv=4,max_open=6,max_active=8", img}, &out, &errb); code != 0 {
		t.Fatalf("mkfs: exit %d\n%s%s", code, out.String(), errb.String())
	}
	out.Reset()
	if code := Main([]string{"info", img}, &out, &errb); code != 0 ||
		!strings.Contains(out.String(), "zones    =sequential=12 ") || !strings.Contains(out.String(), "zone=2048 blks (8 MiB)") ||
		!strings.Contains(out.String(), "conventional=4 ") || !strings.Contains(out.String(), "max_open=6 max_active=8") {
		t.Fatalf("info: exit %d\n%s%s", code, out.String(), errb.String())
	}
	out.Reset()
	if code := Main([]string{"info", "--json", img}, &out, &errb); code != 0 ||
		!strings.Contains(out.String(), `"zone_geometry"`) || !strings.Contains(out.String(), `"max_active": 8`) {
		t.Fatalf("info --json: exit %d\n%s%s", code, out.String(), errb.String())
	}
	code, text := runFsck("-n", "-v", img)
	if code != 0 || !strings.Contains(text, "12 sequential zones (12 empty)") || !strings.Contains(text, "GARBAGE") {
		t.Fatalf("fsck -v: exit %d\n%s", code, text)
	}
}
