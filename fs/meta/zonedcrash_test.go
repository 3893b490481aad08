package meta

// Crash tests of the zoned layout: the power-loss rounds of
// powerloss_test.go on a small zoned image, and power cuts at every device
// operation of one reclaim pass.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/streamfs/streamfs/fs/crashtest/datatag"
	"github.com/streamfs/streamfs/fs/format"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/streamfs/streamfs/backend"
	"github.com/streamfs/streamfs/backend/faulty"
	"github.com/streamfs/streamfs/backend/zoned"
)

// keepOpen is a device whose Close leaves the media open: a zoned device
// loaded over a test's cut device must not close it, the test mounts it
// again after the crash.
type keepOpen struct{ backend.Device }

func (keepOpen) Close() error { return nil }

// overZoned loads the zoned device an image on dev holds.
func overZoned(dev backend.Device, ro bool) (backend.Device, error) {
	d, ok, err := zoned.Load(keepOpen{dev}, ro)
	if err == nil && !ok {
		err = errors.New("no zoned label on the image")
	}
	return d, err
}

// newZonedFaulty makes a zoned image of seq sequential zones (zonedGeo)
// with a streamfs on it and returns its media through a faulty device.
func newZonedFaulty(t testing.TB, seq int, seed int64) *faulty.Device {
	t.Helper()
	path := newZonedImage(t, seq)
	inner, err := backend.OpenFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	fd := faulty.New(inner, seed)
	t.Cleanup(func() { fd.Revive(); fd.Close() })
	return fd
}

// TestPowerLossZoned runs the power-loss rounds on a zoned image so small
// (8 sequential zones of 6 MiB) that reclaim runs: every mount finishes
// the zones left part-written, so a few rounds fill the device with
// garbage. Cuts land in writes, commits, reclaim copies and resets alike.
func TestPowerLossZoned(t *testing.T) {
	seed := envInt(t, "STREAMFS_POWERLOSS_SEED", time.Now().UnixNano())
	fd := newZonedFaulty(t, 8, seed)
	runPowerLoss(t, seed, fd, plTarget{zoned: true, over: overZoned})
}

// zonedBase is a zoned image with fsync'd files whose zones hold garbage,
// cleanly unmounted: the state each reclaim crash starts from.
type zonedBase struct {
	img  *faulty.Mem
	want map[string][]byte
}

