package alloc

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
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

// BenchmarkParallelAppend is the review's workload in the allocator alone:
// 16 writers, each appending single blocks (4 KiB O_DIRECT appends) to its
// own file with its own software stream, on 64 AGs with the streams policy.
// Writers free their oldest blocks through a ring so the device never
// fills. Writers land in different AGs, so nothing here needs to
// serialize: run with -mutexprofile to see what still does.
//
// goal=true passes the end of the writer's previous extent as the goal, as
// the fs does for an append. goal=false passes none, as for a write whose
// previous extent is unknown: placement then comes from the placement
// cache (when on) or the policy, so every Alloc consults the cache.
func BenchmarkParallelAppend(b *testing.B) {
	const (
		writers = 16
		ringLen = 1 << 12
	)
	for _, goal := range []bool{true, false} {
		for _, cache := range []bool{false, true} {
			b.Run(fmt.Sprintf("goal=%v/cache=%v", goal, cache), func(b *testing.B) {
				benchParallelAppend(b, writers, ringLen, goal, cache)
			})
		}
	}
}

func benchParallelAppend(b *testing.B, writers uint32, ringLen int, useGoal, cache bool) {
	geo := Geometry{AGCount: 64, AGBlocks: 1 << 16, TotalBlocks: 64 << 16}
	a := newTest(b, geo, Options{Policy: PolicyStreams, PlacementCache: cache})
	if n := a.MaxStreams(); n != writers {
		b.Fatalf("%d software streams on 64 AGs, want %d", n, writers)
	}
	// Files of different directories: inodes in different AGs.
	inoOf := func(w uint32) uint64 { return MakeIno(w*4%geo.AGCount, 100+w) }
	// Warm the placement cache: ristretto admits new entries on its own
	// goroutine, which 16 busy writers on few cores starve for a while.
	// A daemon's writers wait on I/O; measure that steady state.
	for w := range writers {
		e, err := a.Alloc(Request{Ino: inoOf(w), Stream: w + 1, Len: 1})
		if err != nil {
			b.Fatal(err)
		}
		if err := a.Free(e.Start, e.Len); err != nil {
			b.Fatal(err)
		}
	}
	if a.cache != nil {
		a.cache.Wait()
	}
	// RunParallel starts parallelism*GOMAXPROCS goroutines.
	procs := runtime.GOMAXPROCS(0)
	b.SetParallelism((int(writers) + procs - 1) / procs)
	var next atomic.Uint32
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		w := next.Add(1) - 1
		ino := inoOf(w)
		stream := w%writers + 1
		ring := make([]Extent, ringLen)
		var goal uint64
		for i := 0; pb.Next(); i++ {
			slot := &ring[i%ringLen]
			if slot.Len != 0 {
				if err := a.Free(slot.Start, slot.Len); err != nil {
					b.Error(err)
					return
				}
			}
			e, err := a.Alloc(Request{Ino: ino, Stream: stream, Goal: goal, Len: 1})
			if err != nil {
				b.Error(err)
				return
			}
			*slot = e
			if useGoal {
				goal = e.end()
			}
		}
	})
	b.StopTimer()
	if a.cache != nil {
		b.ReportMetric(float64(a.Stats().CacheMisses-uint64(writers))/float64(b.N), "misses/op")
	}
}

// BenchmarkLoadFreeSpace builds an allocator whose 4 AGs hold 100k free
// extents in all (every other block free), the way mount can: all free and
// then MarkUsed of every used extent, or NewFromFree from the free list.
func BenchmarkLoadFreeSpace(b *testing.B) {
	const n = 100_000
	geo := Geometry{AGCount: 4, AGBlocks: n / 2, TotalBlocks: 2 * n}
	free := make([]Extent, 0, n)
	for i := uint64(0); i < n; i++ {
		free = append(free, Extent{Start: 2 * i, Len: 1})
	}
	opts := Options{Policy: PolicyStreams}
	b.Run("MarkUsed", func(b *testing.B) {
		for b.Loop() {
			a, err := New(geo, opts)
			if err != nil {
				b.Fatal(err)
			}
			for i := uint64(0); i < n; i++ {
				if err := a.MarkUsed(2*i+1, 1); err != nil {
					b.Fatal(err)
				}
			}
			a.Close()
		}
	})
	b.Run("NewFromFree", func(b *testing.B) {
		for b.Loop() {
			a, err := NewFromFree(geo, opts, free)
			if err != nil {
				b.Fatal(err)
			}
			a.Close()
		}
	})
}
