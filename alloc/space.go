package alloc

import (
	"fmt"
	"slices"
)

// This file holds the whole-free-space operations: trimming, walking and
// building the free space from a list (mount from on-disk free-space trees).

// trimPiece bounds how much free space Trim holds at once (in blocks), so
// a long discard never starves allocation in its AG.
const trimPiece = 8192

// clipRange turns [start, start+length) into [start, end) inside the
// device; ok is false when nothing of it is on the device. length may be
// anything (FITRIM's default is "to the end"), the sum is not trusted.
func (a *Allocator) clipRange(start, length uint64) (end uint64, ok bool) {
	if length == 0 || start >= a.geo.TotalBlocks {
		return 0, false
	}
	return start + min(length, a.geo.TotalBlocks-start), true
}

// agsIn returns the AGs overlapping [start, end), which must be non-empty
// and on the device.
func (a *Allocator) agsIn(start, end uint64) []*ag {
	return a.ags[start/a.geo.AGBlocks : (end-1)/a.geo.AGBlocks+1]
}

// clip returns the part of e inside [lo, hi) if it is at least minLen
// blocks long.
func clip(e Extent, lo, hi, minLen uint64) (Extent, bool) {
	s, t := max(e.Start, lo), min(e.end(), hi)
	if s >= t || t-s < minLen {
		return Extent{}, false
	}
	return Extent{Start: s, Len: t - s}, true
}

// Trim is TrimRange over the whole device.
func (a *Allocator) Trim(minLen uint64, fn func(Extent) error) (trimmed uint64, err error) {
	return a.TrimRange(0, a.geo.TotalBlocks, minLen, fn)
}

// TrimRange calls fn for the free space inside [start, start+length) of
// free extents whose part in that range is >= minLen blocks, AG by AG in
// block order, in pieces of at most trimPiece blocks. While fn runs, its
// piece is held out of free space, so nothing allocates (and writes) blocks
// fn is discarding; Free and MarkUsed of held blocks fail. It stops at the
// first error from fn, still returning the held piece to free space, and
// reports the blocks fn handled successfully. A range off the device trims
// nothing. This is what FITRIM needs (struct fstrim_range, in blocks).
func (a *Allocator) TrimRange(start, length, minLen uint64, fn func(Extent) error) (trimmed uint64, err error) {
	minLen = max(minLen, 1)
	end, ok := a.clipRange(start, length)
	if !ok {
		return 0, nil
	}
	for _, g := range a.agsIn(start, end) {
		lo, hi := max(g.start, start), min(g.start+g.size, end)
		for cursor := lo; cursor < hi; {
			g.lock()
			piece, found := g.trimPiece(cursor, lo, hi, minLen)
			if !found {
				g.unlock()
				break
			}
			g.take(piece.Start, piece.Len)
			g.held.insert(piece)
			g.unlock()

			// fn (a discard, typically) runs unlocked.
			ferr := fn(piece)

			g.lock()
			g.held.delete(piece)
			g.give(piece.Start, piece.Len)
			g.unlock()
			if ferr != nil {
				return trimmed, fmt.Errorf("alloc: trim %d+%d in AG %d: %w", piece.Start, piece.Len, g.index, ferr)
			}
			trimmed += piece.Len
			cursor = piece.end()
		}
	}
	return trimmed, nil
}

// trimPiece finds the next piece to trim at or after cursor: free space
// in [cursor, hi) of an extent whose part in [lo, hi) is >= minLen. Caller
// holds mu.
func (g *ag) trimPiece(cursor, lo, hi, minLen uint64) (Extent, bool) {
	// A piece given back merges with its neighbours, so the cursor may sit
	// inside a free extent: trim on from there.
	if e, ok := g.containing(cursor); ok {
		if c, ok := clip(e, lo, hi, minLen); ok && c.end() > cursor {
			return Extent{Start: cursor, Len: min(c.end()-cursor, trimPiece)}, true
		}
	}
	var piece Extent
	g.bno.ascend(Extent{Start: cursor}, func(e Extent) bool {
		if e.Start >= hi {
			return false
		}
		c, ok := clip(e, lo, hi, minLen)
		if !ok {
			return true
		}
		piece = Extent{Start: c.Start, Len: min(c.Len, trimPiece)}
		return false
	})
	return piece, piece.Len > 0
}

// FreeExtentsIn calls fn, in block order, for each free extent's part
// inside [start, start+length) that is at least minLen blocks, until fn
// returns false. It walks per-AG snapshots and fn runs with no allocator
// lock held, so the blocks may be allocated by the time fn sees them:
// discard through TrimRange, which holds them. Extents Trim holds at the
// moment are not visited.
func (a *Allocator) FreeExtentsIn(start, length, minLen uint64, fn func(Extent) bool) {
	minLen = max(minLen, 1)
	end, ok := a.clipRange(start, length)
	if !ok {
		return
	}
	var snap []Extent
	for _, g := range a.agsIn(start, end) {
		lo, hi := max(g.start, start), min(g.start+g.size, end)
		snap = snap[:0]
		g.lock()
		visit := func(e Extent) bool {
			if e.Start >= hi {
				return false
			}
			if c, ok := clip(e, lo, hi, minLen); ok {
				snap = append(snap, c)
			}
			return true
		}
		if e, ok := g.containing(lo); ok {
			visit(e)
		}
		// containing(lo), if any, starts at or before lo: ascend from
		// lo+1 so it is not visited twice.
		g.bno.ascend(Extent{Start: lo + 1}, visit)
		g.unlock()
		for _, e := range snap {
			if !fn(e) {
				return
			}
		}
	}
}

