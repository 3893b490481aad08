package split

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/streamfs/streamfs/backend"
	"github.com/streamfs/streamfs/backend/faulty"
	"github.com/streamfs/streamfs/backend/zoned"
)

const zs = 64 << 10 // zone size

// dataGeometry: a ZNS-like emulated image, no conventional zones; 3 open
// and 4 active zones.
func dataGeometry() zoned.Geometry {
	return zoned.Geometry{ZoneSize: zs, MaxOpen: 3, MaxActive: 4, Sector: 512}
}

// imageSize is what a zoned image of zones zones takes: the zones, two
// one-block state slots and the label.
func imageSize(zones int) int64 { return int64(zones)*zs + 3*4096 }

func sizedFile(t *testing.T, name string, size int64) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, size); err != nil {
		t.Fatal(err)
	}
	return p
}

// images makes an 8-zone zoned data image and a metadata file of two and
// a half zones (so two metadata zones, the rest unused).
func images(t *testing.T) (data, meta string) {
	t.Helper()
	data = sizedFile(t, "data.img", imageSize(8))
	if l, err := zoned.FormatFile(data, dataGeometry()); err != nil || l.Zones != 8 {
		t.Fatalf("format: %d zones, %v", l.Zones, err)
	}
	return data, sizedFile(t, "meta.img", 2*zs+zs/2)
}

func openSplit(t *testing.T, data, meta string, ro bool) *Device {
	t.Helper()
	dev, err := backend.Open(data, backend.OpenOptions{MetaPath: meta, ReadOnly: ro})
	if err != nil {
		t.Fatal(err)
	}
	d, ok := dev.(*Device)
	if !ok {
		dev.Close()
		t.Fatalf("opened %s, not a split device", dev.Kind())
	}
	return d
}

func pattern(n int, seed byte) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = seed + byte(i*7) + byte(i>>9)
	}
	return p
}

func wantErr(t *testing.T, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got %v, want %v", what, err, target)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func report(t *testing.T, d *Device, zi int) backend.Zone {
	t.Helper()
	r, err := d.ReportZones(int64(zi)*zs, 1)
	if err != nil || len(r) != 1 {
		t.Fatalf("report zone %d: %v %v", zi, r, err)
	}
	return r[0]
}

func readBack(t *testing.T, dev backend.Device, off int64, n int) []byte {
	t.Helper()
	p := make([]byte, n)
	if err := dev.ReadAt(p, off); err != nil {
		t.Fatalf("read %d bytes at %d: %v", n, off, err)
	}
	return p
}

// TestOpenJoins: backend.Open with a metadata path joins the two with the
// geometry the package comment gives, holds both devices' claims, and a
// pair it refuses leaves neither held.
func TestOpenJoins(t *testing.T) {
	data, meta := images(t)
	d := openSplit(t, data, meta, false)
	want := backend.ZoneGeometry{ZoneSize: zs, ZoneCap: zs, Zones: 10, Conventional: 2, MaxOpen: 3, MaxActive: 4}
	if g := d.Geometry(); g != want {
		t.Fatalf("geometry %+v, want %+v", g, want)
	}
	if d.Kind() != "file+zoned" || d.Size() != 10*zs || d.SectorSize() != 512 || d.MaxStreams() != 0 || d.MetaZones() != 2 {
		t.Fatalf("kind %s, size %d, sector %d, streams %d, metadata zones %d",
			d.Kind(), d.Size(), d.SectorSize(), d.MaxStreams(), d.MetaZones())
	}
	for _, p := range []string{data, meta} {
		if _, err := backend.Open(p, backend.OpenOptions{}); !errors.Is(err, backend.ErrBusy) {
			t.Fatalf("open of %s while joined: %v, want busy", p, err)
		}
	}
	must(t, d.Close())

	plain := sizedFile(t, "plain.img", imageSize(8))
	zoned2 := sizedFile(t, "zoned2.img", imageSize(4))
	if _, err := zoned.FormatFile(zoned2, dataGeometry()); err != nil {
		t.Fatal(err)
	}
	small := sizedFile(t, "small.img", zs/2)
	for _, c := range []struct{ name, data, meta, msg string }{
		{"metadata device below a zone", data, small, "holds no zone"},
		{"data device not zoned", plain, meta, "goes with a zoned device"},
		{"metadata device zoned", data, zoned2, "is zoned"},
		{"one device twice", data, data, "is the device itself"},
	} {
		_, err := backend.Open(c.data, backend.OpenOptions{MetaPath: c.meta})
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Fatalf("%s: %v, want %q", c.name, err, c.msg)
		}
		// Nothing stays claimed.
		for _, p := range []string{c.data, c.meta} {
			dev, err := backend.Open(p, backend.OpenOptions{})
			if err != nil {
				t.Fatalf("%s: %s held after the refusal: %v", c.name, p, err)
			}
			dev.Close()
		}
	}
}

