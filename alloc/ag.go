package alloc

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// Extent is a run of filesystem blocks.
type Extent struct{ Start, Len uint64 }

func (e Extent) end() uint64 { return e.Start + e.Len }

// byBno orders extents by start block (XFS's bnobt): neighbour lookups for
// merging and for extending a file in place.
func byBno(a, b Extent) bool { return a.Start < b.Start }

// byCnt orders extents by length, then start (XFS's cntbt): best fit is the
// first entry at or after the wanted length.
func byCnt(a, b Extent) bool {
	if a.Len != b.Len {
		return a.Len < b.Len
	}
	return a.Start < b.Start
}

// ag is one allocation group: its own lock and free-space index, so
// writers steered to different AGs never contend.
type ag struct {
	index uint32
	start uint64 // first block
	size  uint64 // blocks

	// mu guards the fields below it. Lock order: at most one ag.mu is held,
	// except MarkUsed/Free on a range spanning AGs, which take them in
	// ascending AG index. Nothing else is acquired while holding ag.mu.
	mu sync.Mutex
	// bno and cnt index the same free extents, by block and by size.
	bno sortedSet[Extent]
	cnt sortedSet[Extent]
	// held are extents Trim took out of bno/cnt while its callback runs;
	// Free and MarkUsed must not touch them.
	held sortedSet[Extent]
	// streamBlocks counts blocks ever allocated here per stream id. It
	// lives in the AG, under the lock allocation already holds, so stream
	// accounting adds no lock of its own: writers in different AGs share
	// nothing. Stats sums it over the AGs.
	streamBlocks map[uint32]uint64

	// free mirrors the blocks in bno; written under mu, read without it so
	// scans can skip full AGs and stats need no lock.
	free      atomic.Uint64
	allocs    atomic.Uint64
	lockWaits atomic.Uint64
	// Placement-cache lookups for inodes of this AG (Allocator.Stats).
	cacheHits, cacheMisses atomic.Uint64
}

func newAG(index uint32, start, size uint64) *ag {
	g := &ag{
		index: index,
		start: start,
		size:  size,
		bno:   newSortedSet(byBno),
		cnt:   newSortedSet(byCnt),
		held:  newSortedSet(byBno),

		streamBlocks: make(map[uint32]uint64),
	}
	g.insertFree(Extent{Start: start, Len: size})
	return g
}

// lock takes mu, counting the times another goroutine held it: the
// contention the AG-set policies are meant to remove.
func (g *ag) lock() {
	if !g.mu.TryLock() {
		g.lockWaits.Add(1)
		g.mu.Lock()
	}
}

func (g *ag) unlock() { g.mu.Unlock() }

// insertFree and removeFree keep both indexes and the counter in step.
// Callers hold mu.
func (g *ag) insertFree(e Extent) {
	g.bno.insert(e)
	g.cnt.insert(e)
	g.free.Store(g.free.Load() + e.Len)
}

func (g *ag) removeFree(e Extent) {
	g.bno.delete(e)
	g.cnt.delete(e)
	g.free.Store(g.free.Load() - e.Len)
}

// containing returns the free extent holding block b. Caller holds mu.
func (g *ag) containing(b uint64) (Extent, bool) {
	e, ok := g.bno.floor(Extent{Start: b})
	if !ok || b >= e.end() {
		return Extent{}, false
	}
	return e, true
}

// overlaps reports whether any extent of s (ordered by start) intersects
// [start, start+n).
func overlaps(s *sortedSet[Extent], start, n uint64) bool {
	if e, ok := s.floor(Extent{Start: start}); ok && e.end() > start {
		return true
	}
	if e, ok := s.ceil(Extent{Start: start}); ok && e.Start < start+n {
		return true
	}
	return false
}

// checkFree returns an error unless [start, start+n) is entirely free and
// not held by Trim. Caller holds mu.
func (g *ag) checkFree(start, n uint64) error {
	if overlaps(&g.held, start, n) {
		return fmt.Errorf("%w: blocks %d+%d in AG %d are being trimmed", ErrBusy, start, n, g.index)
	}
	if e, ok := g.containing(start); !ok || e.end() < start+n {
		return fmt.Errorf("%w: blocks %d+%d in AG %d are not all free", ErrCorrupt, start, n, g.index)
	}
	return nil
}

// checkUsed returns an error unless no block of [start, start+n) is free
// or held by Trim (which would make a Free a double free). Caller holds mu.
func (g *ag) checkUsed(start, n uint64) error {
	if overlaps(&g.bno, start, n) || overlaps(&g.held, start, n) {
		return fmt.Errorf("%w: blocks %d+%d in AG %d are already free (double free)", ErrCorrupt, start, n, g.index)
	}
	return nil
}

