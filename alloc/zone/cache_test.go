package zone

import (
	"testing"

	"github.com/streamfs/streamfs/alloc"
)

// A file's random writes go back to the zone it last wrote even when the
// placement rule would now pick another: the cache is asked first.
func TestCacheKeepsFileInItsZone(t *testing.T) {
	geo := Geometry{ZoneBlocks: 64, CapBlocks: 64, Zones: 20, First: 0}
	a := newTest(t, geo, newFake(), Options{Reserve: 1, GenericSlots: 2, Cache: true})
	ino := alloc.MakeIno(0, 0) // generic target: slot 0, then slot 1
	set := a.slotSet(ino, 0, nil)
	// Slot 0 busy (another writer holds it): the random write gives way
	// to slot 1, and the cache learns that zone.
	set[0].mu.Lock()
	e1 := mustAlloc(t, a, Request{Ino: ino, Len: 2, Random: true})
	set[0].mu.Unlock()
	a.cache.c.Wait()
	if st := a.Stats(); st.CacheMisses != 1 || st.CacheHits != 0 {
		t.Fatalf("first write: %+v", st)
	}
	other := mustAlloc(t, a, Request{Ino: alloc.MakeIno(0, 2), Len: 2}) // opens slot 0's zone
	if a.zoneNo(other.Start) == a.zoneNo(e1.Start) {
		t.Fatal("test setup: both slots in one zone")
	}
	e2 := mustAlloc(t, a, Request{Ino: ino, Len: 2, Random: true})
	if a.zoneNo(e2.Start) != a.zoneNo(e1.Start) {
		t.Fatalf("random write to zone %d, the file's last zone is %d", a.zoneNo(e2.Start), a.zoneNo(e1.Start))
	}
	if st := a.Stats(); st.CacheHits != 1 {
		t.Fatalf("second write: %+v", st)
	}
	// Without Random the cache is not asked: the rule's target slot.
	e3 := mustAlloc(t, a, Request{Ino: ino, Len: 2})
	if a.zoneNo(e3.Start) != a.zoneNo(other.Start) {
		t.Fatalf("sequential write to zone %d, want the target slot's %d", a.zoneNo(e3.Start), a.zoneNo(other.Start))
	}
}

// An entry is dropped (found stale, then replaced) when its zone fills or
// is reset, even when the same slot has reopened the reset zone.
func TestCacheInvalidation(t *testing.T) {
	geo := Geometry{ZoneBlocks: 8, CapBlocks: 8, Zones: 10, First: 0}
	a := newTest(t, geo, newFake(), Options{Reserve: 1, GenericSlots: 1, Cache: true})
	ino, ino2 := uint64(5), uint64(6)
	e1 := mustAlloc(t, a, Request{Ino: ino, Len: 4, Random: true})
	f2 := mustAlloc(t, a, Request{Ino: ino2, Len: 1, Random: true})
	a.cache.c.Wait()
	// Another file fills the zone: the entries' generation is gone.
	fill := mustAlloc(t, a, Request{Ino: 9, Len: 3})
	e2 := mustAlloc(t, a, Request{Ino: ino, Len: 1, Random: true})
	st := a.Stats()
	if st.CacheStale != 1 || st.CacheHits != 0 || a.zoneNo(e2.Start) == a.zoneNo(e1.Start) {
		t.Fatalf("after the zone filled: %+v, extent %+v", st, e2)
	}
	// The entry now names the new zone: hit.
	e3 := mustAlloc(t, a, Request{Ino: ino, Len: 1, Random: true})
	if st := a.Stats(); st.CacheHits != 1 || a.zoneNo(e3.Start) != a.zoneNo(e2.Start) {
		t.Fatalf("after relearning: %+v", st)
	}
	// Reclaim empties and resets the first zone; the slot fills its
	// zone and reopens the reset one (top of the free stack).
	for _, e := range []Extent{e1, f2, fill} {
		if err := a.Free(e.Start, e.Len); err != nil {
			t.Fatal(err)
		}
	}
	first := a.zoneNo(e1.Start)
	if err := a.Reset(first); err != nil {
		t.Fatal(err)
	}
	if e := mustAlloc(t, a, Request{Ino: 9, Len: 8 - 2}); a.zoneNo(e.End()-1) != a.zoneNo(e2.Start) {
		t.Fatalf("setup: fill %+v", e)
	}
	if e := mustAlloc(t, a, Request{Ino: 9, Len: 1}); a.zoneNo(e.Start) != first {
		t.Fatalf("setup: slot opened zone %d, want the reset zone %d", a.zoneNo(e.Start), first)
	}
	// ino2's entry names the reset zone, open again in the same slot for
	// the same class: only the generation tells it is stale.
	before := a.Stats()
	e4 := mustAlloc(t, a, Request{Ino: ino2, Len: 1, Random: true})
	if st := a.Stats(); st.CacheStale != before.CacheStale+1 || st.CacheHits != before.CacheHits {
		t.Fatalf("entry of an older generation: before %+v, after %+v", before, st)
	}
	if a.zoneNo(e4.Start) != first {
		t.Fatalf("write went to zone %d", a.zoneNo(e4.Start))
	}
	mustCheck(t, a)
}

// The cache is bounded: far more inodes than entries leave at most the
// bound cached.
func TestCacheEviction(t *testing.T) {
	geo := Geometry{ZoneBlocks: 1 << 16, CapBlocks: 1 << 16, Zones: 8, First: 0}
	const bound = 64
	a := newTest(t, geo, newFake(), Options{Reserve: 1, GenericSlots: 1, Cache: true, CacheEntries: bound})
	const n = 5000
	for ino := uint64(1); ino <= n; ino++ {
		mustAlloc(t, a, Request{Ino: ino, Len: 1, Random: true})
		if ino%100 == 0 {
			a.cache.c.Wait()
		}
	}
	a.cache.c.Wait()
	kept := 0
	for ino := uint64(1); ino <= n; ino++ {
		if _, ok := a.cache.c.Get(ino); ok {
			kept++
		}
	}
	if kept == 0 || kept > bound {
		t.Fatalf("%d of %d inodes cached, bound %d", kept, n, bound)
	}
	t.Logf("%d of %d inodes cached (bound %d)", kept, n, bound)
}
