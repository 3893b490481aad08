package alloc

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"syscall"
	"testing"
)

func freeList(a *Allocator) []Extent {
	var l []Extent
	a.FreeExtentsIn(0, ^uint64(0), 1, func(e Extent) bool {
		l = append(l, e)
		return true
	})
	return l
}

func mustCheck(t testing.TB, a *Allocator) {
	t.Helper()
	if err := a.Check(); err != nil {
		t.Fatal(err)
	}
}

func TestNewGeometry(t *testing.T) {
	bad := []Geometry{
		{},
		{AGCount: 4, AGBlocks: 10, TotalBlocks: 41},                 // not covered
		{AGCount: 4, AGBlocks: 10, TotalBlocks: 30},                 // last AG empty
		{AGCount: 1 << 31, AGBlocks: 1 << 40, TotalBlocks: 1 << 40}, // AGs empty, product overflows
	}
	for _, g := range bad {
		if _, err := New(g, Options{}); !errors.Is(err, ErrInvalid) {
			t.Errorf("New(%+v) err = %v, want ErrInvalid", g, err)
		}
	}
	if _, err := New(Geometry{AGCount: 1, AGBlocks: 1, TotalBlocks: 1}, Options{Policy: 7}); !errors.Is(err, ErrInvalid) {
		t.Errorf("New with policy 7: err = %v, want ErrInvalid", err)
	}
	a := newTest(t, Geometry{AGCount: 4, AGBlocks: 10, TotalBlocks: 35}, Options{})
	want := []Extent{{0, 10}, {10, 10}, {20, 10}, {30, 5}}
	if got := freeList(a); !reflect.DeepEqual(got, want) {
		t.Fatalf("free list %v, want %v", got, want)
	}
	if a.FreeBlocks() != 35 {
		t.Fatalf("FreeBlocks %d, want 35", a.FreeBlocks())
	}
	if _, err := a.Alloc(Request{Len: 0}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Alloc Len 0: %v", err)
	}
}

func TestMarkUsedFreeErrors(t *testing.T) {
	a := newTest(t, Geometry{AGCount: 4, AGBlocks: 100, TotalBlocks: 400}, Options{})
	if err := a.MarkUsed(90, 20); err != nil { // spans AG 0 and 1
		t.Fatal(err)
	}
	want := []Extent{{0, 90}, {110, 90}, {200, 100}, {300, 100}}
	if got := freeList(a); !reflect.DeepEqual(got, want) {
		t.Fatalf("after MarkUsed(90,20): %v, want %v", got, want)
	}
	before := freeList(a)
	// Exactly used, partly used, inside used, and an AG where one block is used.
	bad := [][2]uint64{{90, 20}, {80, 20}, {105, 1}, {0, 100}}
	for _, r := range bad {
		if err := a.MarkUsed(r[0], r[1]); !errors.Is(err, ErrCorrupt) {
			t.Errorf("MarkUsed(%d, %d) err = %v, want ErrCorrupt", r[0], r[1], err)
		}
	}
	// Spanning AGs where only the second AG's part conflicts: nothing
	// may change in the first.
	if err := a.MarkUsed(50, 45); !errors.Is(err, ErrCorrupt) {
		t.Errorf("MarkUsed(50, 45) err = %v, want ErrCorrupt", err)
	}
	for _, r := range [][2]uint64{{0, 1}, {85, 10}, {109, 2}, {50, 100}, {95, 20}} {
		if err := a.Free(r[0], r[1]); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Free(%d, %d) err = %v, want ErrCorrupt", r[0], r[1], err)
		}
	}
	for _, r := range [][2]uint64{{400, 1}, {399, 2}, {0, 0}, {1 << 63, 1 << 63}, {5, ^uint64(0)}} {
		if err := a.MarkUsed(r[0], r[1]); !errors.Is(err, ErrCorrupt) {
			t.Errorf("MarkUsed(%d, %d) err = %v, want ErrCorrupt", r[0], r[1], err)
		}
		if err := a.Free(r[0], r[1]); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Free(%d, %d) err = %v, want ErrCorrupt", r[0], r[1], err)
		}
	}
	if got := freeList(a); !reflect.DeepEqual(got, before) {
		t.Fatalf("failed calls changed free space: %v, want %v", got, before)
	}
	if a.FreeBlocks() != 380 {
		t.Fatalf("FreeBlocks %d, want 380", a.FreeBlocks())
	}
	if err := a.MarkUsed(195, 20); err != nil {
		t.Fatal(err)
	}
	if err := a.Free(90, 20); err != nil {
		t.Fatal(err)
	}
	if err := a.Free(195, 20); err != nil {
		t.Fatal(err)
	}
	want = []Extent{{0, 100}, {100, 100}, {200, 100}, {300, 100}}
	if got := freeList(a); !reflect.DeepEqual(got, want) {
		t.Fatalf("after frees: %v, want %v", got, want)
	}
	mustCheck(t, a)
}