// take removes [start, start+n) from free space; it must lie inside one
// free extent (checkFree). Caller holds mu.
func (g *ag) take(start, n uint64) {
	e, ok := g.containing(start)
	if !ok || e.end() < start+n {
		return // callers check first; never corrupt the index
	}
	g.removeFree(e)
	if start > e.Start {
		g.insertFree(Extent{Start: e.Start, Len: start - e.Start})
	}
	if end := start + n; end < e.end() {
		g.insertFree(Extent{Start: end, Len: e.end() - end})
	}
}

// give returns [start, start+n) to free space, merging with free
// neighbours; it must not overlap free space (checkUsed). Caller holds mu.
func (g *ag) give(start, n uint64) {
	merged := Extent{Start: start, Len: n}
	if l, ok := g.bno.floor(Extent{Start: start}); ok && l.end() == start {
		g.removeFree(l)
		merged.Start, merged.Len = l.Start, l.Len+merged.Len
	}
	if r, ok := g.bno.ceil(Extent{Start: start}); ok && r.Start == start+n {
		g.removeFree(r)
		merged.Len += r.Len
	}
	g.insertFree(merged)
}

// allocated takes got out of free space and counts it for stream. Caller
// holds mu.
func (g *ag) allocated(got Extent, stream uint32) {
	g.take(got.Start, got.Len)
	g.streamBlocks[stream] += got.Len
	g.allocs.Add(1)
}

// allocAt takes up to n blocks starting exactly at b, if b is free.
func (g *ag) allocAt(b, n uint64, stream uint32) (Extent, bool) {
	g.lock()
	defer g.unlock()
	e, ok := g.containing(b)
	if !ok {
		return Extent{}, false
	}
	got := Extent{Start: b, Len: min(n, e.end()-b)}
	g.allocated(got, stream)
	return got, true
}

// takeExact takes exactly [b, b+n) if every block of it is free.
func (g *ag) takeExact(b, n uint64, stream uint32) bool {
	g.lock()
	defer g.unlock()
	e, ok := g.containing(b)
	if !ok || e.end() < b+n {
		return false
	}
	g.allocated(Extent{Start: b, Len: n}, stream)
	return true
}

// allocBest takes the smallest free extent of at least n blocks, or the
// largest one when none is that long (a shorter extent beats spilling to
// another AG).
func (g *ag) allocBest(n uint64, stream uint32) (Extent, bool) {
	if g.free.Load() == 0 {
		return Extent{}, false // full: skip the lock
	}
	g.lock()
	defer g.unlock()
	e, ok := g.cnt.ceil(Extent{Len: n})
	if !ok {
		if e, ok = g.cnt.last(); !ok {
			return Extent{}, false
		}
	}
	got := Extent{Start: e.Start, Len: min(n, e.Len)}
	g.allocated(got, stream)
	return got, true
}

// allocTop takes the highest free block of the AG, for a metadata node.
// Data is placed lowest first (best fit, then appends extend forward), so
// nodes kept at the top of free space never land on the block an append
// would extend into: a tree node taken by best fit was the first block
// after the file being written, splitting its extent at every checkpoint.
func (g *ag) allocTop(stream uint32) (uint64, bool) {
	if g.free.Load() == 0 {
		return 0, false
	}
	g.lock()
	defer g.unlock()
	e, ok := g.bno.last()
	if !ok {
		return 0, false
	}
	b := e.end() - 1
	g.allocated(Extent{Start: b, Len: 1}, stream)
	return b, true
}

// check verifies the AG's invariants. Caller holds mu.
func (g *ag) check() error {
	if g.bno.len() != g.cnt.len() {
		return fmt.Errorf("%w: AG %d: %d extents by block, %d by size", ErrCorrupt, g.index, g.bno.len(), g.cnt.len())
	}
	var sum uint64
	var prev Extent
	first := true
	var err error
	g.bno.all(func(e Extent) bool {
		switch {
		case e.Len == 0:
			err = fmt.Errorf("%w: AG %d: empty free extent at %d", ErrCorrupt, g.index, e.Start)
		case e.Start < g.start || e.end() > g.start+g.size:
			err = fmt.Errorf("%w: AG %d: free extent %d+%d outside the AG", ErrCorrupt, g.index, e.Start, e.Len)
		case !first && prev.end() >= e.Start:
			err = fmt.Errorf("%w: AG %d: free extents %d+%d and %d+%d overlap or are not merged", ErrCorrupt, g.index, prev.Start, prev.Len, e.Start, e.Len)
		}
		if err != nil {
			return false
		}
		if c, ok := g.cnt.ceil(e); !ok || c != e {
			err = fmt.Errorf("%w: AG %d: free extent %d+%d missing from the size index", ErrCorrupt, g.index, e.Start, e.Len)
			return false
		}
		sum += e.Len
		prev, first = e, false
		return true
	})
	if err != nil {
		return err
	}
	if sum != g.free.Load() {
		return fmt.Errorf("%w: AG %d: free count %d, index holds %d", ErrCorrupt, g.index, g.free.Load(), sum)
	}
	return nil
}
