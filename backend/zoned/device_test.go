package zoned

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/streamfs/streamfs/backend"
	"github.com/streamfs/streamfs/backend/faulty"
)

const testZone = 64 << 10

// testGeometry: 64 KiB zones, 2 conventional, 3 open and 4 active.
func testGeometry() Geometry {
	return Geometry{ZoneSize: testZone, Conv: 2, MaxOpen: 3, MaxActive: 4, Sector: 512}
}

// newMem formats a memory image of zones zones (conventional included)
// and returns it, not yet loaded.
func newMem(t *testing.T, g Geometry, zones int) *faulty.Mem {
	t.Helper()
	size := int64(zones)*g.ZoneSize + 2*slotSizeFor(zones+1) + labelSize
	m, err := faulty.NewMem(size, 512)
	if err != nil {
		t.Fatal(err)
	}
	l, err := Format(m, g)
	if err != nil {
		t.Fatal(err)
	}
	if l.Zones != zones {
		t.Fatalf("format made %d zones, want %d", l.Zones, zones)
	}
	return m
}

func load(t *testing.T, media backend.Device) *Device {
	t.Helper()
	d, ok, err := Load(media, false)
	if err != nil || !ok {
		t.Fatalf("load: ok %v, %v", ok, err)
	}
	return d
}

func newDev(t *testing.T, g Geometry, zones int) (*Device, *faulty.Mem) {
	t.Helper()
	m := newMem(t, g, zones)
	return load(t, m), m
}

func pattern(n int, seed byte) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = seed + byte(i*7) + byte(i>>9)
	}
	return p
}

func zoneCond(t *testing.T, d *Device, zi int) backend.Zone {
	t.Helper()
	zs, err := d.ReportZones(int64(zi)*testZone, 1)
	if err != nil || len(zs) != 1 {
		t.Fatalf("report zone %d: %v %v", zi, zs, err)
	}
	return zs[0]
}

func wantErr(t *testing.T, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got %v, want %v", what, err, target)
	}
}

func TestSequentialWriteRules(t *testing.T) {
	d, _ := newDev(t, testGeometry(), 8)
	z := int64(2 * testZone) // first sequential zone

	wantErr(t, d.WriteAt(pattern(512, 1), z+512, 0), backend.ErrZoneInvalidWrite, "write past the write pointer")
	if c := zoneCond(t, d, 2); c.Cond != backend.ZoneEmpty || c.WP != z {
		t.Fatalf("a refused write changed the zone: %+v", c)
	}
	if err := d.WriteAt(pattern(4096, 1), z, 0); err != nil {
		t.Fatal(err)
	}
	if c := zoneCond(t, d, 2); c.Cond != backend.ZoneImplicitOpen || c.WP != z+4096 {
		t.Fatalf("after a write: %+v", c)
	}
	wantErr(t, d.WriteAt(pattern(512, 2), z, 0), backend.ErrZoneInvalidWrite, "overwrite below the write pointer")
	wantErr(t, d.WriteAt(pattern(100, 2), z+4096, 0), backend.ErrZoneInvalidWrite, "partial sector")
	wantErr(t, d.WriteAt(pattern(8192, 2), z+testZone-4096, 0), backend.ErrZoneBoundary, "write across zones")
	wantErr(t, d.WriteAt(pattern(8192, 2), 2*testZone-4096, 0), backend.ErrZoneBoundary, "write from conventional into sequential")
	wantErr(t, d.WriteAt(pattern(testZone, 2), z+4096, 0), backend.ErrZoneBoundary, "write beyond the capacity")

	// Reads: written bytes back, zeroes past the write pointer.
	got := make([]byte, 8192)
	if err := d.ReadAt(got, z); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[:4096], pattern(4096, 1)) || !bytes.Equal(got[4096:], make([]byte, 4096)) {
		t.Fatal("read across the write pointer: wrong data or not zeroes past it")
	}

	// Fill to capacity: the zone is full and gives back its resources.
	if err := d.WriteAt(pattern(testZone-4096, 3), z+4096, 0); err != nil {
		t.Fatal(err)
	}
	if c := zoneCond(t, d, 2); c.Cond != backend.ZoneFull || c.WP != z+testZone {
		t.Fatalf("after filling: %+v", c)
	}
	wantErr(t, d.WriteAt(pattern(512, 4), z+testZone-512, 0), backend.ErrZoneFull, "write to a full zone")
	if d.open != 0 || d.active != 0 {
		t.Fatalf("full zone holds resources: open %d active %d", d.open, d.active)
	}

	// Conventional zones: anywhere, overwrites, across their boundary.
	if err := d.WriteAt(pattern(8192, 5), testZone-4096, 0); err != nil {
		t.Fatal(err)
	}
	if err := d.WriteAt(pattern(100, 6), 17, 0); err != nil {
		t.Fatal(err)
	}
	c := d.Counters()
	if c.HostBytes != testZone+8192+100 || c.ConvBytes != 8192+100 {
		t.Fatalf("counters %+v", c)
	}
}

