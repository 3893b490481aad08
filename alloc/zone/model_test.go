package zone

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/streamfs/streamfs/alloc/victim"
)

// model is what the filesystem would know: the extents it maps and the
// writes in flight, each owned by a stream.
type model struct {
	t        *testing.T
	a        *Allocator
	rng      *rand.Rand
	live     []owned // written and mapped
	inflight []owned
	handed   map[uint64]bool // blocks handed out since their zone's reset
	resets   int
}

type owned struct {
	Extent
	stream uint32
}

func (m *model) take(e Extent, stream uint32) {
	for b := e.Start; b < e.End(); b++ {
		if m.handed[b] {
			m.t.Fatalf("block %d handed out twice before its zone's reset (extent %+v)", b, e)
		}
		m.handed[b] = true
	}
	m.inflight = append(m.inflight, owned{e, stream})
}

func pop(s []owned, i int) (owned, []owned) {
	o := s[i]
	s[i] = s[len(s)-1]
	return o, s[:len(s)-1]
}

// complete finishes one write in flight, failing it with probability fail.
func (m *model) complete(fail bool) {
	if len(m.inflight) == 0 {
		return
	}
	var o owned
	o, m.inflight = pop(m.inflight, m.rng.IntN(len(m.inflight)))
	var err error
	if fail {
		err = errors.New("injected write error")
	}
	if derr := m.a.Done(o.Extent, err); derr != nil {
		m.t.Fatal(derr)
	}
	if !fail {
		m.live = append(m.live, o)
	}
}

func (m *model) drain() {
	for len(m.inflight) > 0 {
		m.complete(false)
	}
}

// free frees a random piece of a random live extent, as a commit would.
func (m *model) free() {
	if len(m.live) == 0 {
		return
	}
	i := m.rng.IntN(len(m.live))
	o := m.live[i]
	off := m.rng.Uint64N(o.Len)
	n := 1 + m.rng.Uint64N(o.Len-off)
	if err := m.a.Free(o.Start+off, n); err != nil {
		m.t.Fatal(err)
	}
	_, m.live = pop(m.live, i)
	if off > 0 {
		m.live = append(m.live, owned{Extent{o.Start, off}, o.stream})
	}
	if rest := o.Len - off - n; rest > 0 {
		m.live = append(m.live, owned{Extent{o.Start + off + n, rest}, o.stream})
	}
}

// reclaim collects one victim: copy its live extents into reclaim zones,
// "commit" (remap), free the old blocks, reset.
func (m *model) reclaim() bool {
	v, ok := m.a.Victim()
	if !ok {
		return false
	}
	zs, ze := v.Start, v.Start+m.a.geo.ZoneBlocks
	in := func(o owned) bool { return o.Start >= zs && o.Start < ze }
	var moved, copies []owned
	for _, o := range m.live {
		if in(o) {
			moved = append(moved, o)
		}
	}
	for _, o := range moved {
		for left := o.Len; left > 0; {
			e, err := m.a.AllocReclaim(done, o.stream, left)
			if errors.Is(err, context.Canceled) {
				m.drain() // an active resource held by a draining zone
				continue
			}
			if err != nil {
				m.t.Fatalf("reclaim copy of %+v (victim %+v): %v", o, v, err)
			}
			m.take(e, o.stream)
			m.inflight = m.inflight[:len(m.inflight)-1]
			if err := m.a.Done(e, nil); err != nil {
				m.t.Fatal(err)
			}
			copies = append(copies, owned{e, o.stream})
			left -= e.Len
		}
		if err := m.a.Free(o.Start, o.Len); err != nil {
			m.t.Fatal(err)
		}
	}
	// drain (above) may have added writes to m.live meanwhile.
	keep := copies
	for _, o := range m.live {
		if !in(o) {
			keep = append(keep, o)
		}
	}
	m.live = keep
	if err := m.a.Reset(v.Index); err != nil {
		m.t.Fatal(err)
	}
	for b := zs; b < ze; b++ {
		delete(m.handed, b)
	}
	m.resets++
	return true
}

// verify compares the allocator's zones with the model.
func (m *model) verify() {
	want := make(map[int]uint64)
	for _, s := range [][]owned{m.live, m.inflight} {
		for _, o := range s {
			want[m.a.zoneNo(o.Start)] += o.Len
		}
	}
	for _, z := range m.a.Zones() {
		if z.Live != want[z.Index] {
			m.t.Fatalf("zone %d: %d live blocks, the extents hold %d (%+v)", z.Index, z.Live, want[z.Index], z)
		}
		if z.Alloc > m.a.geo.CapBlocks {
			m.t.Fatalf("zone %d: allocation pointer %d past capacity", z.Index, z.Alloc)
		}
	}
	mustCheck(m.t, m.a)
}

func TestModelRandom(t *testing.T) {
	steps := 20000
	if testing.Short() {
		steps = 1500
	}
	for _, pol := range []victim.Policy{victim.Greedy, victim.CostBenefit} {
		for seed := uint64(1); seed <= 3; seed++ {
			geo := Geometry{ZoneBlocks: 32, CapBlocks: 24, Zones: 40, First: 2, MaxOpen: 12, MaxActive: 12}
			a := newTest(t, geo, newFake(), Options{Streams: 4, Reserve: 2, Cache: true, CacheEntries: 16, Victim: pol})
			m := &model{t: t, a: a, rng: rand.New(rand.NewPCG(seed, 7)), handed: map[uint64]bool{}}
			var enospc, waits int
			for range steps {
				switch p := m.rng.IntN(100); {
				case p < 45:
					r := Request{Ino: uint64(m.rng.IntN(24)), Stream: uint32(m.rng.IntN(6)), Len: 1 + m.rng.Uint64N(12), Random: m.rng.IntN(2) == 0}
					e, err := a.Alloc(done, r)
					switch {
					case errors.Is(err, context.Canceled):
						waits++
						if !m.reclaim() {
							m.drain()
						}
					case errors.Is(err, ErrNoSpace):
						enospc++
						if s := a.Space(); s.FreeZones > a.opts.Reserve || s.OpenRoom != 0 || s.Reclaimable != 0 {
							t.Fatalf("ENOSPC with %+v", s)
						}
						// Let the model delete files so the run goes on.
						for range 20 {
							m.free()
						}
					case err != nil:
						t.Fatal(err)
					default:
						if e.Len == 0 || e.Len > r.Len {
							t.Fatalf("extent %+v for %+v", e, r)
						}
						m.take(e, r.Stream)
					}
				case p < 70:
					m.complete(m.rng.IntN(20) == 0)
				case p < 92:
					m.free()
				default:
					if a.NeedReclaim() {
						m.reclaim()
					}
				}
				m.verify()
			}
			m.drain()
			m.verify()
			if m.resets == 0 || waits == 0 {
				t.Errorf("%v seed %d: the run never reclaimed (%d resets, %d waits)", pol, seed, m.resets, waits)
			}
			st := a.Stats()
			t.Logf("%v seed %d: %d resets, %d waits, %d ENOSPC, stats %+v", pol, seed, m.resets, waits, enospc, st)
		}
	}
}