func TestFreeMerging(t *testing.T) {
	a := newTest(t, Geometry{AGCount: 3, AGBlocks: 1000, TotalBlocks: 2500}, Options{})
	if err := a.MarkUsed(0, 2500); err != nil {
		t.Fatal(err)
	}
	if a.FreeBlocks() != 0 || len(freeList(a)) != 0 {
		t.Fatal("device should be full")
	}
	// Free in 1..7 block pieces, in random order.
	var pieces []Extent
	for b := uint64(0); b < 2500; {
		n := min(uint64(1+b%7), 2500-b)
		pieces = append(pieces, Extent{b, n})
		b += n
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(pieces), func(i, j int) { pieces[i], pieces[j] = pieces[j], pieces[i] })
	for i, p := range pieces {
		if err := a.Free(p.Start, p.Len); err != nil {
			t.Fatal(err)
		}
		if i%97 == 0 {
			mustCheck(t, a)
		}
	}
	mustCheck(t, a)
	// Merged down to one extent per AG (AGs never merge with each other).
	want := []Extent{{0, 1000}, {1000, 1000}, {2000, 500}}
	if got := freeList(a); !reflect.DeepEqual(got, want) {
		t.Fatalf("free list %v, want %v", got, want)
	}
}

func TestBestFit(t *testing.T) {
	a := newTest(t, Geometry{AGCount: 1, AGBlocks: 1000, TotalBlocks: 1000}, Options{Policy: PolicyInode})
	// Leave free extents of 10 @100, 3 @200, 7 @300, 50 @400.
	if err := a.MarkUsed(0, 1000); err != nil {
		t.Fatal(err)
	}
	for _, e := range []Extent{{100, 10}, {200, 3}, {300, 7}, {400, 50}} {
		if err := a.Free(e.Start, e.Len); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		n    uint64
		want Extent
	}{
		{5, Extent{300, 5}},    // smallest >= 5 is the 7
		{8, Extent{100, 8}},    // smallest >= 8 is the 10
		{3, Extent{200, 3}},    // exact fit
		{100, Extent{400, 50}}, // none long enough: the largest, short
		{2, Extent{108, 2}},    // remainders 2 @108 and 2 @305: lower block wins the tie
	}
	for _, c := range cases {
		e, err := a.Alloc(Request{Ino: MakeIno(0, 1), Len: c.n})
		if err != nil {
			t.Fatal(err)
		}
		if e != c.want {
			t.Errorf("Alloc(%d) = %v, want %v", c.n, e, c.want)
		}
	}
	mustCheck(t, a)
}

