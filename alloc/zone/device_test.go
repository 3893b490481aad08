package zone

import (
	"bytes"
	"context"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/streamfs/streamfs/backend"
	"github.com/streamfs/streamfs/backend/faulty"
	"github.com/streamfs/streamfs/backend/zoned"
)

const devBlock = 4096

// emulated returns the emulated zoned device on a memory image: 64 KiB
// zones (16 blocks, 12 writable), one conventional, 6 open and active.
func emulated(t *testing.T) *zoned.Device {
	t.Helper()
	g := zoned.Geometry{ZoneSize: 64 << 10, ZoneCap: 48 << 10, Conv: 1, MaxOpen: 6, MaxActive: 6, Sector: 4096}
	m, err := faulty.NewMem(40*g.ZoneSize+(256<<10), 4096)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zoned.Format(m, g); err != nil {
		t.Fatal(err)
	}
	d, ok, err := zoned.Load(m, false)
	if err != nil || !ok {
		t.Fatalf("load: %v %v", ok, err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// fill is the content a block of a file holds: its tag and block number.
func fill(p []byte, tag uint64) {
	for i := 0; i < len(p); i += 16 {
		binary.LittleEndian.PutUint64(p[i:], tag)
		binary.LittleEndian.PutUint64(p[i+8:], uint64(i/devBlock))
	}
}

type devExtent struct {
	Extent
	stream uint32
	tag    uint64
}

// The allocator drives the emulated device through fill, overwrite and
// reclaim cycles: every write it hands out lands at a write pointer within
// the open and active limits (the device refuses anything else), reclaim
// resets only dead zones, data reads back, and a new allocator loaded from
// the zone report and the extents finds the same live counts.
func TestOnEmulatedDevice(t *testing.T) {
	d := emulated(t)
	geo, err := FromDevice(d.Geometry(), devBlock)
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(geo, d, Options{Streams: 4, GenericSlots: 1, Reserve: 2, Cache: true, BlockSize: devBlock})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.Streams() != 2 { // 2·1 + 1 generic + 3 reclaim = 6 slots
		t.Fatalf("streams %d, want 2 for 6 open zones", a.Streams())
	}
	rng := rand.New(rand.NewPCG(3, 4))
	var live []devExtent
	tag := uint64(0)
	write := func(e Extent, tag uint64, src []byte) {
		p := make([]byte, e.Len*devBlock)
		if src != nil {
			copy(p, src)
		} else {
			fill(p, tag)
		}
		werr := d.WriteAt(p, int64(e.Start)*devBlock, 0)
		if err := a.Done(e, werr); err != nil {
			t.Fatal(err)
		}
		if werr != nil {
			t.Fatalf("device refused %+v: %v", e, werr)
		}
	}
	reclaim := func() {
		v, ok := a.Victim()
		if !ok {
			return
		}
		zs, ze := v.Start, v.Start+geo.ZoneBlocks
		var keep []devExtent
		for _, o := range live {
			if o.Start < zs || o.Start >= ze {
				keep = append(keep, o)
				continue
			}
			buf := make([]byte, o.Len*devBlock)
			if err := d.ReadAt(buf, int64(o.Start)*devBlock); err != nil {
				t.Fatal(err)
			}
			for off := uint64(0); off < o.Len; {
				c, err := a.AllocReclaim(context.Background(), o.stream, o.Len-off)
				if err != nil {
					t.Fatal(err)
				}
				write(c, 0, buf[off*devBlock:])
				// Pieces keep their tag; block numbers inside follow the
				// original extent, so remember the offset in the tag.
				keep = append(keep, devExtent{c, o.stream, o.tag + off<<32})
				off += c.Len
			}
			if err := a.Free(o.Start, o.Len); err != nil {
				t.Fatal(err)
			}
		}
		live = keep
		if err := a.Reset(v.Index); err != nil {
			t.Fatal(err)
		}
	}
	steps := 3000
	if testing.Short() {
		steps = 800
	}
	for range steps {
		if a.NeedReclaim() {
			reclaim()
		}
		stream := uint32(rng.IntN(3))
		e, err := a.Alloc(context.Background(), Request{Ino: uint64(rng.IntN(8)), Stream: stream, Len: 1 + rng.Uint64N(6), Random: rng.IntN(2) == 0})
		if err != nil {
			t.Fatal(err)
		}
		tag++
		write(e, tag, nil)
		live = append(live, devExtent{e, stream, tag})
		for len(live) > 40 { // overwrite: the old copy dies
			i := rng.IntN(len(live))
			if err := a.Free(live[i].Start, live[i].Len); err != nil {
				t.Fatal(err)
			}
			live[i] = live[len(live)-1]
			live = live[:len(live)-1]
		}
	}
	ctr := d.Counters()
	if ctr.Resets == 0 {
		t.Fatal("no zone was reclaimed")
	}
	if ctr.ImplicitCloses != 0 {
		t.Errorf("the device closed %d zones to open others: the allocator exceeded max_open", ctr.ImplicitCloses)
	}
	// Data reads back: each block holds its tag and its block number in
	// the extent it was first written as.
	for _, o := range live {
		buf := make([]byte, o.Len*devBlock)
		if err := d.ReadAt(buf, int64(o.Start)*devBlock); err != nil {
			t.Fatal(err)
		}
		want := make([]byte, (o.Len+o.tag>>32)*devBlock)
		fill(want, o.tag&(1<<32-1))
		if !bytes.Equal(buf, want[(o.tag>>32)*devBlock:]) {
			t.Fatalf("extent %+v does not read back", o)
		}
	}
	mustCheck(t, a)
	before := a.Zones()

	// Mount again: zone report plus extents.
	report, err := d.ReportZones(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var exts []Extent
	for _, o := range live {
		exts = append(exts, o.Extent)
	}
	b, err := New(geo, d, Options{Streams: 4, GenericSlots: 1, Reserve: 2, BlockSize: devBlock})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Load(report, exts); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, b)
	for i, z := range b.Zones() {
		if z.Live != before[i].Live {
			t.Fatalf("zone %d: %d live after load, %d before", z.Index, z.Live, before[i].Live)
		}
		if before[i].Cond == CondOpen && before[i].Alloc > 0 && z.Cond != CondFull && z.Cond != CondReclaimable {
			t.Fatalf("zone %d was written part-way, after load %v", z.Index, z.Cond)
		}
	}
	after, _ := d.ReportZones(0, 0)
	for _, z := range after {
		if z.Cond.Active() {
			t.Fatalf("zone at %d still active after load: %v", z.Start, z.Cond)
		}
	}
	// And the loaded allocator keeps writing where the device lets it.
	for range 50 {
		e, err := b.Alloc(context.Background(), Request{Ino: 1, Stream: 1, Len: 4})
		if err != nil {
			t.Fatal(err)
		}
		werr := d.WriteAt(make([]byte, e.Len*devBlock), int64(e.Start)*devBlock, 0)
		if err := b.Done(e, werr); err != nil || werr != nil {
			t.Fatalf("after load: %v %v", err, werr)
		}
		if b.NeedReclaim() {
			break
		}
	}
	// Load refuses extents past a write pointer.
	c, _ := New(geo, d, Options{GenericSlots: 1, BlockSize: devBlock})
	defer c.Close()
	var free backend.Zone
	for _, z := range after {
		if z.Cond == backend.ZoneEmpty {
			free = z
		}
	}
	if err := c.Load(after, []Extent{{Start: uint64(free.Start / devBlock), Len: 1}}); err == nil {
		t.Fatal("load accepted an extent in an empty zone")
	}
}
