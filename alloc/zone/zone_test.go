package zone

import (
	"context"
	"errors"
	"syscall"
	"testing"

	"github.com/streamfs/streamfs/alloc"
	"github.com/streamfs/streamfs/alloc/victim"
	"github.com/streamfs/streamfs/backend"
)

func TestStreamsFitLimits(t *testing.T) {
	for _, c := range []struct {
		open, active int
		want         uint32
		perStream    int
		err          bool
	}{
		{0, 0, 16, 1, false},     // no limits: every stream
		{14, 14, 5, 1, false},    // 5 streams + 2 generic + 6 reclaim = 13 <= 14
		{14, 8, 2, 1, false},     // active is the tighter limit: 2+2+3 = 7
		{20, 0, 5, 2, false},     // two slots per stream: 10+2+6 = 18
		{3, 3, 0, 1, false},      // room for generic and one reclaim slot only
		{2, 2, 0, 1, true},       // not even that
		{100, 100, 16, 1, false}, // never more than asked
	} {
		geo := Geometry{ZoneBlocks: 16, CapBlocks: 16, Zones: 64, First: 2, MaxOpen: c.open, MaxActive: c.active}
		a, err := New(geo, newFake(), Options{Streams: 16, StreamSlots: c.perStream, BlockSize: 4096})
		if c.err {
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("limits %d/%d: err %v, want ErrInvalid", c.open, c.active, err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if a.Streams() != c.want {
			t.Errorf("limits %d/%d, %d slots per stream: %d streams, want %d", c.open, c.active, c.perStream, a.Streams(), c.want)
		}
		if lim := geo.limit(); lim > 0 && len(a.slots) > lim {
			t.Errorf("limits %d/%d: %d slots", c.open, c.active, len(a.slots))
		}
		a.Close()
	}
}

func TestPlacement(t *testing.T) {
	geo := Geometry{ZoneBlocks: 64, CapBlocks: 64, Zones: 100, First: 4}
	a := newTest(t, geo, newFake(), Options{Streams: 4, StreamSlots: 2, GenericSlots: 3})
	// Stream sets are the seed's partition over the stream slots.
	for s := uint32(1); s <= 6; s++ {
		for agino := uint32(0); agino < 4; agino++ {
			set := a.slotSet(alloc.MakeIno(0, agino), a.class(s), nil)
			first, size := alloc.StreamAGSet(alloc.DeviceStream(s, 4), 4, 8)
			if uint32(len(set)) != size || set[0].idx != int(first+agino%size) {
				t.Errorf("stream %d agino %d: target slot %d of %d, want %d of %d", s, agino, set[0].idx, len(set), first+agino%size, size)
			}
		}
	}
	// Files without a stream: the generic AG-set rule over generic slots.
	for ag := uint32(0); ag < 4; ag++ {
		for agino := uint32(0); agino < 4; agino++ {
			set := a.slotSet(alloc.MakeIno(ag, agino), 0, nil)
			want := a.nStream + int(alloc.GenericAGSet(ag%3, agino, 3))
			if set[0].idx != want || len(set) != 2 {
				t.Errorf("ag %d agino %d: generic target %d (set %d), want %d (2)", ag, agino, set[0].idx, len(set), want)
			}
		}
	}
	// Different streams never share a zone; one stream's files do.
	zoneOf := map[uint32]int{}
	for s := uint32(1); s <= 4; s++ {
		e1 := mustAlloc(t, a, Request{Ino: alloc.MakeIno(0, 2), Stream: s, Len: 4})
		e2 := mustAlloc(t, a, Request{Ino: alloc.MakeIno(1, 4), Stream: s, Len: 4})
		if a.zoneNo(e1.Start) != a.zoneNo(e2.Start) {
			t.Errorf("stream %d: files in zones %d and %d", s, a.zoneNo(e1.Start), a.zoneNo(e2.Start))
		}
		if e2.Start != e1.End() {
			t.Errorf("stream %d: second extent at %d, want %d (allocation pointer)", s, e2.Start, e1.End())
		}
		zoneOf[s] = a.zoneNo(e1.Start)
	}
	seen := map[int]uint32{}
	for s, z := range zoneOf {
		if o, dup := seen[z]; dup {
			t.Errorf("streams %d and %d share zone %d", s, o, z)
		}
		seen[z] = s
	}
	g := mustAlloc(t, a, Request{Ino: alloc.MakeIno(0, 0), Len: 4})
	if _, dup := seen[a.zoneNo(g.Start)]; dup {
		t.Errorf("generic data in a stream's zone %d", a.zoneNo(g.Start))
	}
	mustCheck(t, a)
}

func TestExtentsStayInZoneAndFill(t *testing.T) {
	geo := Geometry{ZoneBlocks: 16, CapBlocks: 10, Zones: 8, First: 1}
	a := newTest(t, geo, newFake(), Options{Reserve: 1})
	var got uint64
	prevZone := -1
	for range 5 {
		e := mustAlloc(t, a, Request{Ino: 1, Len: 7})
		z := a.zoneNo(e.Start)
		if e.Start+e.Len > uint64(z)*16+10 {
			t.Fatalf("extent %+v crosses zone %d's capacity", e, z)
		}
		if z != prevZone && prevZone >= 0 && e.Start != uint64(z)*16 {
			t.Fatalf("new zone %d not taken from its start: %+v", z, e)
		}
		prevZone = z
		got += e.Len
	}
	if got != 27 {
		t.Fatalf("got %d blocks, want 27", got)
	}
	// 7 then 3 (rest of zone) then 7, 3, 7: a zone is filled before the next.
	zs := a.Zones()
	if zs[0].Cond != CondFull || zs[1].Cond != CondFull || zs[2].Cond != CondOpen || zs[2].Alloc != 7 {
		t.Fatalf("zones %+v", zs[:3])
	}
	mustCheck(t, a)
}

func TestFailedWriteFinishesZone(t *testing.T) {
	geo := Geometry{ZoneBlocks: 16, CapBlocks: 16, Zones: 8, First: 1, MaxActive: 3}
	dev := newFake()
	a := newTest(t, geo, dev, Options{Reserve: 1, GenericSlots: 1})
	e1, _ := a.Alloc(done, Request{Ino: 1, Len: 4})
	e2, _ := a.Alloc(done, Request{Ino: 1, Len: 4})
	if err := a.Done(e2, errors.New("media error")); err != nil {
		t.Fatal(err)
	}
	// Broken: no more blocks from it, even with e1 still in flight.
	e3 := mustAlloc(t, a, Request{Ino: 1, Len: 4})
	if a.zoneNo(e3.Start) == a.zoneNo(e1.Start) {
		t.Fatalf("allocated %+v in the broken zone", e3)
	}
	if dev.count(backend.ZoneOpFinish) != 0 {
		t.Fatal("finished with a write in flight")
	}
	if err := a.Done(e1, nil); err != nil {
		t.Fatal(err)
	}
	if dev.count(backend.ZoneOpFinish) != 1 {
		t.Fatal("broken zone not finished once drained")
	}
	zi := a.Zones()[a.zoneNo(e1.Start)-1]
	if zi.Cond != CondReclaimable || zi.Live != 4 || zi.Garbage != 12 {
		t.Fatalf("broken zone: %+v", zi)
	}
	if err := a.Done(e1, nil); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("second Done: %v", err)
	}
	if st := a.Stats(); st.Active != 1 {
		t.Fatalf("active %d, want 1 (the slot's new zone)", st.Active)
	}
	mustCheck(t, a)
}

func TestFreeAndResetRules(t *testing.T) {
	geo := Geometry{ZoneBlocks: 8, CapBlocks: 8, Zones: 6, First: 1}
	dev := newFake()
	a := newTest(t, geo, dev, Options{Reserve: 1, GenericSlots: 1})
	e := mustAlloc(t, a, Request{Ino: 1, Len: 8}) // fills zone 1
	if err := a.Free(e.Start+e.Len, 1); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("free of a free zone's block: %v", err)
	}
	if err := a.Free(0, 1); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("free in a conventional zone: %v", err)
	}
	if err := a.Reset(1); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("reset with live blocks: %v", err)
	}
	if err := a.Free(e.Start, 5); err != nil {
		t.Fatal(err)
	}
	if err := a.Free(e.Start+4, 4); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("free of more than the live blocks: %v", err)
	}
	if err := a.Free(e.Start+5, 3); err != nil {
		t.Fatal(err)
	}
	dev.fail[backend.ZoneOpReset] = errors.New("io")
	if err := a.Reset(1); err == nil {
		t.Fatal("reset succeeded though the device failed")
	}
	mustCheck(t, a)
	delete(dev.fail, backend.ZoneOpReset)
	if err := a.Reset(1); err != nil {
		t.Fatal(err)
	}
	if s := a.Space(); s.Garbage != 0 || s.FreeZones != 5 {
		t.Fatalf("after reset: %+v", s)
	}
	mustCheck(t, a)
}