// TestWriteRules: the metadata device's zones take writes anywhere, the
// data device's only at their write pointers; each lands on its own
// device at the shifted offset, and nothing crosses between them.
func TestWriteRules(t *testing.T) {
	data, meta := images(t)
	d := openSplit(t, data, meta, false)
	defer d.Close()
	base := int64(2 * zs)

	// Conventional: anywhere, unaligned, across their own zone boundary,
	// overwritten; the bytes are the metadata file's at the same offsets.
	must(t, d.WriteAt(pattern(8192, 1), zs-4096, backend.StreamMeta))
	must(t, d.WriteAt(pattern(100, 2), 17, 0))
	must(t, d.WriteAt(pattern(4096, 3), zs-4096, 0))
	if got := readBack(t, d, zs-4096, 8192); !bytes.Equal(got[:4096], pattern(4096, 3)) || !bytes.Equal(got[4096:], pattern(8192, 1)[4096:]) {
		t.Fatal("conventional overwrite reads back wrong")
	}
	if got := readBack(t, d.Meta(), 17, 100); !bytes.Equal(got, pattern(100, 2)) {
		t.Fatal("conventional write not at the same offset of the metadata device")
	}
	wantErr(t, d.WriteAt(pattern(8192, 4), base-4096, 0), backend.ErrZoneBoundary, "write from the metadata device into the first data zone")

	// Sequential: the first data zone starts at base.
	wantErr(t, d.WriteAt(pattern(512, 5), base+512, 0), backend.ErrZoneInvalidWrite, "write past the write pointer")
	if r := report(t, d, 2); r.Cond != backend.ZoneEmpty || r.WP != base || r.Type != backend.ZoneSeqWriteRequired {
		t.Fatalf("a refused write changed the zone: %+v", r)
	}
	must(t, d.WriteAt(pattern(4096, 6), base, 0))
	if r := report(t, d, 2); r.Cond != backend.ZoneImplicitOpen || r.WP != base+4096 {
		t.Fatalf("after a write: %+v", r)
	}
	if got := readBack(t, d.Data(), 0, 4096); !bytes.Equal(got, pattern(4096, 6)) {
		t.Fatal("data write not at the start of the data device")
	}
	wantErr(t, d.WriteAt(pattern(512, 7), base, 0), backend.ErrZoneInvalidWrite, "write below the write pointer")
	wantErr(t, d.WriteAt(pattern(100, 7), base+4096, 0), backend.ErrZoneInvalidWrite, "partial sector")
	wantErr(t, d.WriteAt(pattern(8192, 7), base+zs-4096, 0), backend.ErrZoneBoundary, "write across data zones")
	wantErr(t, d.WriteAt(pattern(1024, 7), d.Size()-512, 0), backend.ErrOutOfRange, "write past the end")

	// A read across the two devices: metadata bytes, then the data zone's
	// written bytes, then zeroes past its write pointer.
	got := readBack(t, d, base-4096, 3*4096)
	old := readBack(t, d.Meta(), base-4096, 4096)
	if !bytes.Equal(got[:4096], old) || !bytes.Equal(got[4096:8192], pattern(4096, 6)) || !bytes.Equal(got[8192:], make([]byte, 4096)) {
		t.Fatal("read across the devices returned wrong data")
	}

	// Fill to capacity: full; a full zone refuses.
	must(t, d.WriteAt(pattern(zs-4096, 8), base+4096, 0))
	if r := report(t, d, 2); r.Cond != backend.ZoneFull || r.WP != base+zs {
		t.Fatalf("after filling: %+v", r)
	}
	wantErr(t, d.WriteAt(pattern(512, 9), base+zs-512, 0), backend.ErrZoneFull, "write to a full zone")
}