func TestGoalExtension(t *testing.T) {
	a := newTest(t, Geometry{AGCount: 4, AGBlocks: 100, TotalBlocks: 400}, Options{Policy: PolicyInode})
	ino := MakeIno(1, 9)
	e1, err := a.Alloc(Request{Ino: ino, Len: 10})
	if err != nil {
		t.Fatal(err)
	}
	if e1.Start/100 != 1 {
		t.Fatalf("first extent %v not in the inode's AG 1", e1)
	}
	e2, err := a.Alloc(Request{Ino: ino, Goal: e1.Start + e1.Len, Len: 10})
	if err != nil {
		t.Fatal(err)
	}
	if e2 != (Extent{e1.Start + e1.Len, 10}) {
		t.Fatalf("goal %d: got %v", e1.Start+e1.Len, e2)
	}
	// Goal inside a free extent of another AG: taken exactly there.
	e3, err := a.Alloc(Request{Ino: ino, Goal: 250, Len: 10})
	if err != nil || e3 != (Extent{250, 10}) {
		t.Fatalf("goal 250: got %v, %v", e3, err)
	}
	// Goal extension stops at the end of the free extent (and of the AG).
	e4, err := a.Alloc(Request{Ino: ino, Goal: 395, Len: 10})
	if err != nil || e4 != (Extent{395, 5}) {
		t.Fatalf("goal 395: got %v, %v", e4, err)
	}
	e5, err := a.Alloc(Request{Ino: ino, Goal: 245, Len: 10})
	if err != nil || e5 != (Extent{245, 5}) {
		t.Fatalf("goal 245: got %v, %v", e5, err)
	}
	// Goal on a used block or past the device: falls back to the policy.
	for _, g := range []uint64{252, 400, ^uint64(0)} {
		e, err := a.Alloc(Request{Ino: ino, Goal: g, Len: 4})
		if err != nil {
			t.Fatal(err)
		}
		if e.Start/100 != 1 {
			t.Errorf("goal %d unusable: got %v, want the policy's AG 1", g, e)
		}
	}
	mustCheck(t, a)
}

func TestSpillToOtherAGs(t *testing.T) {
	geo := Geometry{AGCount: 4, AGBlocks: 16, TotalBlocks: 64}
	a := newTest(t, geo, Options{Policy: PolicyStreams, HWStreams: 2})
	ino := MakeIno(3, 0)
	// Stream 1 owns AGs 0 and 1; fill them.
	for range 4 {
		e, err := a.Alloc(Request{Ino: ino, Stream: 1, Len: 8})
		if err != nil {
			t.Fatal(err)
		}
		if e.Start/16 > 1 {
			t.Fatalf("extent %v left the set while it had space", e)
		}
	}
	// Next goes round robin from the AG after the set: AG 2, then 3.
	for _, wantAG := range []uint64{2, 2, 3, 3} {
		e, err := a.Alloc(Request{Ino: ino, Stream: 1, Len: 8})
		if err != nil {
			t.Fatal(err)
		}
		if e.Start/16 != wantAG || e.Len != 8 {
			t.Fatalf("spill: got %v, want 8 blocks in AG %d", e, wantAG)
		}
	}
	if _, err := a.Alloc(Request{Ino: ino, Stream: 1, Len: 1}); !errors.Is(err, ErrNoSpace) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("full device: err = %v, want ErrNoSpace/ENOSPC", err)
	}
	if s := a.Stats(); s.StreamBlocks[1] != 64 {
		t.Fatalf("stream 1 blocks %d, want 64", s.StreamBlocks[1])
	}
}

// One stream fills the whole device: every block handed out exactly once.
func TestFillDevice(t *testing.T) {
	for _, cache := range []bool{false, true} {
		for _, pol := range []Policy{PolicyInode, PolicyAGSet, PolicyStreams} {
			geo := Geometry{AGCount: 5, AGBlocks: 200, TotalBlocks: 957}
			a := newTest(t, geo, Options{Policy: pol, PlacementCache: cache})
			owner := make([]int, geo.TotalBlocks)
			rng := rand.New(rand.NewPCG(3, uint64(pol)))
			var last Extent
			var total uint64
			for i := 0; ; i++ {
				r := Request{Ino: MakeIno(2, uint32(rng.IntN(6))), Stream: 1, Len: 1 + uint64(rng.IntN(37))}
				if i%3 == 0 {
					r.Goal = last.Start + last.Len
				}
				e, err := a.Alloc(r)
				if errors.Is(err, ErrNoSpace) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if e.Len == 0 || e.Len > r.Len || e.Start+e.Len > geo.TotalBlocks {
					t.Fatalf("Alloc(%+v) = %v", r, e)
				}
				if e.Start/geo.AGBlocks != (e.Start+e.Len-1)/geo.AGBlocks {
					t.Fatalf("extent %v crosses an AG boundary", e)
				}
				for b := e.Start; b < e.Start+e.Len; b++ {
					if owner[b] != 0 {
						t.Fatalf("block %d allocated twice (alloc %d and %d)", b, owner[b], i+1)
					}
					owner[b] = i + 1
				}
				total += e.Len
				last = e
			}
			if total != geo.TotalBlocks || a.FreeBlocks() != 0 {
				t.Fatalf("policy %v cache %v: allocated %d of %d, %d left free", pol, cache, total, geo.TotalBlocks, a.FreeBlocks())
			}
			mustCheck(t, a)
			s := a.Stats()
			var allocs uint64
			for _, g := range s.AGs {
				allocs += g.Allocs
				if g.Free != 0 {
					t.Errorf("AG %d still has %d free", g.Index, g.Free)
				}
			}
			if allocs == 0 || s.StreamBlocks[1] != geo.TotalBlocks {
				t.Errorf("stats: allocs %d, stream blocks %v", allocs, s.StreamBlocks)
			}
		}
	}
}

