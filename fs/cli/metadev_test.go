package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	sfs "github.com/streamfs/streamfs/fs"
)

// -o metadev= is made absolute (the background daemon does not keep the
// caller's directory); -o backend takes the zoned kinds.
func TestMountOptsMetaDev(t *testing.T) {
	o, err := parseMountOpts([]string{"metadev=meta.img,backend=zns"})
	if err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	if o.metaDev != filepath.Join(wd, "meta.img") || o.backend != "zns" {
		t.Errorf("metadev=meta.img,backend=zns: metaDev %q backend %q", o.metaDev, o.backend)
	}
	if _, err := parseMountOpts([]string{"backend=zoned"}); err != nil {
		t.Error(err)
	}
	if _, err := parseMountOpts([]string{"backend=smr"}); err == nil {
		t.Error("backend=smr accepted")
	}
}

// mkfs --metadev formats an emulated zoned image without conventional
// zones with its metadata on a second image; info and fsck read it with
// --metadev, and mkfs refuses what does not fit.
func TestMkfsMetaDev(t *testing.T) {
	dir := t.TempDir()
	metaImg, data := filepath.Join(dir, "meta.img"), filepath.Join(dir, "data.img")
	if err := os.WriteFile(metaImg, make([]byte, 0), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(metaImg, 32<<20); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := Main(args, &out, &errb)
		return code, out.String() + errb.String()
	}
	if code, out := run("mkfs", "--size", "64M", "--ftl", "op=7", "--metadev", metaImg, data); code != exitUsage {
		t.Errorf("--ftl with --metadev: exit %d\n%s", code, out)
	}
	if code, out := run("mkfs", "--size", "64M", "--metadev", filepath.Join(dir, "missing"), "--zoned", "zone=8M,conv=0", data); code != exitFail || !strings.Contains(out, "--metadev") {
		t.Errorf("missing metadata device: exit %d\n%s", code, out)
	}
	if code, out := run("mkfs", "--size", "64M", "--zoned", "zone=8M,conv=0", "--metadev", metaImg, data); code != exitOK || !strings.Contains(out, "backend  =file+zoned") {
		t.Fatalf("mkfs: exit %d\n%s", code, out)
	}
	code, out := run("info", "--json", "--metadev", metaImg, data)
	var doc sfs.InfoDoc
	if code != exitOK || json.Unmarshal([]byte(out), &doc) != nil || doc.Info.SizeBytes != 32<<20 {
		t.Errorf("info --metadev: exit %d, metadata area %d bytes\n%s", code, doc.Info.SizeBytes, out)
	}
	if code, out := run("fsck", "-n", "--metadev", metaImg, data); code != 0 || !strings.Contains(out, "clean") {
		t.Errorf("fsck -n --metadev: exit %d\n%s", code, out)
	}
	// Without its metadata device, the data device has no filesystem.
	if code, out := run("fsck", "-n", data); code == 0 {
		t.Errorf("fsck -n of the data device alone: exit 0\n%s", out)
	}
	if code, out := run("mkfs", "--metadev", metaImg, data); code != exitFail || !strings.Contains(out, "-f") {
		t.Errorf("mkfs over a filesystem's metadata device without -f: exit %d\n%s", code, out)
	}
	if code, out := run("mkfs", "-f", "--metadev", metaImg, data); code != exitOK {
		t.Errorf("mkfs -f again: exit %d\n%s", code, out)
	}
}