func TestVictimChoice(t *testing.T) {
	geo := Geometry{ZoneBlocks: 10, CapBlocks: 10, Zones: 20, First: 0}
	for _, pol := range []victim.Policy{victim.Greedy, victim.CostBenefit} {
		a := newTest(t, geo, newFake(), Options{Reserve: 1, GenericSlots: 1, Victim: pol})
		var zones []Extent
		for range 12 {
			zones = append(zones, mustAlloc(t, a, Request{Ino: 1, Len: 10}))
		}
		// Oldest zone: 6 of 10 live. Newest: 3 of 10 live. The rest
		// stay fully live.
		if err := a.Free(zones[0].Start, 4); err != nil {
			t.Fatal(err)
		}
		if err := a.Free(zones[11].Start, 7); err != nil {
			t.Fatal(err)
		}
		v, ok := a.Victim()
		if !ok {
			t.Fatal("no victim")
		}
		// Greedy: fewest live. Cost-benefit: age 12·0.4/1.2 = 4 beats
		// 1·0.7/0.6 ≈ 1.2, the old cold zone.
		want := a.zoneNo(zones[11].Start)
		if pol == victim.CostBenefit {
			want = a.zoneNo(zones[0].Start)
		}
		if v.Index != want || v.Cond != CondReclaiming {
			t.Errorf("%v: victim %+v, want zone %d", pol, v, want)
		}
		v2, ok := a.Victim()
		if !ok || v2.Index == v.Index {
			t.Errorf("%v: second victim %+v: the first was handed out again", pol, v2)
		}
		if _, ok := a.Victim(); ok {
			t.Errorf("%v: a third victim, though only two zones hold garbage", pol)
		}
		if err := a.Unpick(v2.Index); err != nil {
			t.Fatal(err)
		}
		if v3, ok := a.Victim(); !ok || v3.Index != v2.Index {
			t.Errorf("%v: unpicked zone not offered again: %+v", pol, v3)
		}
		// An empty zone wins under either rule.
		if err := a.Free(zones[5].Start, 10); err != nil {
			t.Fatal(err)
		}
		if v, _ := a.Victim(); v.Index != a.zoneNo(zones[5].Start) || v.Live != 0 {
			t.Errorf("%v: dead zone not chosen first: %+v", pol, v)
		}
		mustCheck(t, a)
	}
}