func TestTrimHoldsExtents(t *testing.T) {
	a := newTest(t, Geometry{AGCount: 2, AGBlocks: 100, TotalBlocks: 200}, Options{Policy: PolicyInode})
	if err := a.MarkUsed(0, 200); err != nil {
		t.Fatal(err)
	}
	// Free: 2 @10, 20 @30, 5 @60 in AG 0; 40 @120, 1 @180 in AG 1.
	for _, e := range []Extent{{10, 2}, {30, 20}, {60, 5}, {120, 40}, {180, 1}} {
		if err := a.Free(e.Start, e.Len); err != nil {
			t.Fatal(err)
		}
	}
	before := freeList(a)
	var seen []Extent
	trimmed, err := a.Trim(5, func(e Extent) error {
		seen = append(seen, e)
		if overlapsFreeSpace(a, e) {
			t.Errorf("extent %v still in free space while trimmed", e)
		}
		// Nothing can allocate it meanwhile.
		for {
			got, err := a.Alloc(Request{Ino: MakeIno(uint32(e.Start/100), 0), Goal: e.Start, Len: 100})
			if errors.Is(err, ErrNoSpace) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Start < e.Start+e.Len && e.Start < got.Start+got.Len {
				t.Errorf("allocated %v overlapping trimmed %v", got, e)
			}
			defer a.Free(got.Start, got.Len)
		}
		if err := a.Free(e.Start, 1); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Free of trimmed block: %v, want ErrCorrupt", err)
		}
		if err := a.MarkUsed(e.Start, 1); !errors.Is(err, ErrBusy) {
			t.Errorf("MarkUsed of trimmed block: %v, want ErrBusy", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	wantSeen := []Extent{{60, 5}, {30, 20}, {120, 40}}
	slices.SortFunc(seen, func(x, y Extent) int { return int(x.Start) - int(y.Start) })
	slices.SortFunc(wantSeen, func(x, y Extent) int { return int(x.Start) - int(y.Start) })
	if !reflect.DeepEqual(seen, wantSeen) || trimmed != 65 {
		t.Fatalf("trimmed %d over %v, want 65 over %v", trimmed, seen, wantSeen)
	}
	if got := freeList(a); !reflect.DeepEqual(got, before) {
		t.Fatalf("after trim free space %v, want %v", got, before)
	}
	mustCheck(t, a)

	// An error from fn stops the walk and still returns everything.
	boom := errors.New("discard failed")
	calls := 0
	trimmed, err = a.Trim(1, func(Extent) error {
		calls++
		if calls == 2 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || calls != 2 || trimmed == 0 {
		t.Fatalf("Trim with failing fn: trimmed %d, calls %d, err %v", trimmed, calls, err)
	}
	if got := freeList(a); !reflect.DeepEqual(got, before) {
		t.Fatalf("after failed trim free space %v, want %v", got, before)
	}
	mustCheck(t, a)
}

// overlapsFreeSpace reports whether any free extent overlaps e.
func overlapsFreeSpace(a *Allocator, e Extent) bool {
	found := false
	a.FreeExtentsIn(e.Start, e.Len, 1, func(Extent) bool {
		found = true
		return false
	})
	return found
}

func TestPlacementCache(t *testing.T) {
	geo := Geometry{AGCount: 4, AGBlocks: 1000, TotalBlocks: 4000}
	off := newTest(t, geo, Options{Policy: PolicyStreams})
	if off.cache != nil {
		t.Fatal("cache built with PlacementCache off")
	}
	a := newTest(t, geo, Options{Policy: PolicyStreams, PlacementCache: true})
	ino := MakeIno(0, 7)
	e1, err := a.Alloc(Request{Ino: ino, Len: 10})
	if err != nil {
		t.Fatal(err)
	}
	a.cache.Wait() // make the Set visible (ristretto admits asynchronously)
	e2, err := a.Alloc(Request{Ino: ino, Len: 10})
	if err != nil {
		t.Fatal(err)
	}
	s := a.Stats()
	if s.CacheHits+s.CacheMisses != 2 || s.CacheMisses < 1 {
		t.Fatalf("hits %d misses %d, want 2 lookups with the first a miss", s.CacheHits, s.CacheMisses)
	}
	if s.CacheHits == 1 && e2.Start != e1.Start+e1.Len {
		t.Fatalf("cache hit but e2 %v does not follow e1 %v", e2, e1)
	}
	// A goal that works skips the cache entirely.
	if _, err := a.Alloc(Request{Ino: ino, Goal: 3001, Len: 5}); err != nil {
		t.Fatal(err)
	}
	if s2 := a.Stats(); s2.CacheHits+s2.CacheMisses != 2 {
		t.Fatalf("goal alloc consulted the cache: %+v", s2)
	}
	// A stale hint (block now used) falls through to the policy.
	a.setHint(ino, nil, 3001)
	a.cache.Wait()
	e3, err := a.Alloc(Request{Ino: ino, Len: 5})
	if err != nil || e3.Start == 3001 {
		t.Fatalf("stale hint: %v, %v", e3, err)
	}
	mustCheck(t, a)
	if s := off.Stats(); s.CacheHits != 0 || s.CacheMisses != 0 {
		t.Fatalf("cache off counted lookups: %+v", s)
	}
}

// Once an inode has a cache entry, its hint moves by an atomic store in
// the entry: the next Alloc sees it at once, with no ristretto Set (whose
// admission is asynchronous) in between.
func TestPlacementCacheInPlace(t *testing.T) {
	geo := Geometry{AGCount: 4, AGBlocks: 1000, TotalBlocks: 4000}
	a := newTest(t, geo, Options{Policy: PolicyStreams, PlacementCache: true})
	ino := MakeIno(0, 7) // generic AG set: AG 0 + 7%2 = AG 1
	e, err := a.Alloc(Request{Ino: ino, Len: 10})
	if err != nil || e.Start != 1000 {
		t.Fatalf("first alloc %v, %v; want 1000+10", e, err)
	}
	a.cache.Wait()
	// Leave a 10-block hole far away: best fit would pick it, the hint not.
	if err := a.MarkUsed(1500, 500); err != nil {
		t.Fatal(err)
	}
	if err := a.Free(1600, 10); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		next, err := a.Alloc(Request{Ino: ino, Len: 10})
		if err != nil {
			t.Fatal(err)
		}
		if next.Start != e.end() {
			t.Fatalf("alloc %d: %v does not follow %v: hint not updated in place", i, next, e)
		}
		e = next
	}
	if s := a.Stats(); s.CacheHits != 5 || s.CacheMisses != 1 {
		t.Fatalf("hits %d misses %d, want 5 and 1", s.CacheHits, s.CacheMisses)
	}
	// An append at its goal leaves the hint alone (it would repeat the goal).
	g, err := a.Alloc(Request{Ino: ino, Goal: e.end(), Len: 10})
	if err != nil || g.Start != e.end() {
		t.Fatalf("goal alloc %v, %v", g, err)
	}
	if entry, ok := a.cache.Get(ino); !ok || entry.Load() != e.end() {
		t.Fatalf("goal extension moved the hint")
	}
	mustCheck(t, a)
}

func TestStatsJSON(t *testing.T) {
	a := newTest(t, Geometry{AGCount: 2, AGBlocks: 10, TotalBlocks: 20}, Options{Policy: PolicyStreams, HWStreams: 3})
	if _, err := a.Alloc(Request{Ino: 1, Stream: 2, Len: 3}); err != nil {
		t.Fatal(err)
	}
	s := a.Stats()
	if s.Policy != "streams" || s.MaxStreams != 3 || len(s.AGs) != 2 || s.StreamBlocks[2] != 3 {
		t.Fatalf("stats %+v", s)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"ags", "cache_hits", "cache_misses", "stream_blocks", "policy", "max_streams"} {
		if _, ok := m[k]; !ok {
			t.Errorf("stats JSON lacks %q: %s", k, b)
		}
	}
	ag0 := m["ags"].([]any)[0].(map[string]any)
	for _, k := range []string{"index", "start", "size", "free", "allocs", "lock_waits"} {
		if _, ok := ag0[k]; !ok {
			t.Errorf("AG stats JSON lacks %q: %s", k, b)
		}
	}
}

func TestConcurrentAllocFree(t *testing.T) {
	for _, cache := range []bool{false, true} {
		geo := Geometry{AGCount: 8, AGBlocks: 512, TotalBlocks: 4000}
		a := newTest(t, geo, Options{Policy: PolicyStreams, PlacementCache: cache})
		var mu sync.Mutex
		owner := make(map[uint64]int) // block -> worker, checks exclusivity
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(w), 9))
				var mine []Extent
				var goal uint64
				for i := range 2000 {
					if len(mine) > 0 && (rng.IntN(3) == 0 || i%500 == 499) {
						k := rng.IntN(len(mine))
						e := mine[k]
						mine[k] = mine[len(mine)-1]
						mine = mine[:len(mine)-1]
						mu.Lock()
						for b := e.Start; b < e.Start+e.Len; b++ {
							delete(owner, b)
						}
						mu.Unlock()
						if err := a.Free(e.Start, e.Len); err != nil {
							t.Error(err)
							return
						}
						continue
					}
					e, err := a.Alloc(Request{
						Ino:    MakeIno(uint32(w), uint32(rng.IntN(4))),
						Stream: uint32(w % 5),
						Goal:   goal,
						Len:    1 + uint64(rng.IntN(64)),
					})
					if errors.Is(err, ErrNoSpace) {
						continue
					}
					if err != nil {
						t.Error(err)
						return
					}
					goal = e.Start + e.Len
					mu.Lock()
					for b := e.Start; b < e.Start+e.Len; b++ {
						if o, ok := owner[b]; ok {
							mu.Unlock()
							t.Errorf("block %d given to worker %d and %d", b, o, w)
							return
						}
						owner[b] = w
					}
					mu.Unlock()
					mine = append(mine, e)
				}
				for _, e := range mine {
					mu.Lock()
					for b := e.Start; b < e.Start+e.Len; b++ {
						delete(owner, b)
					}
					mu.Unlock()
					if err := a.Free(e.Start, e.Len); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		// Trim and stats run alongside.
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				if _, err := a.Trim(16, func(Extent) error { return nil }); err != nil {
					t.Error(err)
				}
				_ = a.Stats()
				_ = a.FreeBlocks()
			}
		}()
		wg.Wait()
		mustCheck(t, a)
		if a.FreeBlocks() != geo.TotalBlocks {
			t.Fatalf("after freeing everything: %d free, want %d", a.FreeBlocks(), geo.TotalBlocks)
		}
		want := []Extent{{0, 512}, {512, 512}, {1024, 512}, {1536, 512}, {2048, 512}, {2560, 512}, {3072, 512}, {3584, 416}}
		if got := freeList(a); !reflect.DeepEqual(got, want) {
			t.Fatalf("free space not merged back: %v", got)
		}
	}
}

// A goal on the first block of an AG is not followed: the file would leave
// its AG set for the next AG (a stream would land in another's set).
func TestGoalStaysInAG(t *testing.T) {
	geo := Geometry{AGCount: 4, AGBlocks: 1000, TotalBlocks: 4000}
	a := newTest(t, geo, Options{Policy: PolicyStreams})
	e, err := a.Alloc(Request{Ino: MakeIno(0, 4), Stream: 1, Goal: 1000, Len: 10})
	if err != nil {
		t.Fatal(err)
	}
	if e.Start/geo.AGBlocks != 0 {
		t.Fatalf("stream 1 followed a goal into AG %d: %v", e.Start/geo.AGBlocks, e)
	}
}

// Trim holds at most trimPiece blocks at a time: allocation in the AG
// being trimmed goes on.
func TestTrimHoldsPieces(t *testing.T) {
	geo := Geometry{AGCount: 1, AGBlocks: 4 * trimPiece, TotalBlocks: 4 * trimPiece}
	a := newTest(t, geo, Options{Policy: PolicyInode})
	var pieces int
	n, err := a.Trim(1, func(e Extent) error {
		pieces++
		if e.Len > trimPiece {
			t.Fatalf("held %d blocks at once", e.Len)
		}
		if _, err := a.Alloc(Request{Ino: MakeIno(0, 2), Len: 1}); err != nil {
			t.Fatalf("allocation during trim: %v", err)
		}
		return nil
	})
	if err != nil || pieces < 4 || n == 0 {
		t.Fatalf("trim: %d blocks in %d pieces, %v", n, pieces, err)
	}
}

// TestAllocMeta: metadata blocks come from the top of an AG's free space,
// then from the following AGs, and a full device says ENOSPC.
func TestAllocMeta(t *testing.T) {
	a, err := New(Geometry{AGCount: 2, AGBlocks: 8, TotalBlocks: 16}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for range 16 {
		b, err := a.AllocMeta(1)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, b)
		mustCheck(t, a)
	}
	want := []uint64{15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0}
	if !slices.Equal(got, want) {
		t.Fatalf("AllocMeta order %v, want %v", got, want)
	}
	if _, err := a.AllocMeta(0); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("AllocMeta on a full device: %v, want ENOSPC", err)
	}
}

