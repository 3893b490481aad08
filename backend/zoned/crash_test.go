package zoned

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/streamfs/streamfs/backend"
	"github.com/streamfs/streamfs/backend/faulty"
)

// zsnap is one zone as the model has it after an operation.
type zsnap struct {
	inc  int // incarnation: resets counted
	fill int64
	full bool
}

// crashModel is what a workload did, operation by operation.
type crashModel struct {
	g     Geometry
	zones int
	// incs[z][i] is what incarnation i of zone z had written, in order.
	incs [][][]byte
	// snaps[k] is every zone after operation k; snaps[0] is the format.
	snaps [][]zsnap
	// saved[k]: operation k saved the state (Flush, a reset or finish
	// that changed the zone).
	saved []bool
	// conv[i] is the operation after which the i-th conventional block
	// (of 512 bytes, at 512*i) was written, and its seed.
	conv []convWrite
}

type convWrite struct {
	op   int
	seed byte
}

func (m *crashModel) cur() []zsnap { return m.snaps[len(m.snaps)-1] }

// TestCrashStatesKeepWritePointersHonest runs a random zoned workload over
// a recording device and checks every crash state a power cut could leave
// (prefixes, torn writes, reordered unflushed writes): the image always
// loads; its zones are exactly the zones after one of the state saves that
// may have been the last to land — never behind the last save that
// completed, never claiming data a crash lost; bytes past a write pointer
// read as zeroes; conventional blocks written before a completed save read
// back; and the device keeps working after the crash.
func TestCrashStatesKeepWritePointersHonest(t *testing.T) {
	g := Geometry{ZoneSize: 16 << 10, Conv: 1, MaxOpen: 2, MaxActive: 3, Sector: 512}
	const zones = 6
	size := int64(zones)*g.ZoneSize + 2*slotSizeFor(zones+1) + labelSize
	base, err := faulty.NewMem(size, 512)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Format(base, g); err != nil {
		t.Fatal(err)
	}
	rec := faulty.NewRecorder(base.Clone())
	d := load(t, rec)

	nops := 160
	if testing.Short() {
		nops = 70
	}
	m := &crashModel{g: g, zones: zones, incs: make([][][]byte, zones)}
	for z := range zones {
		m.incs[z] = [][]byte{nil}
	}
	m.snaps = [][]zsnap{make([]zsnap, zones)}
	m.saved = []bool{true}
	rng := rand.New(rand.NewPCG(7, 11))
	capacity := g.Cap()
	for k := 1; k <= nops; k++ {
		next := append([]zsnap(nil), m.cur()...)
		saved := false
		z := g.Conv + rng.IntN(zones-g.Conv)
		zoff := int64(z) * g.ZoneSize
		s := &next[z]
		switch r := rng.IntN(20); {
		case r < 10: // write or append at the write pointer
			n := int64(1+rng.IntN(8)) * 512
			if s.full || s.fill+n > capacity {
				n = capacity - s.fill
			}
			if s.full || n == 0 {
				break
			}
			p := pattern(int(n), byte(k))
			var err error
			if r < 6 {
				err = d.WriteAt(p, zoff+s.fill, 0)
			} else {
				var at int64
				at, err = d.Append(p, zoff, 0)
				if err == nil && at != zoff+s.fill {
					t.Fatalf("op %d: append landed at %d, want %d", k, at, zoff+s.fill)
				}
			}
			if errors.Is(err, backend.ErrTooManyActive) || errors.Is(err, backend.ErrTooManyOpen) {
				break // the model is unchanged, as the zone must be
			}
			if err != nil {
				t.Fatalf("op %d: write zone %d: %v", k, z, err)
			}
			m.incs[z][s.inc] = append(m.incs[z][s.inc], p...)
			s.fill += n
			s.full = s.fill == capacity
		case r < 12: // conventional block
			i := len(m.conv)
			if int64(i+1)*512 > int64(g.Conv)*g.ZoneSize {
				break
			}
			if err := d.WriteAt(pattern(512, byte(k)), int64(i)*512, 0); err != nil {
				t.Fatal(err)
			}
			m.conv = append(m.conv, convWrite{op: k, seed: byte(k)})
		case r < 14:
			if err := d.ZoneMgmt(backend.ZoneOpReset, zoff); err != nil {
				t.Fatalf("op %d: reset zone %d: %v", k, z, err)
			}
			if s.fill > 0 || s.full {
				*s = zsnap{inc: s.inc + 1}
				m.incs[z] = append(m.incs[z], nil)
				saved = true
			}
		case r < 15:
			err := d.ZoneMgmt(backend.ZoneOpFinish, zoff)
			if errors.Is(err, backend.ErrTooManyActive) {
				break
			}
			if err != nil {
				t.Fatalf("op %d: finish zone %d: %v", k, z, err)
			}
			if !s.full {
				s.full = true
				saved = true
			}
		case r < 16:
			err := d.ZoneMgmt(backend.ZoneOpClose, zoff)
			if err != nil && !errors.Is(err, backend.ErrZoneState) {
				t.Fatalf("op %d: close zone %d: %v", k, z, err)
			}
		default:
			if err := d.Flush(); err != nil {
				t.Fatal(err)
			}
			saved = true
		}
		m.snaps = append(m.snaps, next)
		m.saved = append(m.saved, saved)
		rec.Mark(k)
	}
	rec.Stop()
	ops := rec.Ops()
	states := faulty.CrashStates(ops, faulty.EnumOptions{TearUnit: 512, MaxTears: 3, AllSubsets: 4, Subsets: 6, Seed: 3})
	rp := faulty.NewReplayer(base, ops, 512)
	seen := map[uint64]int{}
	checked := 0
	for _, cs := range states {
		img, err := rp.Image(cs)
		if err != nil {
			t.Fatal(err)
		}
		done := 0 // operations whose mark precedes the cut
		for i := 0; i < cs.At; i++ {
			if ops[i].Kind == faulty.RecMark {
				done = ops[i].Mark
			}
		}
		key := img.Digest()
		if prev, ok := seen[key]; ok && prev == done {
			continue
		}
		seen[key] = done
		checked++
		if err := m.check(img, done, min(done+1, nops)); err != nil {
			t.Fatalf("%v (operations done %d): %v", cs, done, err)
		}
	}
	if checked < 50 {
		t.Fatalf("only %d distinct crash states checked", checked)
	}
	t.Logf("%d operations, %d logged, %d crash states, %d distinct checked", nops, len(ops), len(states), checked)
}

