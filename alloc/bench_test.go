package alloc

import (
	"errors"
	"fmt"
	"testing"
)

// BenchmarkAlloc measures Alloc of 8-block extents for 64 files spread over
// 4 streams, with and without the placement cache. Allocated extents are
// kept in a ring and freed when it wraps, so the device never fills and free
// space stays fragmented.
func BenchmarkAlloc(b *testing.B) {
	for _, cache := range []bool{false, true} {
		b.Run(fmt.Sprintf("cache=%v", cache), func(b *testing.B) {
			geo := Geometry{AGCount: 16, AGBlocks: 1 << 20, TotalBlocks: 16 << 20}
			a := newTest(b, geo, Options{Policy: PolicyStreams, PlacementCache: cache})
			ring := make([]Extent, 1<<14)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				slot := &ring[i%len(ring)]
				if slot.Len != 0 {
					if err := a.Free(slot.Start, slot.Len); err != nil {
						b.Fatal(err)
					}
				}
				f := uint32(i % 64)
				e, err := a.Alloc(Request{Ino: MakeIno(f%16, f), Stream: f%4 + 1, Len: 8})
				if err != nil {
					b.Fatal(err)
				}
				*slot = e
			}
		})
	}
}

// BenchmarkFragmentedFree measures Free and Alloc against an AG holding
// ~100k free extents, the size the index is meant to handle.
func BenchmarkFragmentedFree(b *testing.B) {
	const n = 100_000
	geo := Geometry{AGCount: 1, AGBlocks: 2 * n, TotalBlocks: 2 * n}
	a := newTest(b, geo, Options{Policy: PolicyInode})
	if err := a.MarkUsed(0, 2*n); err != nil {
		b.Fatal(err)
	}
	for i := uint64(0); i < n; i++ {
		if err := a.Free(2*i, 1); err != nil { // every other block free
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		e, err := a.Alloc(Request{Ino: 1, Len: 1})
		if errors.Is(err, ErrNoSpace) {
			b.Fatal("ran out")
		}
		if err != nil {
			b.Fatal(err)
		}
		if err := a.Free(e.Start, e.Len); err != nil {
			b.Fatal(err)
		}
	}
}