// newZonedBase writes nfiles files and overwrites parts of them (garbage
// in their zones), syncs and unmounts. The next mount finishes the zones
// left part-written, which makes them reclaim victims.
func newZonedBase(t *testing.T, seq, nfiles int) *zonedBase {
	t.Helper()
	g, size := zonedGeo(seq)
	img, err := faulty.NewMem(size+4<<20, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zoned.Format(img, g); err != nil {
		t.Fatal(err)
	}
	d, err := overZoned(img, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Mkfs(d, format.MkfsParams{}); err != nil {
		t.Fatal(err)
	}
	s, err := Open(d, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	b := &zonedBase{img: img, want: map[string][]byte{}}
	rng := rand.New(rand.NewPCG(5, 8))
	var ins []*Inode
	for i := range nfiles {
		name := fmt.Sprintf("f%d", i)
		in := mustCreate(t, s, s.Root(), name)
		data := datatag.Bytes(in.Ino(), 0, 256<<10, 1)
		mustWrite(t, s, in, data, 0)
		ins = append(ins, in)
		b.want[name] = data
	}
	for range 6 * nfiles {
		i := rng.IntN(nfiles)
		name := fmt.Sprintf("f%d", i)
		off := rng.IntN(240 << 10)
		p := datatag.Bytes(ins[i].Ino(), int64(off), 1+rng.IntN(16<<10), byte(2+rng.IntN(100)))
		mustWrite(t, s, ins[i], p, int64(off))
		copy(b.want[name][off:], p)
	}
	if err := s.SyncAll(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	return b
}

// mount mounts a copy of the base image through a cut device.
func (b *zonedBase) mount(t *testing.T, seed int64) (*cutDev, *Store) {
	t.Helper()
	dev := &cutDev{Device: faulty.New(b.img.Clone(), seed), at: -1}
	s, err := plTarget{over: overZoned}.open(dev)
	if err != nil {
		t.Fatal(err)
	}
	return dev, s
}

// check verifies a mounted copy: every file as written, no extent past
// its zone's write pointer, the zone allocator's invariants.
func (b *zonedBase) check(t *testing.T, s *Store, when string) {
	t.Helper()
	for name, want := range b.want {
		in, err := s.Lookup(s.Root(), name)
		if err != nil {
			t.Fatalf("%s: %s: %v", when, name, err)
		}
		if got := readAll(t, s, in); !bytes.Equal(got, want) {
			t.Fatalf("%s: %s: %d bytes, want %d; first difference at %d", when, name, len(got), len(want), firstDiff(got, want))
		}
	}
	checkExtentsWritten(t, s, when)
	mustFsckZoned(t, s)
}

// checkExtentsWritten fails when an extent lies past its zone's write
// pointer (a mount refuses that too: zone.Allocator.Load).
func checkExtentsWritten(t *testing.T, s *Store, when string) {
	t.Helper()
	report, err := s.zones.dev.ReportZones(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	bs := int64(s.bs)
	wp := map[int64]int64{}
	for _, z := range report {
		wp[z.Start] = z.WP
	}
	zsize := int64(s.sb.ZoneBlocks) * bs
	err = s.eachDataExtent(func(ino uint64, x Extent) bool {
		start := int64(x.PBlk) * bs
		zs := start / zsize * zsize
		if end := int64(x.PBlk+x.Len) * bs; end > wp[zs] {
			t.Errorf("%s: inode %d extent %+v ends at byte %d, past zone %d's write pointer %d", when, ino, x, end, zs/zsize, wp[zs])
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if t.Failed() {
		t.FailNow()
	}
}

// reclaimAll runs reclaim passes until no zone holds garbage and returns
// how many zones it reset.
func reclaimAll(t *testing.T, s *Store, when string) int {
	t.Helper()
	n := 0
	for range 4 * s.sb.DataZones {
		did, err := s.reclaimOnce(context.Background())
		if err != nil {
			t.Fatalf("%s: reclaim: %v", when, err)
		}
		if !did {
			return n
		}
		n++
	}
	t.Fatalf("%s: reclaim does not run out of victims", when)
	return n
}

// opKind names a device operation of a reclaim pass by where it goes.
func opKind(g zoned.Geometry, zones int, op faulty.RecOp) string {
	switch {
	case op.Kind == faulty.RecFlush:
		return "flush"
	case op.Kind == faulty.RecDiscard:
		return "discard" // a reset giving its zone's space back
	case op.Off >= int64(zones)*g.ZoneSize:
		return "zone state"
	case op.Off >= int64(g.Conv)*g.ZoneSize:
		return "zone append" // a reclaim copy
	default:
		return "metadata" // the commit
	}
}

// Power cuts at every device operation of one reclaim pass — before the
// copies, between them and the commit, between the commit and the reset,
// inside the reset's state save — each before or after the operation
// lands, then a remount: the fsync'd files read back, no extent lies past
// a write pointer, the zone allocator's invariants hold, fsck is clean,
// and reclaim runs to the end and leaves the same files.
func TestZonedReclaimCrashPoints(t *testing.T) {
	seq := 8
	base := newZonedBase(t, seq, 6)
	g, _ := zonedGeo(seq)
	zones := g.Conv + seq
	// The pass once without a cut, recorded: its operations are the crash
	// points.
	rec := faulty.NewRecorder(base.img.Clone())
	s, err := plTarget{over: overZoned}.open(rec)
	if err != nil {
		t.Fatal(err)
	}
	rec.Mark(0)
	did, err := s.reclaimOnce(context.Background())
	if err != nil || !did {
		t.Fatalf("reclaim pass: %v %v", did, err)
	}
	rec.Stop()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for i, op := range rec.Ops() {
		if op.Kind == faulty.RecMark && op.Mark == 0 {
			for _, o := range rec.Ops()[i+1:] {
				if o.Kind != faulty.RecMark {
					kinds = append(kinds, opKind(g, zones, o))
				}
			}
			break
		}
	}
	seen := map[string]int{}
	for _, k := range kinds {
		seen[k]++
	}
	// A pass that copies, commits and resets touches all of these.
	for _, k := range []string{"zone append", "metadata", "flush", "zone state", "discard"} {
		if seen[k] == 0 {
			t.Fatalf("the reclaim pass made no %s operation: %v", k, kinds)
		}
	}
	t.Logf("reclaim pass: %d device operations %v", len(kinds), seen)
	resets := 0
	for at := range kinds {
		// -short: of the copies, the first, the last and every eighth.
		if testing.Short() && kinds[at] == "zone append" && at%8 != 0 && at+1 < len(kinds) && kinds[at+1] == "zone append" && at > 0 && kinds[at-1] == "zone append" {
			continue
		}
		for _, after := range []bool{false, true} {
			opt := faulty.CutOptions{KeepRandomPrefix: true, TearLast: true}
			if (at%2 == 0) == after {
				opt = faulty.CutOptions{Reorder: true, TearAny: true}
			}
			when := fmt.Sprintf("cut at operation %d (%s, after=%v, %+v)", at, kinds[at], after, opt)
			dev, s := base.mount(t, int64(at))
			dev.arm(at, after, opt)
			_, rerr := s.reclaimOnce(context.Background())
			if !dev.didCut() {
				t.Fatalf("%s: the pass made fewer operations than recorded (error %v)", when, rerr)
			}
			dev.disarm()
			s.Close()
			dev.Revive()
			rep, err := plTarget{over: overZoned}.fsck(dev)
			if err != nil || len(rep.Problems) > 0 {
				t.Fatalf("%s: fsck: %v %v", when, err, rep)
			}
			if s, err = (plTarget{over: overZoned}).open(dev); err != nil {
				t.Fatalf("%s: mount: %v", when, err)
			}
			base.check(t, s, when)
			resets += reclaimAll(t, s, when)
			base.check(t, s, when+", then reclaim")
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if s, err = (plTarget{over: overZoned}).open(dev); err != nil {
				t.Fatalf("%s: mount after reclaim: %v", when, err)
			}
			base.check(t, s, when+", then reclaim and a remount")
			s.Close()
		}
	}
	if resets == 0 {
		t.Fatal("reclaim after the crashes reset no zone")
	}
}