// check verifies a crash image cut after operation done completed, with
// operation inflight possibly begun.
func (m *crashModel) check(img *faulty.Mem, done, inflight int) error {
	d, ok, err := Load(img, false)
	if err != nil || !ok {
		return fmt.Errorf("load: ok %v, %w", ok, err)
	}
	last := 0 // the last completed save
	for k := done; k >= 0; k-- {
		if m.saved[k] {
			last = k
			break
		}
	}
	zs, err := d.ReportZones(0, 0)
	if err != nil {
		return err
	}
	var mismatch []string
	match := -1
	for k := last; k <= inflight && match < 0; k++ {
		if !m.saved[k] {
			continue
		}
		if why := m.matches(d, zs, k); why != "" {
			mismatch = append(mismatch, fmt.Sprintf("save after op %d: %s", k, why))
			continue
		}
		match = k
	}
	if match < 0 {
		return fmt.Errorf("zones match no save in [%d, %d]: %v", last, inflight, mismatch)
	}
	buf := make([]byte, 512)
	for i, cw := range m.conv {
		if cw.op > last {
			break
		}
		if err := d.ReadAt(buf, int64(i)*512); err != nil {
			return err
		}
		if !bytes.Equal(buf, pattern(512, cw.seed)) {
			return fmt.Errorf("conventional block %d (written by op %d, saved by op %d) lost", i, cw.op, last)
		}
	}
	// The device goes on: write at every writable zone's pointer, flush,
	// load again and read it back.
	var wrote []int64
	for _, z := range zs {
		if z.Type == backend.ZoneSeqWriteRequired && z.Cond != backend.ZoneFull {
			if err := d.WriteAt(pattern(512, 0xee), z.WP, 0); err != nil {
				if errors.Is(err, backend.ErrTooManyActive) {
					continue
				}
				return fmt.Errorf("write after the crash at %d: %w", z.WP, err)
			}
			wrote = append(wrote, z.WP)
		}
	}
	if err := d.Close(); err != nil {
		return err
	}
	d2, _, err := Load(img.Clone(), true)
	if err != nil {
		return fmt.Errorf("load after writing past the crash: %w", err)
	}
	for _, at := range wrote {
		if err := d2.ReadAt(buf, at); err != nil {
			return err
		}
		if !bytes.Equal(buf, pattern(512, 0xee)) {
			return fmt.Errorf("write after the crash at %d did not survive", at)
		}
	}
	return nil
}

// matches says why the loaded zones differ from the model after op k
// ("" when they do not).
func (m *crashModel) matches(d *Device, zs []backend.Zone, k int) string {
	capacity := m.g.Cap()
	for zi := m.g.Conv; zi < m.zones; zi++ {
		want := m.snaps[k][zi]
		z := zs[zi]
		wp := want.fill
		cond := backend.ZoneClosed
		switch {
		case want.full:
			wp, cond = capacity, backend.ZoneFull
		case want.fill == 0:
			cond = backend.ZoneEmpty
		}
		if z.WP-z.Start != wp || z.Cond != cond {
			return fmt.Sprintf("zone %d: %v at +%d, want %v at +%d", zi, z.Cond, z.WP-z.Start, cond, wp)
		}
		got := make([]byte, m.g.ZoneSize)
		if err := d.ReadAt(got, z.Start); err != nil {
			return err.Error()
		}
		data := m.incs[zi][want.inc][:want.fill]
		if !bytes.Equal(got[:want.fill], data) {
			return fmt.Sprintf("zone %d: data below the write pointer differs", zi)
		}
		if !bytes.Equal(got[want.fill:], make([]byte, m.g.ZoneSize-want.fill)) {
			return fmt.Sprintf("zone %d: bytes past the written part are not zeroes", zi)
		}
	}
	return ""
}
