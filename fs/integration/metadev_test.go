package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/streamfs/streamfs/backend"
	"github.com/streamfs/streamfs/backend/zoned"
	sfs "github.com/streamfs/streamfs/fs"
)

// zonedCounters reads the emulated zoned image's counters (unmounted).
func zonedCounters(t *testing.T, img string) zoned.Counters {
	t.Helper()
	d, err := backend.Open(img, backend.OpenOptions{ReadOnly: true, Kind: "zoned"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	z, ok := d.(*zoned.Device)
	if !ok {
		t.Fatalf("%s opens as %s, not an emulated zoned device", img, d.Kind())
	}
	return z.Counters()
}

// TestMetaDev runs the filesystem on a zoned device without conventional
// zones and its metadata on a second device, through the CLI: mkfs
// --zoned conv=0 --metadev, mount -o metadev=, streams in different zones,
// overwrites until reclaim resets zones, remount, the data read back.
func TestMetaDev(t *testing.T) {
	requireEnv(t)
	dir := t.TempDir()
	metaImg, data := filepath.Join(dir, "meta.img"), filepath.Join(dir, "data.img")
	const zoneSize = 8 << 20
	if err := os.WriteFile(metaImg, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(metaImg, 32<<20); err != nil {
		t.Fatal(err)
	}
	// 16 zones of 6 MiB capacity: 96 MiB for file data.
	spec := fmt.Sprintf("zone=%d,cap=6M,conv=0,max_open=14,max_active=14", zoneSize)
	streamfs(t, "mkfs", "--size", "128M", "--zoned", spec, "--metadev", metaImg, data)

	// The metadata device now holds a filesystem: mkfs wants -f.
	if out, err := tryCmd(streamfsBin, "mkfs", "--metadev", metaImg, data); err == nil || !strings.Contains(out, "metadata device") {
		t.Errorf("mkfs over the metadata device of a filesystem without -f: %v\n%s", err, out)
	}
	// A plain image is no zoned data device.
	plain := filepath.Join(dir, "plain.img")
	if out, err := tryCmd(streamfsBin, "mkfs", "--size", "64M", "--metadev", metaImg, "-f", plain); err == nil || !strings.Contains(out, "zoned") {
		t.Errorf("mkfs --metadev on a plain image: %v\n%s", err, out)
	}
	// The data device alone has no superblock.
	if out, err := tryCmd(streamfsBin, "fsck", "-n", data); err == nil {
		t.Errorf("fsck of the data device without its metadata device succeeded:\n%s", out)
	}

	var info sfs.InfoDoc
	if err := json.Unmarshal([]byte(streamfs(t, "info", "--json", "--metadev", metaImg, data)), &info); err != nil {
		t.Fatal(err)
	}
	if info.Info.SizeBytes != 32<<20 {
		t.Errorf("info: metadata area of %d bytes, want the metadata image's 32 MiB", info.Info.SizeBytes)
	}
	before := zonedCounters(t, data)

	m := mountImage(t, data, "metadev="+metaImg)
	if !m.logShows(`"backend": "file+zoned"`) {
		t.Errorf("not mounted on the split device:\n%s", m.log.String())
	}
	for s, d := range []string{"a", "b"} {
		if err := os.Mkdir(m.path(d), 0o755); err != nil {
			t.Fatal(err)
		}
		streamfs(t, "stream", "set", m.path(d), fmt.Sprint(s+1))
	}
	files := []string{"a/f0", "a/f1", "b/f0", "b/f1"}
	const fileSize = 8 << 20
	// Each round rewrites every file in place: 4 rounds of 32 MiB are
	// more than the 96 MiB the zones take without a reset.
	const rounds = 4
	for r := 0; r < rounds; r++ {
		for i, f := range files {
			writeFile(t, m.path(f), randBytes(int64(r*10+i), fileSize), 0o644)
		}
	}
	zonesOf := func(f string) map[uint64]bool {
		var doc sfs.BmapDoc
		if err := json.Unmarshal([]byte(streamfs(t, "bmap", "--json", m.path(f))), &doc); err != nil {
			t.Fatalf("bmap --json %s: %v", f, err)
		}
		zs := map[uint64]bool{}
		for _, e := range doc.Extents {
			first := e.Block * uint64(doc.BlockSize) / zoneSize
			last := (e.Block*uint64(doc.BlockSize) + e.Length - 1) / zoneSize
			for z := first; z <= last; z++ {
				if z < 4 {
					t.Errorf("%s: extent %+v in zone %d, one of the metadata device's", f, e, z)
				}
				zs[z] = true
			}
		}
		return zs
	}
	check := func(m *mount) {
		t.Helper()
		for i, f := range files {
			checkContent(t, m.path(f), randBytes(int64((rounds-1)*10+i), fileSize))
		}
		a := zonesOf("a/f0")
		for z := range zonesOf("a/f1") {
			a[z] = true
		}
		for _, f := range []string{"b/f0", "b/f1"} {
			for z := range zonesOf(f) {
				if a[z] {
					t.Errorf("%s (stream 2) has data in zone %d, which holds stream 1's too", f, z)
				}
			}
		}
	}
	check(m)
	m.unmount(t)
	after := zonedCounters(t, data)
	if after.Resets <= before.Resets {
		t.Errorf("no zone reset after %d MiB of overwrites on 96 MiB of zones: %+v", rounds*len(files)*fileSize>>20, after)
	}
	t.Logf("data device: %+v", after)
	if out, err := tryCmd(streamfsBin, "fsck", "-n", "--metadev", metaImg, data); err != nil || !strings.Contains(out, ": clean") {
		t.Errorf("fsck -n --metadev: %v\n%s", err, out)
	}
	check(mountAt(t, data, m.dir, m.opts...))
}