func TestCapacityBelowZoneSize(t *testing.T) {
	g := testGeometry()
	g.ZoneCap = 48 << 10
	d, _ := newDev(t, g, 6)
	z := int64(3 * testZone)
	wantErr(t, d.WriteAt(pattern(48<<10+512, 1), z, 0), backend.ErrZoneBoundary, "write beyond the capacity")
	if err := d.WriteAt(pattern(48<<10, 1), z, 0); err != nil {
		t.Fatal(err)
	}
	r := zoneCond(t, d, 3)
	if r.Cond != backend.ZoneFull || r.Cap != 48<<10 || r.Len != testZone || r.WP != z+48<<10 {
		t.Fatalf("zone at capacity: %+v", r)
	}
	got := make([]byte, testZone)
	if err := d.ReadAt(got, z); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[:48<<10], pattern(48<<10, 1)) || !bytes.Equal(got[48<<10:], make([]byte, 16<<10)) {
		t.Fatal("zone with capacity below its size reads wrong")
	}
}

func TestOpenAndActiveLimits(t *testing.T) {
	d, _ := newDev(t, testGeometry(), 10) // zones 2..9 sequential; open 3, active 4
	zs := func(i int) int64 { return int64(i) * testZone }
	// Three explicitly open zones fill the open limit.
	for i := 2; i < 5; i++ {
		if err := d.ZoneMgmt(backend.ZoneOpOpen, zs(i)); err != nil {
			t.Fatal(err)
		}
	}
	wantErr(t, d.ZoneMgmt(backend.ZoneOpOpen, zs(5)), backend.ErrTooManyOpen, "fourth explicit open")
	wantErr(t, d.WriteAt(pattern(512, 1), zs(5), 0), backend.ErrTooManyOpen, "write opening a fourth zone (no implicit one to close)")
	if c := zoneCond(t, d, 5); c.Cond != backend.ZoneEmpty {
		t.Fatalf("refused open changed the zone: %v", c.Cond)
	}
	// Close one written zone: it stays active; the open slot frees.
	if err := d.WriteAt(pattern(512, 1), zs(2), 0); err != nil {
		t.Fatal(err)
	}
	if err := d.ZoneMgmt(backend.ZoneOpClose, zs(2)); err != nil {
		t.Fatal(err)
	}
	if c := zoneCond(t, d, 2); c.Cond != backend.ZoneClosed {
		t.Fatalf("closed written zone is %v", c.Cond)
	}
	// Closing an unwritten open zone makes it empty and frees both.
	if err := d.ZoneMgmt(backend.ZoneOpClose, zs(3)); err != nil {
		t.Fatal(err)
	}
	if c := zoneCond(t, d, 3); c.Cond != backend.ZoneEmpty {
		t.Fatalf("closed unwritten zone is %v", c.Cond)
	}
	// active: 2 (closed), 4 (explicit) = 2; open: 1.
	if d.open != 1 || d.active != 2 {
		t.Fatalf("open %d active %d, want 1 2", d.open, d.active)
	}
	// Writes open zones 5 and 6 implicitly: active 4, open 3.
	for _, i := range []int{5, 6} {
		if err := d.WriteAt(pattern(512, 2), zs(i), 0); err != nil {
			t.Fatal(err)
		}
	}
	wantErr(t, d.WriteAt(pattern(512, 2), zs(7), 0), backend.ErrTooManyActive, "fifth active zone")
	wantErr(t, d.ZoneMgmt(backend.ZoneOpFinish, zs(7)), backend.ErrTooManyActive, "finish of an empty zone at the active limit")
	// Writing the closed zone 2 needs an open slot: the device closes the
	// oldest implicitly open zone (5) for it.
	if err := d.WriteAt(pattern(512, 3), zs(2)+512, 0); err != nil {
		t.Fatal(err)
	}
	if c := zoneCond(t, d, 5); c.Cond != backend.ZoneClosed {
		t.Fatalf("oldest implicit zone is %v, want closed", c.Cond)
	}
	if c := zoneCond(t, d, 2); c.Cond != backend.ZoneImplicitOpen {
		t.Fatalf("written closed zone is %v", c.Cond)
	}
	if d.Counters().ImplicitCloses != 1 {
		t.Fatalf("implicit closes %d", d.Counters().ImplicitCloses)
	}
	// Finishing frees an active slot; then zone 7 can be written.
	if err := d.ZoneMgmt(backend.ZoneOpFinish, zs(6)); err != nil {
		t.Fatal(err)
	}
	if err := d.WriteAt(pattern(512, 4), zs(7), 0); err != nil {
		t.Fatal(err)
	}
	checkAccounting(t, d)
}

