package meta

import (
	"math/rand/v2"
	"testing"
)

// model is a block-by-block reference for extentMap.
type model map[uint64]Extent // lblk → one-block extent

func (m model) set(e Extent) {
	for i := uint64(0); i < e.Len; i++ {
		m[e.LBlk+i] = Extent{LBlk: e.LBlk + i, Len: 1, PBlk: e.PBlk + i, Flags: e.Flags, Stream: e.Stream}
	}
}

func (m model) punch(lblk, n uint64) {
	for i := lblk; i < lblk+n; i++ {
		delete(m, i)
	}
}

func checkMap(t *testing.T, em *extentMap, m model) {
	t.Helper()
	var n uint64
	for i, e := range em.ext {
		if e.Len == 0 {
			t.Fatalf("empty extent %d: %+v", i, e)
		}
		if i > 0 {
			p := em.ext[i-1]
			if p.End() > e.LBlk {
				t.Fatalf("overlap %+v %+v", p, e)
			}
			if mergeable(p, e) {
				t.Fatalf("unmerged neighbours %+v %+v", p, e)
			}
		}
		for b := uint64(0); b < e.Len; b++ {
			want, ok := m[e.LBlk+b]
			if !ok || want.PBlk != e.PBlk+b || want.Flags != e.Flags || want.Stream != e.Stream {
				t.Fatalf("block %d maps to %d, model %+v (ok=%v)", e.LBlk+b, e.PBlk+b, want, ok)
			}
		}
		n += e.Len
	}
	if n != uint64(len(m)) {
		t.Fatalf("map has %d blocks, model %d", n, len(m))
	}
}

func TestExtentMapAgainstModel(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 1))
	var em extentMap
	m := model{}
	nextP := uint64(1000)
	for i := 0; i < 5000; i++ {
		lblk := r.Uint64N(200)
		n := 1 + r.Uint64N(20)
		switch r.IntN(3) {
		case 0, 1:
			e := Extent{LBlk: lblk, Len: n, PBlk: nextP, Stream: uint32(r.IntN(2))}
			if r.IntN(4) == 0 {
				e.Flags = 1
			}
			nextP += n + uint64(r.IntN(2)) // sometimes contiguous with the previous
			em.set(e)
			m.set(e)
		case 2:
			em.punch(lblk, n)
			m.punch(lblk, n)
		}
		checkMap(t, &em, m)
	}
}

func TestExtentMapSequentialMerges(t *testing.T) {
	var em extentMap
	for i := uint64(0); i < 1000; i++ {
		em.insert(Extent{LBlk: i, Len: 1, PBlk: 500 + i})
	}
	if len(em.ext) != 1 || em.ext[0].Len != 1000 {
		t.Fatalf("sequential inserts gave %d extents", len(em.ext))
	}
	// Converting the middle of an unwritten extent keeps its blocks.
	em = extentMap{}
	em.insert(Extent{LBlk: 0, Len: 10, PBlk: 100, Flags: 1})
	freed := em.set(Extent{LBlk: 3, Len: 2, PBlk: 103})
	if len(freed) != 0 || len(em.ext) != 3 {
		t.Fatalf("conversion freed %v, map %v", freed, em.ext)
	}
	// Remapping to other blocks frees the old ones.
	freed = em.set(Extent{LBlk: 0, Len: 10, PBlk: 900})
	var n uint64
	for _, f := range freed {
		n += f.Len
	}
	if n != 10 {
		t.Fatalf("remap freed %d blocks, want 10", n)
	}
}

func TestSegments(t *testing.T) {
	var em extentMap
	em.insert(Extent{LBlk: 2, Len: 2, PBlk: 10})
	em.insert(Extent{LBlk: 6, Len: 1, PBlk: 20})
	segs := em.segments(0, 8)
	want := []struct {
		lblk, n uint64
		mapped  bool
	}{{0, 2, false}, {2, 2, true}, {4, 2, false}, {6, 1, true}, {7, 1, false}}
	if len(segs) != len(want) {
		t.Fatalf("segments %+v", segs)
	}
	for i, w := range want {
		if segs[i].lblk != w.lblk || segs[i].n != w.n || segs[i].mapped != w.mapped {
			t.Fatalf("segment %d = %+v, want %+v", i, segs[i], w)
		}
	}
}