// TestZoneActions: append, the zone actions and the open limit go to the
// data device with offsets shifted both ways; the metadata device's zones
// are conventional; reports join the two.
func TestZoneActions(t *testing.T) {
	data, meta := images(t)
	d := openSplit(t, data, meta, false)
	defer d.Close()
	zone := func(i int) int64 { return int64(i) * zs }

	for i := range 2 {
		at, err := d.Append(pattern(4096, byte(i)), zone(3), 0)
		if err != nil || at != zone(3)+int64(i)*4096 {
			t.Fatalf("append %d: at %d, %v", i, at, err)
		}
	}
	if got := readBack(t, d, zone(3)+4096, 4096); !bytes.Equal(got, pattern(4096, 1)) {
		t.Fatal("appended data reads back wrong")
	}
	_, err := d.Append(pattern(4096, 0), zone(1), 0)
	wantErr(t, err, backend.ErrZoneConventional, "append to a metadata zone")
	_, err = d.Append(pattern(4096, 0), zone(3)+4096, 0)
	wantErr(t, err, backend.ErrZoneState, "append off a zone start")
	wantErr(t, d.ZoneMgmt(backend.ZoneOpReset, zone(0)), backend.ErrZoneConventional, "reset of a metadata zone")
	wantErr(t, d.ZoneMgmt(backend.ZoneOpReset, zone(4)+512), backend.ErrZoneState, "reset off a zone start")
	wantErr(t, d.ZoneMgmt(backend.ZoneOpReset, d.Size()), backend.ErrZoneState, "reset past the end")

	// Finish, then reset: full, then empty and zeroes.
	must(t, d.ZoneMgmt(backend.ZoneOpFinish, zone(3)))
	if r := report(t, d, 3); r.Cond != backend.ZoneFull {
		t.Fatalf("finished zone is %v", r.Cond)
	}
	must(t, d.ZoneMgmt(backend.ZoneOpReset, zone(3)))
	if r := report(t, d, 3); r.Cond != backend.ZoneEmpty || r.WP != zone(3) {
		t.Fatalf("reset zone: %+v", r)
	}
	if got := readBack(t, d, zone(3), 4096); !bytes.Equal(got, make([]byte, 4096)) {
		t.Fatal("reset zone does not read zeroes")
	}

	// The data device's open limit comes through.
	for i := 4; i < 7; i++ {
		must(t, d.ZoneMgmt(backend.ZoneOpOpen, zone(i)))
	}
	wantErr(t, d.ZoneMgmt(backend.ZoneOpOpen, zone(7)), backend.ErrTooManyOpen, "fourth explicit open")
	must(t, d.ZoneMgmt(backend.ZoneOpClose, zone(6)))
	if r := report(t, d, 6); r.Cond != backend.ZoneEmpty {
		t.Fatalf("closed unwritten zone is %v", r.Cond)
	}

	// Reports: every zone; the metadata ones conventional; the data ones
	// the data device's, shifted.
	all, err := d.ReportZones(0, 0)
	must(t, err)
	inner, err := d.Data().ReportZones(0, 0)
	must(t, err)
	if len(all) != 10 || len(inner) != 8 {
		t.Fatalf("%d zones reported, data device %d", len(all), len(inner))
	}
	for i, z := range all[:2] {
		if z != (backend.Zone{Start: zone(i), Len: zs, Cap: zs, WP: zone(i), Type: backend.ZoneConventional, Cond: backend.ZoneNotWP}) {
			t.Fatalf("metadata zone %d: %+v", i, z)
		}
	}
	for i, z := range inner {
		z.Start += zone(2)
		z.WP += zone(2)
		if all[2+i] != z {
			t.Fatalf("zone %d: %+v, data device's shifted %+v", 2+i, all[2+i], z)
		}
	}
	for _, c := range []struct {
		off         int64
		limit       int
		first, want int
	}{{0, 1, 0, 1}, {zs + 100, 2, 1, 2}, {zone(2), 3, 2, 3}, {zone(9), 0, 9, 1}, {zs, 0, 1, 9}} {
		got, err := d.ReportZones(c.off, c.limit)
		must(t, err)
		if len(got) != c.want || got[0] != all[c.first] || got[len(got)-1] != all[c.first+c.want-1] {
			t.Fatalf("report from %d, %d zones: %+v", c.off, c.limit, got)
		}
	}
	_, err = d.ReportZones(d.Size(), 0)
	wantErr(t, err, backend.ErrOutOfRange, "report past the end")

	// A discard across both devices: the metadata part goes (a hole in
	// the file reads zeroes); the data zones keep their data.
	must(t, d.WriteAt(pattern(4096, 9), zone(1), 0))
	_, err = d.Append(pattern(4096, 10), zone(2), 0)
	must(t, err)
	must(t, d.Discard(zone(1), 2*zs))
	if got := readBack(t, d.Meta(), zone(1), 4096); !bytes.Equal(got, make([]byte, 4096)) {
		t.Fatal("discarded metadata range still holds data")
	}
	if got := readBack(t, d, zone(2), 4096); !bytes.Equal(got, pattern(4096, 10)) {
		t.Fatal("a discard lost data in a sequential zone")
	}
}