// checkAccounting recounts the open and active zones from the conditions.
func checkAccounting(t *testing.T, d *Device) {
	t.Helper()
	open, active, implicit := 0, 0, 0
	for i := range d.zones {
		_, c := d.zones[i].load()
		if c.Open() {
			open++
		}
		if c.Active() {
			active++
		}
		if c == backend.ZoneImplicitOpen {
			implicit++
		}
	}
	d.limMu.Lock()
	defer d.limMu.Unlock()
	if open != d.open || active != d.active || implicit != len(d.implicit) {
		t.Fatalf("accounting open %d active %d implicit %d, conditions say %d %d %d",
			d.open, d.active, len(d.implicit), open, active, implicit)
	}
	if g := d.geo; (g.MaxOpen > 0 && open > g.MaxOpen) || (g.MaxActive > 0 && active > g.MaxActive) {
		t.Fatalf("limits exceeded: open %d active %d", open, active)
	}
}

func TestZoneActions(t *testing.T) {
	d, _ := newDev(t, testGeometry(), 6)
	z := int64(2 * testZone)
	wantErr(t, d.ZoneMgmt(backend.ZoneOpReset, 0), backend.ErrZoneConventional, "reset of a conventional zone")
	wantErr(t, d.ZoneMgmt(backend.ZoneOpReset, z+512), backend.ErrZoneState, "reset of a non-start offset")
	wantErr(t, d.ZoneMgmt(backend.ZoneOpClose, z), backend.ErrZoneState, "close of an empty zone")
	if _, err := d.Append(pattern(512, 1), 0, 0); !errors.Is(err, backend.ErrZoneConventional) {
		t.Fatalf("append to a conventional zone: %v", err)
	}

	if err := d.WriteAt(pattern(4096, 1), z, 0); err != nil {
		t.Fatal(err)
	}
	if err := d.ZoneMgmt(backend.ZoneOpFinish, z); err != nil {
		t.Fatal(err)
	}
	r := zoneCond(t, d, 2)
	if r.Cond != backend.ZoneFull || r.WP != z+testZone {
		t.Fatalf("finished zone: %+v", r)
	}
	wantErr(t, d.ZoneMgmt(backend.ZoneOpOpen, z), backend.ErrZoneState, "open of a full zone")
	wantErr(t, d.ZoneMgmt(backend.ZoneOpClose, z), backend.ErrZoneState, "close of a full zone")
	got := make([]byte, testZone)
	if err := d.ReadAt(got, z); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[:4096], pattern(4096, 1)) || !bytes.Equal(got[4096:], make([]byte, testZone-4096)) {
		t.Fatal("finished zone reads wrong")
	}

	if err := d.ZoneMgmt(backend.ZoneOpReset, z); err != nil {
		t.Fatal(err)
	}
	if r := zoneCond(t, d, 2); r.Cond != backend.ZoneEmpty || r.WP != z {
		t.Fatalf("reset zone: %+v", r)
	}
	if err := d.ReadAt(got, z); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, make([]byte, testZone)) {
		t.Fatal("reset zone does not read zeroes")
	}
	c := d.Counters()
	if c.Resets != 1 || c.ReclaimBytes != 4096 || c.Finishes != 1 || c.FinishBytes != testZone-4096 {
		t.Fatalf("counters %+v", c)
	}

	// Append returns where the data landed and moves the write pointer.
	for i := range 3 {
		at, err := d.Append(pattern(1024, byte(i)), z, 0)
		if err != nil || at != z+int64(i)*1024 {
			t.Fatalf("append %d: at %d, %v", i, at, err)
		}
	}
	if _, err := d.Append(pattern(testZone, 9), z, 0); !errors.Is(err, backend.ErrZoneBoundary) {
		t.Fatalf("append beyond the capacity: %v", err)
	}
	if c := d.Counters(); c.AppendBytes != 3072 {
		t.Fatalf("append bytes %d", c.AppendBytes)
	}
	checkAccounting(t, d)
}

