package zone

import (
	"context"
	"fmt"
	"testing"

	"github.com/streamfs/streamfs/alloc"
)

// BenchmarkAlloc is alloc's BenchmarkAlloc on zones: Alloc of 8-block
// extents for 64 files over 4 streams, extents freed through a ring so
// the device never fills. On zones a free only makes garbage, so the loop
// also reclaims: a victim whose blocks the ring has all freed is reset
// (no copy: the ring frees in allocation order). Its ns/op against the
// AG allocator's BenchmarkAlloc in package alloc (the same loop, the same
// number of blocks) is the cost ratio of the two allocation paths:
// go test -run X -bench '^BenchmarkAlloc$' ./alloc ./alloc/zone
func BenchmarkAlloc(b *testing.B) {
	for _, cache := range []bool{false, true} {
		for _, random := range []bool{false, true} {
			if random && !cache {
				continue
			}
			b.Run(fmt.Sprintf("cache=%v/random=%v", cache, random), func(b *testing.B) {
				geo := Geometry{ZoneBlocks: 1 << 14, CapBlocks: 1 << 14, Zones: 1024, First: 4}
				a := newTest(b, geo, newFake(), Options{Streams: 4, Cache: cache})
				ring := make([]Extent, 1<<14)
				ctx := context.Background()
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if err := recycle(a, &ring[i%len(ring)], true); err != nil {
						b.Fatal(err)
					}
					f := uint32(i % 64)
					e, err := a.Alloc(ctx, Request{Ino: alloc.MakeIno(f%16, f), Stream: f%4 + 1, Len: 8, Random: random})
					if err != nil {
						b.Fatal(err)
					}
					if err := a.Done(e, nil); err != nil {
						b.Fatal(err)
					}
					ring[i%len(ring)] = e
				}
			})
		}
	}
}

// BenchmarkParallelAlloc: 16 writers, each its own file and stream
// (wrapping onto the streams the geometry gives), allocating and
// completing 1-block extents, frees through a per-writer ring, one
// goroutine resetting dead victims. Shows what the allocation path
// serializes on.
func BenchmarkParallelAlloc(b *testing.B) {
	geo := Geometry{ZoneBlocks: 1 << 12, CapBlocks: 1 << 12, Zones: 4096, First: 4}
	a := newTest(b, geo, newFake(), Options{Streams: 16})
	var next atomicCounter
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		w := next.add()
		ring := make([]Extent, 1<<10)
		i := 0
		for pb.Next() {
			slot := &ring[i%len(ring)]
			i++
			if err := recycle(a, slot, w == 0); err != nil {
				b.Error(err)
				return
			}
			e, err := a.Alloc(context.Background(), Request{Ino: alloc.MakeIno(uint32(w), uint32(w)), Stream: uint32(w) + 1, Len: 1})
			if err != nil {
				b.Error(err)
				return
			}
			_ = a.Done(e, nil)
			*slot = e
		}
	})
}

// recycle frees the ring slot's old extent and, when reclaim is set and
// wanted, resets a victim the ring has emptied (one still holding live
// blocks is put back: the benchmarks copy nothing).
func recycle(a *Allocator, slot *Extent, reclaim bool) error {
	if slot.Len != 0 {
		if err := a.Free(slot.Start, slot.Len); err != nil {
			return err
		}
	}
	if !reclaim || !a.NeedReclaim() {
		return nil
	}
	v, ok := a.Victim()
	switch {
	case !ok:
		return nil
	case v.Live == 0:
		return a.Reset(v.Index)
	}
	return a.Unpick(v.Index)
}
