package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	sfs "github.com/streamfs/streamfs/fs"
	"github.com/streamfs/streamfs/fs/meta"
)

// zonedImage makes an emulated zoned image: 4 conventional zones of 8 MiB
// (the metadata) and 12 sequential ones (96 MiB of file data).
func zonedImage(t *testing.T) string {
	t.Helper()
	img := mkfs(t, "129M", "--zoned", "zone=8M,conv=4")
	out := streamfs(t, "info", img)
	if !strings.Contains(out, "sequential=12 ") || !strings.Contains(out, "conventional=4 ") {
		t.Fatalf("info on the zoned image:\n%s", out)
	}
	return img
}

// fsckClean runs fsck -n -v on an unmounted image and fails unless it is
// clean; it returns the output.
func fsckClean(t *testing.T, img string) string {
	t.Helper()
	out, err := tryCmd(streamfsBin, "fsck", "-n", "-v", img)
	if err != nil || !strings.Contains(out, img+": clean") {
		t.Fatalf("fsck -n: %v\n%s", err, out)
	}
	return out
}

// zoneStats reads the mount's zone counters.
func zoneStats(t *testing.T, mnt string) *meta.ZoneCounters {
	t.Helper()
	var doc sfs.StatsDoc
	if err := json.Unmarshal([]byte(streamfs(t, "stats", "--json", mnt)), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Zones == nil {
		t.Fatalf("stats --json of a zoned mount has no zones")
	}
	return doc.Zones
}

// fileZones returns the zones a file's extents lie in, checking that every
// extent was written under stream.
func fileZones(t *testing.T, path string, stream uint32) []uint64 {
	t.Helper()
	var doc sfs.BmapDoc
	if err := json.Unmarshal([]byte(streamfs(t, "bmap", "--json", path)), &doc); err != nil {
		t.Fatal(err)
	}
	var zones []uint64
	for _, e := range doc.Extents {
		if e.Zone == nil || e.AG != nil || e.Stream != stream {
			t.Fatalf("%s: extent %+v: want a zone and stream %d", path, e, stream)
		}
		if !slices.Contains(zones, *e.Zone) {
			zones = append(zones, *e.Zone)
		}
	}
	if len(zones) == 0 {
		t.Fatalf("%s: no extents", path)
	}
	return zones
}

// TestZonedFio: fio's verified 8 KiB random O_DIRECT writes (libaio) into
// two directories of different streams, several times the device's data
// capacity, so reclaim cycles the zones; each stream's files stay in zones
// of their own; the data survives a kill -9 of the daemon and a remount;
// fsck is clean.
func TestZonedFio(t *testing.T) {
	requireEnv(t)
	img := zonedImage(t)
	m := mountImage(t, img)
	dirs := map[uint32]string{1: m.path("s1"), 2: m.path("s2")}
	args := []string{"--size=24m", "--bs=8k", "--rw=randwrite", "--ioengine=libaio", "--iodepth=4", "--direct=1",
		"--io_size=6m", "--loops=20", "--randrepeat=0", "--verify=crc32c", "--verify_fatal=1", "--verify_state_save=0"}
	for id, d := range dirs {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		streamfs(t, "stream", "set", d, fmt.Sprint(id))
		args = append(args, "--name=s"+fmt.Sprint(id), "--directory="+d)
	}
	// Up to 48 MiB live on 96 MiB, 240 MiB written, each loop over a
	// random quarter of the blocks: reclaim has to run, and copy (with
	// less live data, victims may all be empty by the time reclaim runs).
	runCmd(t, "fio", args...)

	zs := zoneStats(t, m.dir)
	t.Logf("zones: %d resets, %d MiB written, %d MiB reclaimed, write amplification %.2f",
		zs.Resets, zs.WrittenBytes>>20, zs.ReclaimedBytes>>20, zs.WriteAmp)
	if zs.Resets < 24 || zs.WrittenBytes < 2*96<<20 || zs.ReclaimedBytes == 0 {
		t.Fatalf("%d zone resets after %d MiB written to 96 MiB of zones: reclaim did not cycle the device twice (%d MiB copied)", zs.Resets, zs.WrittenBytes>>20, zs.ReclaimedBytes>>20)
	}
	for _, id := range []uint32{1, 2} {
		if s := zs.Streams[id]; s.WrittenBytes == 0 {
			t.Errorf("stream %d wrote nothing: %+v", id, zs.Streams)
		}
	}
	text := streamfs(t, "stats", m.dir)
	if !strings.Contains(text, "reclaim victims=") || !strings.Contains(text, "zone cache: hits=") {
		t.Errorf("stats text has no zone counters:\n%s", text)
	}

	// Each stream's data lies in zones of its own.
	zonesOf := map[uint32][]uint64{}
	sums := map[string]string{}
	for id, d := range dirs {
		names, err := filepath.Glob(filepath.Join(d, "*"))
		if err != nil || len(names) == 0 {
			t.Fatalf("fio files in %s: %v %v", d, names, err)
		}
		for _, p := range names {
			zonesOf[id] = append(zonesOf[id], fileZones(t, p, id)...)
			if sums[p], err = fileSHA(p); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, z := range zonesOf[1] {
		if slices.Contains(zonesOf[2], z) {
			t.Errorf("zone %d holds data of both streams (stream 1: %v, stream 2: %v)", z, zonesOf[1], zonesOf[2])
		}
	}

	// kill -9 after fsync: everything fsync'd is there after a remount.
	for p := range sums {
		syncPath(t, p)
	}
	m.kill(t)
	m = mountAt(t, img, m.dir)
	for p, want := range sums {
		if got, err := fileSHA(p); err != nil || got != want {
			t.Errorf("%s after kill -9 and remount: sha %s (%v), want %s", p, got, err, want)
		}
	}
	m.unmount(t)
	out := fsckClean(t, img)
	if !strings.Contains(out, "sequential zones") || !strings.Contains(out, "GARBAGE") {
		t.Errorf("fsck -v on a zoned image lists no zones:\n%s", out)
	}
}

// TestZonedEdits: partial-block overwrites, truncates, hole punches and
// appends through coreutils go out of place and read back before and after
// a remount; preallocation is refused with EOPNOTSUPP, as XFS refuses it
// on zoned devices; fsck is clean.
func TestZonedEdits(t *testing.T) {
	requireEnv(t)
	img := zonedImage(t)
	m := mountImage(t, img)
	f := m.path("f")
	want := randBytes(1, 1<<20+123)
	writeFile(t, f, want, 0o644)
	patch := filepath.Join(t.TempDir(), "patch")
	// Partial-block overwrites: unaligned offsets and lengths.
	for i, at := range []int{1, 4095, 8190, 100000, 1<<20 - 50} {
		p := randBytes(int64(10+i), 5000+i*777)
		if err := os.WriteFile(patch, p, 0o644); err != nil {
			t.Fatal(err)
		}
		runCmd(t, "dd", "if="+patch, "of="+f, "bs=64k", "seek="+fmt.Sprint(at), "oflag=seek_bytes", "conv=notrunc,fsync", "status=none")
		if end := at + len(p); end > len(want) {
			want = append(want, make([]byte, end-len(want))...)
		}
		copy(want[at:], p)
		checkContent(t, f, want)
	}
	// Truncate to a partial block, extend (a hole), write past the end.
	runCmd(t, "truncate", "-s", "300001", f)
	want = want[:300001]
	runCmd(t, "truncate", "-s", "400000", f)
	want = append(want, make([]byte, 100000-1)...)
	checkContent(t, f, want)
	runCmd(t, "sh", "-c", "printf 'appended' >> "+f)
	want = append(want, "appended"...)
	// Punch a hole with partial blocks at both edges.
	runCmd(t, "fallocate", "-p", "-o", "5000", "-l", "20000", f)
	clear(want[5000:25000])
	checkContent(t, f, want)
	// Preallocation holds a place in a zone for a later write: refused.
	for _, a := range [][]string{{"-l", "2M", m.path("g")}, {"-o", "0", "-l", "2M", f}, {"-n", "-o", "1M", "-l", "1M", f}} {
		out, err := tryCmd("fallocate", a...)
		if err == nil || !(strings.Contains(out, "not supported") || strings.Contains(out, "unsupported")) {
			t.Errorf("fallocate %s: %v %s, want EOPNOTSUPP", strings.Join(a, " "), err, out)
		}
	}
	checkContent(t, f, want)
	if zs := zoneStats(t, m.dir); zs.Streams[0].WrittenBytes == 0 {
		t.Errorf("no bytes counted for stream 0: %+v", zs)
	}
	m = m.remount(t)
	checkContent(t, f, want)
	m.unmount(t)
	fsckClean(t, img)
}
