//go:build fdpvm

// This test needs a real zoned namespace: scripts/fdp runs it in the QEMU
// guest, on an emulated ZNS namespace beside the FDP drive. It writes to
// the device: never point it at a disk holding data.

package nvme

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/streamfs/streamfs/backend"
	"github.com/streamfs/streamfs/backend/split"
)

// The geometry run.sh gives QEMU's zoned namespace.
const (
	vmZoneSize  = 8 << 20
	vmZoneCap   = 6 << 20
	vmMaxOpen   = 4
	vmMaxActive = 6
	vmZones     = 32
)

func TestVMZoned(t *testing.T) {
	path := os.Getenv("STREAMFS_ZNS_DEV")
	if path == "" {
		t.Skip("STREAMFS_ZNS_DEV not set: no zoned namespace to test")
	}
	z, err := OpenZoned(path, false)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer z.Close()
	geo := z.Geometry()
	js, _ := json.Marshal(geo)
	t.Logf("zone geometry: %s, append limit %d", js, z.append)
	if geo.ZoneSize != vmZoneSize || geo.ZoneCap != vmZoneCap || geo.MaxOpen != vmMaxOpen ||
		geo.MaxActive != vmMaxActive || geo.Zones != vmZones || geo.Conventional != 0 || z.SectorSize() != 4096 {
		t.Fatalf("geometry %+v, sector %d", geo, z.SectorSize())
	}
	if _, err := OpenZoned(path, false); !errors.Is(err, backend.ErrBusy) {
		t.Fatalf("second open: %v, want busy", err)
	}
	zs := func(i int) int64 { return int64(i) * vmZoneSize }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	report := func(i int) backend.Zone {
		t.Helper()
		r, err := z.ReportZones(zs(i), 1)
		if err != nil || len(r) != 1 {
			t.Fatalf("report zone %d: %v %v", i, r, err)
		}
		return r[0]
	}

	// Writes at the write pointer, several commands, a buffer that is
	// not page aligned; read back.
	data := backend.AlignedBuf(1<<20 + 4096 + 1)[1:]
	for i := range data {
		data[i] = byte(i*7 + i>>12)
	}
	must(z.WriteAt(data, 0, 0))
	if r := report(0); r.WP != int64(len(data)) || r.Cond != backend.ZoneImplicitOpen || r.Cap != vmZoneCap {
		t.Fatalf("zone 0 after the write: %+v", r)
	}
	got := make([]byte, len(data))
	must(z.ReadAt(got, 0))
	if !bytes.Equal(got, data) {
		t.Fatal("zone 0 reads back other data")
	}
	// The drive's refusals come back as the zone errors.
	if err := z.WriteAt(data[:4096], 0, 0); !errors.Is(err, backend.ErrZoneInvalidWrite) {
		t.Fatalf("write below the write pointer: %v", err)
	}
	if err := z.WriteAt(data[:4096], int64(len(data))+4096, 0); !errors.Is(err, backend.ErrZoneInvalidWrite) {
		t.Fatalf("write past the write pointer: %v", err)
	}
	if err := z.WriteAt(data[:8192], vmZoneCap-4096, 0); !errors.Is(err, backend.ErrZoneInvalidWrite) && !errors.Is(err, backend.ErrZoneBoundary) {
		t.Fatalf("write across the capacity: %v", err)
	}

	// Appends: the drive picks the place and says where.
	for i := range 3 {
		at, err := z.Append(data[:64<<10], zs(1), 0)
		if err != nil || at != zs(1)+int64(i)*64<<10 {
			t.Fatalf("append %d: at %d, %v", i, at, err)
		}
	}
	must(z.ReadAt(got[:64<<10], zs(1)+128<<10))
	if !bytes.Equal(got[:64<<10], data[:64<<10]) {
		t.Fatal("appended data reads back wrong")
	}

	// Limits: zones 0 and 1 done, four written explicitly open zones fill
	// the open limit; implicit opens take the rest of the active limit.
	must(z.ZoneMgmt(backend.ZoneOpFinish, zs(0)))
	must(z.ZoneMgmt(backend.ZoneOpFinish, zs(1)))
	if r := report(0); r.Cond != backend.ZoneFull {
		t.Fatalf("finished zone 0 is %v", r.Cond)
	}
	if err := z.WriteAt(data[:4096], report(0).WP, 0); !errors.Is(err, backend.ErrZoneFull) && !errors.Is(err, backend.ErrZoneBoundary) {
		t.Fatalf("write to a full zone: %v", err)
	}
	for i := 2; i < 6; i++ {
		must(z.ZoneMgmt(backend.ZoneOpOpen, zs(i)))
		must(z.WriteAt(data[:4096], zs(i), 0))
		if r := report(i); r.Cond != backend.ZoneExplicitOpen {
			t.Fatalf("zone %d is %v, want explicitly open", i, r.Cond)
		}
	}
	if err := z.ZoneMgmt(backend.ZoneOpOpen, zs(6)); !errors.Is(err, backend.ErrTooManyOpen) {
		t.Fatalf("fifth open zone: %v", err)
	}
	must(z.ZoneMgmt(backend.ZoneOpClose, zs(2)))
	must(z.ZoneMgmt(backend.ZoneOpClose, zs(3)))
	if r := report(2); r.Cond != backend.ZoneClosed {
		t.Fatalf("closed zone 2 is %v", r.Cond)
	}
	must(z.WriteAt(data[:4096], zs(6), 0))
	must(z.WriteAt(data[:4096], zs(7), 0))
	if err := z.WriteAt(data[:4096], zs(8), 0); !errors.Is(err, backend.ErrTooManyActive) {
		t.Fatalf("seventh active zone: %v", err)
	}

	// Reset: empty, and the data is gone.
	must(z.ZoneMgmt(backend.ZoneOpReset, zs(2)))
	if r := report(2); r.Cond != backend.ZoneEmpty || r.WP != zs(2) {
		t.Fatalf("reset zone 2: %+v", r)
	}
	must(z.ReadAt(got[:4096], zs(2)))
	if !bytes.Equal(got[:4096], make([]byte, 4096)) {
		t.Fatal("reset zone does not read zeroes")
	}
	all, err := z.ReportZones(0, 0)
	if err != nil || len(all) != vmZones {
		t.Fatalf("report of every zone: %d zones, %v", len(all), err)
	}
	if err := z.ZoneMgmt(backend.ZoneOpReset, 4096); !errors.Is(err, backend.ErrZoneState) {
		t.Fatalf("reset off a zone start: %v", err)
	}
	must(z.Flush())
}