// ForEachFree calls fn for every free extent of AG ag in block order until
// fn returns false: the AG's whole free space, including extents a Trim
// holds at the moment (they are free, only out of reach while discarded),
// merged. It is what an on-disk free-space tree of the AG should hold. fn
// runs with no allocator lock held, on a snapshot taken under the AG lock.
func (a *Allocator) ForEachFree(ag uint32, fn func(Extent) bool) error {
	if ag >= a.geo.AGCount {
		return fmt.Errorf("%w: AG %d of %d", ErrInvalid, ag, a.geo.AGCount)
	}
	g := a.ags[ag]
	g.lock()
	snap := make([]Extent, 0, g.bno.len()+g.held.len())
	g.bno.all(func(e Extent) bool {
		snap = append(snap, e)
		return true
	})
	if g.held.len() > 0 {
		g.held.all(func(e Extent) bool {
			snap = append(snap, e)
			return true
		})
	}
	held := g.held.len()
	g.unlock()
	if held > 0 {
		// Held pieces were cut out of free extents: merge them back.
		slices.SortFunc(snap, func(x, y Extent) int { return cmpStart(x, y) })
		snap = mergeSorted(snap)
	}
	for _, e := range snap {
		if !fn(e) {
			return nil
		}
	}
	return nil
}

func cmpStart(x, y Extent) int {
	switch {
	case x.Start < y.Start:
		return -1
	case x.Start > y.Start:
		return 1
	}
	return 0
}

// mergeSorted joins adjacent extents of a list sorted by start, in place.
// The extents must not overlap.
func mergeSorted(l []Extent) []Extent {
	out := l[:0]
	for _, e := range l {
		if n := len(out); n > 0 && out[n-1].end() == e.Start {
			out[n-1].Len += e.Len
			continue
		}
		out = append(out, e)
	}
	return out
}

// NewFromFree makes an allocator whose free space is exactly the given
// extents (mount from on-disk free-space trees), in any order; adjacent
// extents merge. It is New plus SetFree for every AG, built in one sort
// instead of one MarkUsed per used extent. An extent off the device, of
// zero length, or overlapping another is ErrCorrupt.
func NewFromFree(geo Geometry, opts Options, free []Extent) (*Allocator, error) {
	a, err := New(geo, opts)
	if err != nil {
		return nil, err
	}
	perAG, err := a.byAG(free)
	if err != nil {
		a.Close()
		return nil, err
	}
	for i, l := range perAG {
		if err := a.ags[i].setFree(l); err != nil {
			a.Close()
			return nil, fmt.Errorf("alloc: building free space: %w", err)
		}
	}
	return a, nil
}

// SetFree replaces the free space of AG ag with the given extents (any
// order; adjacent ones merge), for loading one AG's free-space tree at a
// time. Extents outside the AG, of zero length or overlapping are
// ErrCorrupt; an AG a Trim is holding extents of is ErrBusy. On error the
// AG is unchanged. It is meant for mount, before allocation starts:
// blocks allocated from the AG before the call are forgotten.
func (a *Allocator) SetFree(ag uint32, free []Extent) error {
	if ag >= a.geo.AGCount {
		return fmt.Errorf("%w: AG %d of %d", ErrInvalid, ag, a.geo.AGCount)
	}
	g := a.ags[ag]
	l := slices.Clone(free)
	for _, e := range l {
		if e.Len == 0 || e.Start < g.start || e.Start-g.start >= g.size || e.Len > g.start+g.size-e.Start {
			return fmt.Errorf("alloc: set free space of AG %d: %w: extent %d+%d outside the AG [%d, %d)", ag, ErrCorrupt, e.Start, e.Len, g.start, g.start+g.size)
		}
	}
	if err := g.setFree(l); err != nil {
		return fmt.Errorf("alloc: set free space of AG %d: %w", ag, err)
	}
	return nil
}

// byAG checks free extents against the device and splits them by AG (an
// extent crossing AG boundaries is cut there).
func (a *Allocator) byAG(free []Extent) ([][]Extent, error) {
	perAG := make([][]Extent, a.geo.AGCount)
	var buf [2]piece
	for _, e := range free {
		ps, err := a.split(buf[:0], e.Start, e.Len)
		if err != nil {
			return nil, fmt.Errorf("alloc: building free space: %w", err)
		}
		for _, p := range ps {
			perAG[p.g.index] = append(perAG[p.g.index], Extent{Start: p.start, Len: p.len})
		}
	}
	return perAG, nil
}

// setFree replaces the AG's free space with l, whose extents lie inside
// the AG (l is sorted in place). It takes mu.
func (g *ag) setFree(l []Extent) error {
	slices.SortFunc(l, func(x, y Extent) int { return cmpStart(x, y) })
	for i := 1; i < len(l); i++ {
		if l[i-1].end() > l[i].Start {
			return fmt.Errorf("%w: free extents %d+%d and %d+%d in AG %d overlap", ErrCorrupt, l[i-1].Start, l[i-1].Len, l[i].Start, l[i].Len, g.index)
		}
	}
	l = mergeSorted(l)
	var sum uint64
	for _, e := range l {
		sum += e.Len
	}
	byLen := slices.Clone(l)
	slices.SortFunc(byLen, func(x, y Extent) int {
		switch {
		case byCnt(x, y):
			return -1
		case byCnt(y, x):
			return 1
		}
		return 0
	})

	g.lock()
	defer g.unlock()
	if g.held.len() > 0 {
		return fmt.Errorf("%w: AG %d has extents held by a trim", ErrBusy, g.index)
	}
	g.bno.setSorted(l)
	g.cnt.setSorted(byLen)
	g.free.Store(sum)
	return nil
}
