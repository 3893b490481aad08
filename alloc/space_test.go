package alloc

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// spaceLayout is TestTrimHoldsExtents' layout: free 2 @10, 20 @30, 5 @60
// in AG 0; 40 @120, 1 @180 in AG 1.
func spaceLayout(t *testing.T) *Allocator {
	t.Helper()
	a := newTest(t, Geometry{AGCount: 2, AGBlocks: 100, TotalBlocks: 200}, Options{Policy: PolicyInode})
	if err := a.MarkUsed(0, 200); err != nil {
		t.Fatal(err)
	}
	for _, e := range []Extent{{10, 2}, {30, 20}, {60, 5}, {120, 40}, {180, 1}} {
		if err := a.Free(e.Start, e.Len); err != nil {
			t.Fatal(err)
		}
	}
	return a
}

func freeIn(a *Allocator, start, length, minLen uint64) []Extent {
	var l []Extent
	a.FreeExtentsIn(start, length, minLen, func(e Extent) bool {
		l = append(l, e)
		return true
	})
	return l
}

func agFree(t *testing.T, a *Allocator, ag uint32) []Extent {
	t.Helper()
	var l []Extent
	if err := a.ForEachFree(ag, func(e Extent) bool {
		l = append(l, e)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return l
}

func TestFreeExtentsIn(t *testing.T) {
	a := spaceLayout(t)
	cases := []struct {
		start, length, minLen uint64
		want                  []Extent
	}{
		{0, 200, 1, []Extent{{10, 2}, {30, 20}, {60, 5}, {120, 40}, {180, 1}}},
		{0, ^uint64(0), 5, []Extent{{30, 20}, {60, 5}, {120, 40}}},
		// Clipped to the range; minLen applies to the clipped part (XFS).
		{35, 100, 1, []Extent{{35, 15}, {60, 5}, {120, 15}}},
		{35, 100, 15, []Extent{{35, 15}, {120, 15}}},
		{35, 100, 16, nil},
		{11, 1, 1, []Extent{{11, 1}}},
		{12, 18, 1, nil},  // between extents
		{200, 10, 1, nil}, // off the device
		{10, 0, 1, nil},   // empty range
		{^uint64(0) - 1, ^uint64(0), 1, nil},
	}
	for _, c := range cases {
		if got := freeIn(a, c.start, c.length, c.minLen); !reflect.DeepEqual(got, c.want) {
			t.Errorf("FreeExtentsIn(%d, %d, %d) = %v, want %v", c.start, c.length, c.minLen, got, c.want)
		}
	}
	n := 0
	a.FreeExtentsIn(0, 200, 1, func(Extent) bool { n++; return n < 2 })
	if n != 2 {
		t.Fatalf("fn returning false: %d calls, want 2", n)
	}
}

func TestTrimRange(t *testing.T) {
	a := spaceLayout(t)
	before := freeList(a)
	var seen []Extent
	trimmed, err := a.TrimRange(35, 100, 5, func(e Extent) error {
		seen = append(seen, e)
		// Held: not free to anyone else while fn runs.
		if l := freeIn(a, e.Start, e.Len, 1); l != nil {
			t.Errorf("trimmed %v still free: %v", e, l)
		}
		if err := a.MarkUsed(e.Start, 1); !errors.Is(err, ErrBusy) {
			t.Errorf("MarkUsed of trimmed block: %v, want ErrBusy", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []Extent{{35, 15}, {60, 5}, {120, 15}}; !reflect.DeepEqual(seen, want) || trimmed != 35 {
		t.Fatalf("trimmed %d over %v, want 35 over %v", trimmed, seen, want)
	}
	if got := freeList(a); !reflect.DeepEqual(got, before) {
		t.Fatalf("after trim free space %v, want %v", got, before)
	}
	for _, r := range [][2]uint64{{200, 5}, {0, 0}, {12, 18}} {
		if n, err := a.TrimRange(r[0], r[1], 1, func(e Extent) error {
			t.Errorf("TrimRange(%d, %d) trimmed %v", r[0], r[1], e)
			return nil
		}); n != 0 || err != nil {
			t.Errorf("TrimRange(%d, %d) = %d, %v", r[0], r[1], n, err)
		}
	}
	mustCheck(t, a)

	// A long free extent goes in pieces of at most trimPiece blocks.
	geo := Geometry{AGCount: 2, AGBlocks: 4 * trimPiece, TotalBlocks: 8 * trimPiece}
	b := newTest(t, geo, Options{Policy: PolicyInode})
	var pieces []Extent
	trimmed, err = b.TrimRange(100, 2*trimPiece+5, 1, func(e Extent) error {
		pieces = append(pieces, e)
		return nil
	})
	want := []Extent{{100, trimPiece}, {100 + trimPiece, trimPiece}, {100 + 2*trimPiece, 5}}
	if err != nil || trimmed != 2*trimPiece+5 || !reflect.DeepEqual(pieces, want) {
		t.Fatalf("trimmed %d in %v (%v), want %v", trimmed, pieces, err, want)
	}
	// Across the AG boundary: one piece per AG.
	pieces = nil
	if _, err := b.TrimRange(4*trimPiece-3, 6, 1, func(e Extent) error {
		pieces = append(pieces, e)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := []Extent{{4*trimPiece - 3, 3}, {4 * trimPiece, 3}}; !reflect.DeepEqual(pieces, want) {
		t.Fatalf("pieces %v, want %v", pieces, want)
	}
	mustCheck(t, b)
}

func TestForEachFree(t *testing.T) {
	a := spaceLayout(t)
	want0 := []Extent{{10, 2}, {30, 20}, {60, 5}}
	want1 := []Extent{{120, 40}, {180, 1}}
	if got := agFree(t, a, 0); !reflect.DeepEqual(got, want0) {
		t.Fatalf("AG 0 free %v, want %v", got, want0)
	}
	// Held pieces are still free space: an on-disk tree written during a
	// trim must not lose them. A piece inside an extent merges back.
	if _, err := a.TrimRange(125, 10, 1, func(Extent) error {
		if got := agFree(t, a, 1); !reflect.DeepEqual(got, want1) {
			t.Errorf("AG 1 free during trim %v, want %v", got, want1)
		}
		if got := freeIn(a, 100, 100, 1); !reflect.DeepEqual(got, []Extent{{120, 5}, {135, 25}, {180, 1}}) {
			t.Errorf("FreeExtentsIn during trim %v", got)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	n := 0
	if err := a.ForEachFree(0, func(Extent) bool { n++; return false }); err != nil || n != 1 {
		t.Fatalf("fn returning false: %d calls, %v", n, err)
	}
	if err := a.ForEachFree(2, func(Extent) bool { return true }); !errors.Is(err, ErrInvalid) {
		t.Fatalf("ForEachFree of AG 2 of 2: %v, want ErrInvalid", err)
	}
}

// NewFromFree builds the same allocator as New plus MarkUsed of everything
// else, from a shuffled list that also has extents cut in pieces and one
// spanning two AGs.
func TestNewFromFreeModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	geo := Geometry{AGCount: 5, AGBlocks: 3000, TotalBlocks: 14000}
	opts := Options{Policy: PolicyStreams}
	ref := newTest(t, geo, opts)
	for range 400 {
		s, n := rng.Uint64N(geo.TotalBlocks), 1+rng.Uint64N(40)
		_ = ref.MarkUsed(s, min(n, geo.TotalBlocks-s)) // overlaps fail: fine
	}
	// Free the first block of AG 1 and the last of AG 0: adjacent across
	// the boundary, listed below as one extent.
	_ = ref.Free(2999, 1)
	_ = ref.Free(3000, 1)
	var list []Extent
	for _, e := range freeList(ref) {
		if e.Len > 2 && rng.IntN(2) == 0 { // cut: the loader must merge
			k := 1 + rng.Uint64N(e.Len-1)
			list = append(list, Extent{e.Start, k}, Extent{e.Start + k, e.Len - k})
			continue
		}
		list = append(list, e)
	}
	for i, e := range list {
		if e.end() == 3000 {
			if i+1 < len(list) && list[i+1].Start == 3000 {
				list[i].Len += list[i+1].Len
				list = slices.Delete(list, i+1, i+2)
			}
			break
		}
	}
	rng.Shuffle(len(list), func(i, j int) { list[i], list[j] = list[j], list[i] })

	a, err := NewFromFree(geo, opts, list)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	mustCheck(t, a)
	if a.FreeBlocks() != ref.FreeBlocks() {
		t.Fatalf("free blocks %d, want %d", a.FreeBlocks(), ref.FreeBlocks())
	}
	for ag := range geo.AGCount {
		if got, want := agFree(t, a, ag), agFree(t, ref, ag); !reflect.DeepEqual(got, want) {
			t.Fatalf("AG %d: free %v, want %v", ag, got, want)
		}
	}
	// Same state, same decisions; and the bulk-built indexes take changes.
	for i := range 3000 {
		r := Request{Ino: MakeIno(uint32(i%5), uint32(i)), Stream: uint32(i % 3), Len: 1 + uint64(i%17)}
		e1, err1 := ref.Alloc(r)
		e2, err2 := a.Alloc(r)
		if e1 != e2 || !errors.Is(err2, err1) {
			t.Fatalf("alloc %d: %v, %v; reference %v, %v", i, e2, err2, e1, err1)
		}
		if err1 == nil && i%3 == 0 {
			if err := a.Free(e2.Start, e2.Len); err != nil {
				t.Fatal(err)
			}
			if err := ref.Free(e1.Start, e1.Len); err != nil {
				t.Fatal(err)
			}
		}
	}
	mustCheck(t, a)
	if got, want := freeList(a), freeList(ref); !reflect.DeepEqual(got, want) {
		t.Fatal("free space diverged from the reference")
	}

	for _, bad := range [][]Extent{
		{{10, 5}, {12, 5}}, // overlap
		{{10, 0}},          // empty
		{{13999, 2}},       // off the end
	} {
		if _, err := NewFromFree(geo, opts, bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("NewFromFree(%v): %v, want ErrCorrupt", bad, err)
		}
	}
	if _, err := NewFromFree(Geometry{}, opts, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("NewFromFree with no geometry: %v, want ErrInvalid", err)
	}
	empty, err := NewFromFree(geo, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer empty.Close()
	if _, err := empty.Alloc(Request{Ino: 1, Len: 1}); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("alloc on a full device: %v", err)
	}
}

func TestSetFree(t *testing.T) {
	a := spaceLayout(t)
	if err := a.SetFree(1, []Extent{{150, 10}, {100, 3}, {103, 2}}); err != nil {
		t.Fatal(err)
	}
	if got, want := agFree(t, a, 1), []Extent{{100, 5}, {150, 10}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("AG 1 free %v, want %v", got, want)
	}
	if a.FreeBlocks() != 27+15 {
		t.Fatalf("free blocks %d, want 42", a.FreeBlocks())
	}
	mustCheck(t, a)
	before := agFree(t, a, 0)
	for _, bad := range [][]Extent{
		{{95, 10}},         // crosses into AG 1
		{{5, 5}, {200, 1}}, // off the device
		{{5, 5}, {8, 1}},   // overlap
		{{0, 1}, {50, 0}},  // empty
		{{0, 1}, {^uint64(0), 2}},
	} {
		if err := a.SetFree(0, bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("SetFree(0, %v): %v, want ErrCorrupt", bad, err)
		}
	}
	if got := agFree(t, a, 0); !reflect.DeepEqual(got, before) {
		t.Fatalf("failed SetFree changed AG 0: %v, want %v", got, before)
	}
	if err := a.SetFree(9, nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("SetFree(9): %v, want ErrInvalid", err)
	}
	if _, err := a.TrimRange(0, 100, 1, func(Extent) error {
		if err := a.SetFree(0, nil); !errors.Is(err, ErrBusy) {
			t.Errorf("SetFree during trim: %v, want ErrBusy", err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, a)
}