// memPair joins a metadata device and a zoned data device in memory, each
// behind a fault injector, as the crash and failure tests need.
func memPair(t *testing.T) (d *Device, meta, media *faulty.Device) {
	t.Helper()
	mm, err := faulty.NewMem(2*zs+zs/2, 512)
	must(t, err)
	dm, err := faulty.NewMem(imageSize(8), 512)
	must(t, err)
	if _, err := zoned.Format(dm, dataGeometry()); err != nil {
		t.Fatal(err)
	}
	meta, media = faulty.New(mm, 1), faulty.New(dm, 2)
	return join(t, meta, media), meta, media
}

// join loads the zoned image on media and joins it with meta.
func join(t *testing.T, meta, media backend.Device) *Device {
	t.Helper()
	z, ok, err := zoned.Load(media, false)
	if err != nil || !ok {
		t.Fatalf("load: %v %v", ok, err)
	}
	d, err := New(meta, z, false)
	must(t, err)
	return d
}

// wantFrom checks that err is an injected fault reported for the device
// named.
func wantFrom(t *testing.T, err error, device, what string) {
	t.Helper()
	if !errors.Is(err, faulty.ErrInjected) || !strings.Contains(err.Error(), device+" device") {
		t.Fatalf("%s: %v, want an injected fault of the %s device", what, err, device)
	}
}

// TestFailuresSurface: a failing read, write, append or flush on either
// device comes back, saying which device; the other device keeps working,
// and a flush whose one half fails still flushes the other.
func TestFailuresSurface(t *testing.T) {
	d, meta, media := memPair(t)
	base := int64(2 * zs)
	all := func(off, n int64) bool { return true }

	meta.FailWrites(all)
	wantFrom(t, d.WriteAt(pattern(4096, 1), 0, backend.StreamMeta), "metadata", "metadata write")
	wantFrom(t, d.Discard(0, 4096), "metadata", "metadata discard")
	must(t, d.WriteAt(pattern(4096, 1), base, 0))
	meta.FailWrites(nil)

	media.FailWrites(all)
	wantFrom(t, d.WriteAt(pattern(4096, 2), base+4096, 0), "data", "data write")
	_, err := d.Append(pattern(4096, 2), base+zs, 0)
	wantFrom(t, err, "data", "append")
	must(t, d.WriteAt(pattern(4096, 2), 0, backend.StreamMeta))
	media.FailWrites(nil)

	meta.FailReads(all)
	wantFrom(t, d.ReadAt(make([]byte, 8192), base-4096), "metadata", "read across the devices")
	meta.FailReads(nil)
	media.FailReads(all)
	wantFrom(t, d.ReadAt(make([]byte, 8192), base-4096), "data", "read across the devices")
	if err := d.ReadAt(make([]byte, 4096), 0); err != nil {
		t.Fatalf("metadata read while the data device fails reads: %v", err)
	}
	media.FailReads(nil)

	// A failed metadata flush: the data device is flushed all the same.
	before := media.Stats().Flushes
	meta.FailFlushes(1)
	wantFrom(t, d.Flush(), "metadata", "flush")
	if media.Stats().Flushes == before {
		t.Fatal("the data device was not flushed beside the failing metadata flush")
	}
	must(t, d.Flush())
	// Both failing: both are reported. (The emulated zoned device stays
	// broken after a failed save, so this comes last.)
	must(t, d.WriteAt(pattern(4096, 3), base+4096, 0))
	meta.FailFlushes(1)
	media.FailFlushes(1)
	err = d.Flush()
	wantFrom(t, err, "metadata", "flush of both")
	wantFrom(t, err, "data", "flush of both")
}