func TestENOSPCOnlyWithoutGarbage(t *testing.T) {
	geo := Geometry{ZoneBlocks: 8, CapBlocks: 8, Zones: 6, First: 0}
	a := newTest(t, geo, newFake(), Options{Streams: 1, Reserve: 1, GenericSlots: 1})
	// Stream 1 fills zones 0..4 (the fifth free zone is the reserve),
	// leaving 3 blocks of room in its last zone... then generic data
	// spills into that room before ENOSPC.
	var got []Extent
	for {
		e, err := a.Alloc(done, Request{Ino: 1, Stream: 1, Len: 5})
		if err != nil {
			if !errors.Is(err, ErrNoSpace) {
				t.Fatal(err)
			}
			break
		}
		_ = a.Done(e, nil)
		got = append(got, e)
	}
	var n uint64
	for _, e := range got {
		n += e.Len
	}
	if n != 5*8 {
		t.Fatalf("handed out %d blocks, want 40 (all but the reserve)", n)
	}
	if s := a.Space(); s.Avail != 0 || s.FreeZones != 1 {
		t.Fatalf("full: %+v", s)
	}
	_, err := a.Alloc(done, Request{Ino: 2, Len: 1})
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("generic write with no space: %v", err)
	}
	// Garbage in a full zone: writers wait for reclaim, never ENOSPC.
	if err := a.Free(got[0].Start, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Alloc(done, Request{Ino: 2, Len: 1}); !errors.Is(err, context.Canceled) {
		t.Fatalf("with garbage: %v, want a wait (cancelled)", err)
	}
	select {
	case <-a.ReclaimWanted():
	default:
		t.Fatal("reclaim not signalled")
	}
	if !a.NeedReclaim() {
		t.Fatal("NeedReclaim false with no free zone and garbage")
	}
	mustCheck(t, a)
}

func TestSpillBeforeENOSPC(t *testing.T) {
	geo := Geometry{ZoneBlocks: 8, CapBlocks: 8, Zones: 4, First: 0}
	a := newTest(t, geo, newFake(), Options{Streams: 1, Reserve: 1, GenericSlots: 1})
	g := mustAlloc(t, a, Request{Ino: 1, Len: 2}) // generic slot opens zone
	for range 2 {
		mustAlloc(t, a, Request{Ino: 2, Stream: 1, Len: 8})
	}
	// Stream 1 has no free zone left beyond the reserve and no garbage:
	// it takes the generic zone's room.
	e := mustAlloc(t, a, Request{Ino: 2, Stream: 1, Len: 8})
	if a.zoneNo(e.Start) != a.zoneNo(g.Start) || e.Len != 6 {
		t.Fatalf("spill %+v, want the 6 blocks left in zone %d", e, a.zoneNo(g.Start))
	}
	if _, err := a.Alloc(done, Request{Ino: 2, Stream: 1, Len: 1}); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("after spill: %v", err)
	}
}