// TestConcurrentAppends checks that appends from many goroutines to few
// zones land once each, where they were told, with every limit kept.
func TestConcurrentAppends(t *testing.T) {
	g := testGeometry()
	g.MaxOpen, g.MaxActive = 0, 0
	d, _ := newDev(t, g, 6)
	const writers, each, size = 8, 24, 1024
	type landing struct {
		at   int64
		seed byte
	}
	var (
		mu  sync.Mutex
		got []landing
		wg  sync.WaitGroup
	)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				seed := byte(w*each + i)
				zoneOff := int64(2+(w+i)%4) * testZone
				at, err := d.Append(pattern(size, seed), zoneOff, uint32(w))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				got = append(got, landing{at, seed})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	seen := map[int64]bool{}
	buf := make([]byte, size)
	for _, l := range got {
		if seen[l.at] {
			t.Fatalf("two appends landed at %d", l.at)
		}
		seen[l.at] = true
		if err := d.ReadAt(buf, l.at); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf, pattern(size, l.seed)) {
			t.Fatalf("append at %d holds other data", l.at)
		}
	}
	var total int64
	zs, _ := d.ReportZones(2*testZone, 0)
	for _, z := range zs {
		total += z.WP - z.Start
	}
	if total != writers*each*size {
		t.Fatalf("write pointers advanced %d bytes, appended %d", total, writers*each*size)
	}
}

func TestReopenKeepsWritePointers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "zoned.img")
	g := testGeometry()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	l, err := FormatFile(path, g)
	if err != nil {
		t.Fatal(err)
	}
	d, ok, err := Open(path, false)
	if err != nil || !ok {
		t.Fatalf("open: %v %v", ok, err)
	}
	if _, _, err := Open(path, false); !errors.Is(err, backend.ErrBusy) {
		t.Fatalf("second open: %v, want busy", err)
	}
	if d.Size() != int64(l.Zones)*testZone || l.Zones < 12 {
		t.Fatalf("size %d with %d zones", d.Size(), l.Zones)
	}
	z2, z3, z4 := int64(2*testZone), int64(3*testZone), int64(4*testZone)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(d.WriteAt(pattern(8192, 1), z2, 0))
	must(d.ZoneMgmt(backend.ZoneOpOpen, z3))
	must(d.WriteAt(pattern(4096, 2), z4, 0))
	must(d.ZoneMgmt(backend.ZoneOpFinish, z4))
	must(d.WriteAt(pattern(4096, 3), 4096, 0))
	must(d.Close())

	d, ok, err = Open(path, true)
	if err != nil || !ok {
		t.Fatalf("reopen: %v %v", ok, err)
	}
	defer d.Close()
	for _, c := range []struct {
		zi   int
		cond backend.ZoneCond
		wp   int64
	}{{2, backend.ZoneClosed, z2 + 8192}, {3, backend.ZoneEmpty, z3}, {4, backend.ZoneFull, z4 + testZone}} {
		if r := zoneCond(t, d, c.zi); r.Cond != c.cond || r.WP != c.wp {
			t.Errorf("zone %d after reopen: %v at %d, want %v at %d", c.zi, r.Cond, r.WP, c.cond, c.wp)
		}
	}
	buf := make([]byte, 8192)
	must(d.ReadAt(buf, z2))
	if !bytes.Equal(buf, pattern(8192, 1)) {
		t.Error("zone data lost across reopen")
	}
	must(d.ReadAt(buf[:4096], 4096))
	if !bytes.Equal(buf[:4096], pattern(4096, 3)) {
		t.Error("conventional data lost across reopen")
	}
	if c := d.Counters(); c.HostBytes != 16384 || c.Finishes != 1 {
		t.Errorf("counters after reopen %+v", c)
	}
	wantErr(t, d.WriteAt(pattern(512, 1), z2+8192, 0), syscall.EROFS, "write on a read-only open")
}