// TestTakeExact: all of the range or nothing, never across an AG.
func TestTakeExact(t *testing.T) {
	a, err := New(Geometry{AGCount: 2, AGBlocks: 8, TotalBlocks: 16}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.MarkUsed(3, 1); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		start, n uint64
		ok       bool
	}{
		{2, 2, false}, // block 3 is used
		{6, 4, false}, // crosses into AG 1
		{15, 2, false},
		{16, 1, false},
		{4, 4, true},
		{4, 1, false}, // taken just before
		{0, 3, true},
	} {
		if got := a.TakeExact(c.start, c.n, 0); got != c.ok {
			t.Errorf("TakeExact(%d, %d) = %v, want %v", c.start, c.n, got, c.ok)
		}
		mustCheck(t, a)
	}
	if free := freeList(a); !reflect.DeepEqual(free, []Extent{{Start: 8, Len: 8}}) {
		t.Errorf("free space %v, want only AG 1", free)
	}
}

// ReplaceFree refills a shared allocator with a rebuilt one's free space:
// blocks used only in the old one come back, the new one's used blocks are
// never handed out.
func TestReplaceFree(t *testing.T) {
	geo := Geometry{AGCount: 4, AGBlocks: 1000, TotalBlocks: 3900}
	a, err := New(geo, Options{Policy: PolicyStreams})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	fresh, err := New(geo, Options{Policy: PolicyStreams})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.MarkUsed(0, 2500); err != nil { // over-reserved
		t.Fatal(err)
	}
	if err := fresh.MarkUsed(100, 50); err != nil {
		t.Fatal(err)
	}
	if err := fresh.MarkUsed(3000, 900); err != nil {
		t.Fatal(err)
	}
	want := fresh.FreeBlocks()
	if err := a.ReplaceFree(fresh); err != nil {
		t.Fatal(err)
	}
	fresh.Close()
	if got := a.FreeBlocks(); got != want {
		t.Fatalf("free blocks %d, want %d", got, want)
	}
	if err := a.Check(); err != nil {
		t.Fatal(err)
	}
	if err := a.MarkUsed(100, 1); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("block 100 is used in the replacement, MarkUsed: %v", err)
	}
	if err := a.MarkUsed(0, 100); err != nil {
		t.Fatalf("blocks used only before the replacement: %v", err)
	}
	other, _ := New(Geometry{AGCount: 2, AGBlocks: 1000, TotalBlocks: 2000}, Options{Policy: PolicyStreams})
	defer other.Close()
	if err := a.ReplaceFree(other); !errors.Is(err, ErrInvalid) {
		t.Fatalf("another geometry: %v", err)
	}
}