// TestFlushReachesBoth: after a power cut of both devices, what the split
// device's Flush acknowledged is on both — metadata bytes, data and the
// data device's write pointers — and what came after it is not.
func TestFlushReachesBoth(t *testing.T) {
	d, meta, media := memPair(t)
	base := int64(2 * zs)
	must(t, d.WriteAt(pattern(4096, 1), 4096, backend.StreamMeta))
	must(t, d.WriteAt(pattern(8192, 2), base, 0))
	at, err := d.Append(pattern(4096, 3), base+zs, 0)
	must(t, err)
	if at != base+zs {
		t.Fatalf("append at %d", at)
	}
	must(t, d.Flush())
	// Not flushed: lost by the cut.
	must(t, d.WriteAt(pattern(4096, 4), 4096, backend.StreamMeta))
	must(t, d.WriteAt(pattern(4096, 5), base+8192, 0))

	// The old device is dropped without Close, as by the crash.
	must(t, meta.PowerCut(faulty.CutOptions{}))
	must(t, media.PowerCut(faulty.CutOptions{}))
	meta.Revive()
	media.Revive()
	d = join(t, meta, media)
	defer d.Close()
	if got := readBack(t, d, 4096, 4096); !bytes.Equal(got, pattern(4096, 1)) {
		t.Fatal("flushed metadata lost, or unflushed metadata kept")
	}
	if r := report(t, d, 2); r.WP != base+8192 {
		t.Fatalf("zone 2's write pointer at %d after the cut, want %d", r.WP, base+8192)
	}
	if r := report(t, d, 3); r.WP != base+zs+4096 {
		t.Fatalf("zone 3's write pointer at %d after the cut, want %d", r.WP, base+zs+4096)
	}
	got := readBack(t, d, base, 3*4096)
	if !bytes.Equal(got[:8192], pattern(8192, 2)) || !bytes.Equal(got[8192:], make([]byte, 4096)) {
		t.Fatal("data zone after the cut reads wrong")
	}
	if got := readBack(t, d, base+zs, 4096); !bytes.Equal(got, pattern(4096, 3)) {
		t.Fatal("appended data lost")
	}
}

// noReopen hides the media's MakeWritable, like a device that cannot turn
// read-write in place.
type noReopen struct{ backend.Device }

// TestMakeWritable: opened read-only, the split device refuses writes,
// appends and actions; MakeWritable turns both devices, and a half-done
// one (the data device cannot) leaves it refusing.
func TestMakeWritable(t *testing.T) {
	data, meta := images(t)
	d := openSplit(t, data, meta, true)
	base := int64(2 * zs)
	wantErr(t, d.WriteAt(pattern(4096, 1), 0, 0), syscall.EROFS, "metadata write while read-only")
	_, err := d.Append(pattern(4096, 1), base, 0)
	wantErr(t, err, syscall.EROFS, "append while read-only")
	wantErr(t, d.ZoneMgmt(backend.ZoneOpFinish, base), syscall.EROFS, "finish while read-only")
	must(t, backend.MakeWritable(d))
	must(t, d.WriteAt(pattern(4096, 1), 0, 0))
	must(t, d.WriteAt(pattern(4096, 2), base, 0))
	must(t, d.Flush())
	must(t, d.Close())
	d = openSplit(t, data, meta, true)
	if got := readBack(t, d, 0, 4096); !bytes.Equal(got, pattern(4096, 1)) {
		t.Fatal("metadata written after MakeWritable lost")
	}
	if r := report(t, d, 2); r.WP != base+4096 {
		t.Fatalf("data zone's write pointer %d after MakeWritable and reopen", r.WP)
	}
	must(t, d.Close())

	mm, err := faulty.NewMem(2*zs, 512)
	must(t, err)
	dm, err := faulty.NewMem(imageSize(4), 512)
	must(t, err)
	if _, err := zoned.Format(dm, dataGeometry()); err != nil {
		t.Fatal(err)
	}
	z, _, err := zoned.Load(noReopen{dm}, true)
	must(t, err)
	d, err = New(mm, z, true)
	must(t, err)
	wantErr(t, backend.MakeWritable(d), backend.ErrCannotReopen, "MakeWritable with a data device that cannot")
	wantErr(t, d.WriteAt(pattern(4096, 1), 0, 0), syscall.EROFS, "metadata write after a failed MakeWritable")
}