// TestVMZonedOpen runs after TestVMZoned on the same namespace: backend.Open
// recognises it as zoned by itself (through either node), and a split
// device over a metadata image and the namespace takes a short sequence of
// writes, appends, actions and reports and keeps them across a reopen.
func TestVMZonedOpen(t *testing.T) {
	path := os.Getenv("STREAMFS_ZNS_DEV")
	if path == "" {
		t.Skip("STREAMFS_ZNS_DEV not set: no zoned namespace to test")
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	nodes := []string{path}
	if blk := os.Getenv("STREAMFS_ZNS_BLOCK"); blk != "" {
		nodes = append(nodes, blk)
	} else {
		t.Log("STREAMFS_ZNS_BLOCK not set: the block node is not tested")
	}
	for _, p := range nodes {
		d, err := backend.Open(p, backend.OpenOptions{ReadOnly: true})
		if err != nil {
			t.Fatalf("open %s: %v", p, err)
		}
		z, ok := d.(backend.Zoned)
		if !ok || d.Kind() != "zns" {
			d.Close()
			t.Fatalf("%s opens as %s, want zns", p, d.Kind())
		}
		if g := z.Geometry(); g.ZoneSize != vmZoneSize || g.ZoneCap != vmZoneCap || g.Zones != vmZones ||
			g.Conventional != 0 || g.MaxOpen != vmMaxOpen || g.MaxActive != vmMaxActive {
			d.Close()
			t.Fatalf("%s: geometry %+v", p, g)
		}
		for _, q := range nodes {
			if _, err := backend.Open(q, backend.OpenOptions{}); !errors.Is(err, backend.ErrBusy) {
				d.Close()
				t.Fatalf("open of %s while %s is open: %v, want busy", q, p, err)
			}
		}
		if err := z.ZoneMgmt(backend.ZoneOpReset, 0); !errors.Is(err, syscall.EROFS) {
			d.Close()
			t.Fatalf("%s: reset while read-only: %v", p, err)
		}
		must(backend.MakeWritable(d))
		must(d.Close())
	}

	// The FDP namespace beside it is not zoned: asked first, the ZNS
	// opener lets it go on to the FDP backend.
	if fdp := os.Getenv("STREAMFS_NVME_DEV"); fdp != "" {
		d, err := backend.Open(fdp, backend.OpenOptions{})
		if err != nil {
			t.Fatalf("open the FDP namespace %s: %v", fdp, err)
		}
		kind := d.Kind()
		must(d.Close())
		if kind != "nvme" {
			t.Fatalf("FDP namespace %s opens as %s, want nvme", fdp, kind)
		}
	}

	// The split device: two metadata zones and a half from the image.
	meta := filepath.Join(t.TempDir(), "meta.img")
	must(os.WriteFile(meta, nil, 0o600))
	must(os.Truncate(meta, 2*vmZoneSize+vmZoneSize/2))
	open := func() *split.Device {
		t.Helper()
		d, err := backend.Open(path, backend.OpenOptions{MetaPath: meta})
		if err != nil {
			t.Fatalf("open with a metadata device: %v", err)
		}
		s, ok := d.(*split.Device)
		if !ok {
			d.Close()
			t.Fatalf("opened %s, not a split device", d.Kind())
		}
		return s
	}
	d := open()
	defer func() { d.Close() }()
	const base = 2 * vmZoneSize
	zs := func(i int) int64 { return int64(i) * vmZoneSize }
	if g := d.Geometry(); d.Kind() != "file+zns" || g.Zones != vmZones+2 || g.Conventional != 2 ||
		g.ZoneSize != vmZoneSize || g.ZoneCap != vmZoneCap || d.Size() != base+vmZones*vmZoneSize {
		t.Fatalf("split device %s: geometry %+v, size %d", d.Kind(), g, d.Size())
	}
	// TestVMZoned left zones written and open: reset every one that is
	// not empty, through the split device's report and actions.
	all, err := d.ReportZones(0, 0)
	must(err)
	for _, z := range all {
		if z.Type == backend.ZoneSeqWriteRequired && z.Cond != backend.ZoneEmpty {
			must(d.ZoneMgmt(backend.ZoneOpReset, z.Start))
		}
	}
	all, err = d.ReportZones(0, 0)
	must(err)
	for i, z := range all {
		conv := i < 2
		if z.Start != zs(i) || (z.Type == backend.ZoneConventional) != conv || (!conv && (z.Cond != backend.ZoneEmpty || z.WP != z.Start)) {
			t.Fatalf("zone %d after the resets: %+v", i, z)
		}
	}

	data := backend.AlignedBuf(1<<20 + 4096)
	for i := range data {
		data[i] = byte(i*11 + i>>12)
	}
	must(d.WriteAt(data[:8192], vmZoneSize-4096, backend.StreamMeta)) // across the metadata zones
	must(d.WriteAt(data, base, 0))                                    // several commands
	if err := d.WriteAt(data[:4096], base, 0); !errors.Is(err, backend.ErrZoneInvalidWrite) {
		t.Fatalf("write below the write pointer: %v", err)
	}
	for i := range 3 {
		at, err := d.Append(data[:64<<10], zs(3), 0)
		if err != nil || at != zs(3)+int64(i)*64<<10 {
			t.Fatalf("append %d: at %d, %v", i, at, err)
		}
	}
	if _, err := d.Append(data[:4096], zs(1), 0); !errors.Is(err, backend.ErrZoneConventional) {
		t.Fatalf("append to a metadata zone: %v", err)
	}
	must(d.ZoneMgmt(backend.ZoneOpFinish, zs(4)))
	if r, err := d.ReportZones(zs(4), 1); err != nil || r[0].Cond != backend.ZoneFull {
		t.Fatalf("finished zone: %v %v", r, err)
	}
	must(d.ZoneMgmt(backend.ZoneOpReset, zs(4)))
	must(d.Flush())
	must(d.Close())

	d = open()
	got := make([]byte, 8192+len(data))
	must(d.ReadAt(got[:8192], vmZoneSize-4096))
	if !bytes.Equal(got[:8192], data[:8192]) {
		t.Fatal("metadata reads back wrong after the reopen")
	}
	must(d.ReadAt(got, base-8192)) // metadata zone's tail, then the data zone
	if !bytes.Equal(got[8192:], data) {
		t.Fatal("data zone reads back wrong after the reopen")
	}
	r, err := d.ReportZones(base, 3)
	must(err)
	if r[0].WP != base+int64(len(data)) || r[1].WP != zs(3)+3*64<<10 || r[2].Cond != backend.ZoneEmpty {
		t.Fatalf("zones after the reopen: %+v", r)
	}
	for _, i := range []int{2, 3} {
		must(d.ZoneMgmt(backend.ZoneOpReset, zs(i)))
	}
}
