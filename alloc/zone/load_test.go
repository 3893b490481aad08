package zone

import (
	"errors"
	"testing"

	"github.com/streamfs/streamfs/backend"
)

func report(geo Geometry, bs int64, conds []backend.ZoneCond, wps []uint64) []backend.Zone {
	var out []backend.Zone
	for i := range geo.Zones {
		z := backend.Zone{Start: int64(i) * int64(geo.ZoneBlocks) * bs, Len: int64(geo.ZoneBlocks) * bs, Cap: int64(geo.CapBlocks) * bs, Type: backend.ZoneSeqWriteRequired}
		if i < geo.First {
			z.Type, z.Cond = backend.ZoneConventional, backend.ZoneNotWP
		} else {
			z.Cond = conds[i-geo.First]
			z.WP = z.Start + int64(wps[i-geo.First])*bs
		}
		out = append(out, z)
	}
	return out
}

func TestLoad(t *testing.T) {
	geo := Geometry{ZoneBlocks: 16, CapBlocks: 12, Zones: 6, First: 1}
	conds := []backend.ZoneCond{backend.ZoneEmpty, backend.ZoneFull, backend.ZoneClosed, backend.ZoneOffline, backend.ZoneFull}
	wps := []uint64{0, 12, 5, 0, 12}
	rep := report(geo, 4096, conds, wps)
	live := []Extent{{Start: 2 * 16, Len: 12}, {Start: 3 * 16, Len: 2}, {Start: 3*16 + 3, Len: 1}, {Start: 5 * 16, Len: 4}}

	dev := newFake()
	a := newTest(t, geo, dev, Options{Reserve: 1, GenericSlots: 1})
	if err := a.Load(rep, live); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, a)
	if n := dev.count(backend.ZoneOpFinish); n != 1 {
		t.Fatalf("%d finishes, want 1 (the closed zone)", n)
	}
	zs := a.Zones()
	want := []struct {
		cond          Cond
		live, garbage uint64
	}{
		{CondFree, 0, 0},
		{CondFull, 12, 0},
		{CondReclaimable, 3, 2 + 7}, // 5 written, 3 live, 7 given up by the finish
		{CondOffline, 0, 0},
		{CondReclaimable, 4, 8},
	}
	for i, w := range want {
		if zs[i].Cond != w.cond || zs[i].Live != w.live || zs[i].Garbage != w.garbage {
			t.Errorf("zone %d: %+v, want %+v", zs[i].Index, zs[i], w)
		}
	}
	s := a.Space()
	if s.FreeZones != 1 || s.Garbage != 17 || s.Live != 19 || s.Total != 4*12 || s.Avail != 12+17-12 {
		t.Errorf("space %+v", s)
	}
	if v, ok := a.Victim(); !ok || v.Index != 3 {
		t.Errorf("victim %+v", v)
	}

	// Refusals: after an Alloc; extents past a write pointer; extents
	// that overlap; a report missing a zone.
	// (A writer would wait here: one free zone, the reserve, and garbage.)
	if _, err := a.Alloc(done, Request{Ino: 1, Len: 1}); err == nil {
		t.Error("a writer took the reserve")
	}
	if _, err := a.AllocReclaim(done, 0, 1); err != nil {
		t.Fatal(err)
	}
	if err := a.Load(rep, live); !errors.Is(err, ErrInvalid) {
		t.Errorf("load after alloc: %v", err)
	}
	for name, c := range map[string]struct {
		rep  []backend.Zone
		live []Extent
	}{
		"past wp":   {rep, []Extent{{Start: 3*16 + 4, Len: 2}}},
		"empty":     {rep, []Extent{{Start: 1 * 16, Len: 1}}},
		"overlap":   {rep, []Extent{{Start: 3 * 16, Len: 4}, {Start: 3 * 16, Len: 3}}},
		"conv":      {rep, []Extent{{Start: 0, Len: 1}}},
		"no zone 5": {rep[:5], nil},
	} {
		b := newTest(t, geo, newFake(), Options{Reserve: 1, GenericSlots: 1})
		if err := b.Load(c.rep, c.live); err == nil {
			t.Errorf("%s: load accepted", name)
		}
	}
}

// A finish the device refuses takes the zone out of use; allocation goes
// on in another zone and the failure is counted.
func TestFinishFailure(t *testing.T) {
	geo := Geometry{ZoneBlocks: 8, CapBlocks: 8, Zones: 6, First: 0}
	dev := newFake()
	a := newTest(t, geo, dev, Options{Reserve: 1, GenericSlots: 1})
	e, _ := a.Alloc(done, Request{Ino: 1, Len: 2})
	dev.fail[backend.ZoneOpFinish] = errors.New("io")
	if err := a.Done(e, errors.New("write failed")); err != nil {
		t.Fatal(err) // the zone is still the slot's: no finish yet
	}
	e2 := mustAlloc(t, a, Request{Ino: 1, Len: 2}) // retires it: finish fails
	if a.zoneNo(e2.Start) == a.zoneNo(e.Start) {
		t.Fatal("allocated in the broken zone")
	}
	if st := a.Stats(); st.FinishErrors != 1 || st.Active != 2 {
		t.Fatalf("stats %+v: want one finish error and its zone still active", st)
	}
	if z := a.Zones()[a.zoneNo(e.Start)]; z.Cond != CondOffline {
		t.Fatalf("zone %+v", z)
	}
	mustCheck(t, a)
}

func TestFromDevice(t *testing.T) {
	g, err := FromDevice(backend.ZoneGeometry{ZoneSize: 1 << 20, ZoneCap: 768 << 10, Zones: 10, Conventional: 2, MaxOpen: 4, MaxActive: 6}, 4096)
	if err != nil || g != (Geometry{ZoneBlocks: 256, CapBlocks: 192, Zones: 10, First: 2, MaxOpen: 4, MaxActive: 6}) {
		t.Fatalf("%+v %v", g, err)
	}
	if _, err := FromDevice(backend.ZoneGeometry{ZoneSize: 1 << 20, ZoneCap: 1000, Zones: 10}, 4096); !errors.Is(err, ErrInvalid) {
		t.Fatalf("capacity not whole blocks: %v", err)
	}
	if _, err := New(Geometry{ZoneBlocks: 8, CapBlocks: 9, Zones: 4}, newFake(), Options{BlockSize: 4096}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("capacity above zone size: %v", err)
	}
	if _, err := New(Geometry{ZoneBlocks: 8, CapBlocks: 8, Zones: 2}, newFake(), Options{BlockSize: 4096}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("no zone beside the reserve: %v", err)
	}
}