func TestGeometrySpec(t *testing.T) {
	g, err := ParseGeometry("zone=1M,conv=3,max_open=6,max_active=8,sector=512")
	if err != nil {
		t.Fatal(err)
	}
	if g.ZoneSize != 1<<20 || g.Cap() != 1<<20 || g.Conv != 3 || g.MaxOpen != 6 || g.MaxActive != 8 || g.Sector != 512 {
		t.Fatalf("parsed %+v", g)
	}
	back, err := ParseGeometry(g.String())
	if err != nil || back != g {
		t.Fatalf("round trip %q: %+v %v", g.String(), back, err)
	}
	for _, bad := range []string{"zone=1000", "zone=1M,cap=2M", "max_open=9,max_active=8", "sector=1024",
		"conv=-1", "zone", "size=1M", "zone=1M,cap=1000"} {
		if _, err := ParseGeometry(bad); !errors.Is(err, ErrGeometry) {
			t.Errorf("%q: %v, want ErrGeometry", bad, err)
		}
	}
	m, _ := faulty.NewMem(testZone*2, 512)
	if _, err := Format(m, testGeometry()); !errors.Is(err, ErrGeometry) {
		t.Errorf("format of a too small image: %v", err)
	}
}

func TestDamagedState(t *testing.T) {
	m := newMem(t, testGeometry(), 6)
	d := load(t, m.Clone())
	if err := d.WriteAt(pattern(4096, 1), 2*testZone, 0); err != nil {
		t.Fatal(err)
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	img := d.media.(*faulty.Mem).Clone()
	l := d.Label()

	// One torn slot: the other one wins (the older state).
	torn := img.Clone()
	if err := torn.WriteAt([]byte{0xff}, l.slotOff(d.seq)+slotHeader+3, 0); err != nil {
		t.Fatal(err)
	}
	d2 := load(t, torn)
	if r := zoneCond(t, d2, 2); r.WP != 2*testZone {
		t.Fatalf("with the new slot torn the old state should win: %+v", r)
	}
	// Both slots bad: refused, not guessed.
	for i := range uint64(2) {
		if err := torn.WriteAt([]byte{0xff}, l.slotOff(i)+slotHeader+3, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := Load(torn, false); !errors.Is(err, ErrState) {
		t.Fatalf("both slots damaged: %v", err)
	}
	// A damaged label is refused too.
	bl := img.Clone()
	if err := bl.WriteAt([]byte{1}, bl.Size()-labelSize+30, 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Load(bl, false); !errors.Is(err, ErrState) {
		t.Fatalf("damaged label: %v", err)
	}
	// No label at all: not a zoned image.
	plain, _ := faulty.NewMem(1<<20, 512)
	if _, ok, err := Load(plain, false); ok || err != nil {
		t.Fatalf("plain media: ok %v %v", ok, err)
	}
}

// TestFailedSaveBreaksDevice: after a save fails, nothing more is written.
func TestFailedSaveBreaksDevice(t *testing.T) {
	m := newMem(t, testGeometry(), 6)
	fd := faulty.New(m, 1)
	d := load(t, fd)
	if err := d.WriteAt(pattern(4096, 1), 2*testZone, 0); err != nil {
		t.Fatal(err)
	}
	fd.FailFlushes(1)
	if err := d.Flush(); err == nil {
		t.Fatal("flush succeeded over a failing media")
	}
	if err := d.WriteAt(pattern(4096, 2), 2*testZone+4096, 0); err == nil {
		t.Fatal("write accepted after a failed save")
	}
	if err := d.ZoneMgmt(backend.ZoneOpReset, 2*testZone); err == nil {
		t.Fatal("reset accepted after a failed save")
	}
}

// TestBackendOpenPicksZoned: backend.Open recognises a zoned image by its
// label, even when asked for a plain file, and refuses kind zoned on an
// image without one.
func TestBackendOpenPicksZoned(t *testing.T) {
	dir := t.TempDir()
	mk := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(p, 1<<20); err != nil {
			t.Fatal(err)
		}
		return p
	}
	zimg, plain := mk("zoned.img"), mk("plain.img")
	if _, err := FormatFile(zimg, testGeometry()); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"", "file", "zoned"} {
		d, err := backend.Open(zimg, backend.OpenOptions{Kind: kind})
		if err != nil {
			t.Fatalf("kind %q: %v", kind, err)
		}
		_, zonedOK := d.(backend.Zoned)
		if d.Kind() != "zoned" || !zonedOK || d.Size() >= 1<<20 {
			t.Errorf("kind %q: opened %s of %d bytes", kind, d.Kind(), d.Size())
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := backend.Open(plain, backend.OpenOptions{Kind: "zoned"}); err == nil {
		t.Error("kind zoned opened an image without a zoned label")
	}
	d, err := backend.Open(plain, backend.OpenOptions{})
	if err != nil || d.Kind() != "file" {
		t.Fatalf("plain image: %v", err)
	}
	d.Close()
}

// TestConcurrentActionsKeepLimits runs appends, resets, finishes, opens,
// closes and flushes from many goroutines over few zones and tight
// limits: only the zone rules' own errors come back, the open and active
// accounting matches the conditions, and a reload sees the same zones.
func TestConcurrentActionsKeepLimits(t *testing.T) {
	m := newMem(t, testGeometry(), 12) // zones 2..11 sequential; open 3, active 4
	d := load(t, m)
	allowed := []error{backend.ErrTooManyOpen, backend.ErrTooManyActive, backend.ErrZoneState,
		backend.ErrZoneBoundary, backend.ErrZoneFull}
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 5))
			for range 300 {
				zoff := int64(2+rng.IntN(10)) * testZone
				var err error
				switch r := rng.IntN(12); r {
				case 0:
					err = d.ZoneMgmt(backend.ZoneOpReset, zoff)
				case 1:
					err = d.ZoneMgmt(backend.ZoneOpFinish, zoff)
				case 2:
					err = d.ZoneMgmt(backend.ZoneOpOpen, zoff)
				case 3:
					err = d.ZoneMgmt(backend.ZoneOpClose, zoff)
				case 4:
					err = d.Flush()
				default:
					_, err = d.Append(pattern(512*(1+rng.IntN(8)), byte(r)), zoff, 0)
				}
				if err == nil {
					continue
				}
				ok := false
				for _, a := range allowed {
					ok = ok || errors.Is(err, a)
				}
				if !ok {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	checkAccounting(t, d)
	c := d.Counters()
	t.Logf("counters %+v", c)
	if c.Resets == 0 || c.Finishes == 0 || c.AppendBytes == 0 || c.ImplicitCloses == 0 {
		t.Fatalf("the workload missed a kind of action: %+v", c)
	}
	before, err := d.ReportZones(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d2 := load(t, m.Clone())
	after, _ := d2.ReportZones(0, 0)
	checkAccounting(t, d2)
	for i := range before {
		b, a := before[i], after[i]
		if a.WP != b.WP {
			t.Errorf("zone %d: write pointer %d after reload, %d before", i, a.WP, b.WP)
		}
		if b.Cond.Open() && a.Cond != backend.ZoneClosed && a.Cond != backend.ZoneEmpty {
			t.Errorf("zone %d: open zone reloads as %v", i, a.Cond)
		}
	}
}

// TestMakeWritable: an image opened read-only refuses writes and actions
// and saves nothing; after MakeWritable (the remount read-write) it takes
// them, and what it then flushed survives a reopen.
func TestMakeWritable(t *testing.T) {
	p := filepath.Join(t.TempDir(), "zoned.img")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, 1<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := FormatFile(p, testGeometry()); err != nil {
		t.Fatal(err)
	}
	d, ok, err := Open(p, true)
	if err != nil || !ok {
		t.Fatalf("open read-only: %v %v", ok, err)
	}
	z := int64(2 * testZone)
	wantErr(t, d.WriteAt(pattern(4096, 1), z, 0), syscall.EROFS, "write while read-only")
	wantErr(t, d.ZoneMgmt(backend.ZoneOpFinish, z), syscall.EROFS, "finish while read-only")
	if err := backend.MakeWritable(d); err != nil {
		t.Fatal(err)
	}
	if err := d.WriteAt(pattern(4096, 1), z, 0); err != nil {
		t.Fatal(err)
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d, ok, err = Open(p, true)
	if err != nil || !ok {
		t.Fatalf("reopen: %v %v", ok, err)
	}
	defer d.Close()
	if r := zoneCond(t, d, 2); r.WP != z+4096 {
		t.Fatalf("write pointer %d after the reopen, want %d", r.WP, z+4096)
	}
}
