package meta

import (
	"sort"

	"github.com/streamfs/streamfs/fs/format"
)

// Extent maps file blocks [LBlk, LBlk+Len) to device blocks [PBlk, PBlk+Len).
type Extent struct {
	LBlk, Len, PBlk uint64
	Flags           uint32 // format.ExtUnwritten
	Stream          uint32 // stream the data was written under
}

// Unwritten reports a preallocated extent that reads as zeros.
func (e Extent) Unwritten() bool { return e.Flags&format.ExtUnwritten != 0 }

// End is the first file block after e.
func (e Extent) End() uint64 { return e.LBlk + e.Len }

// extentMap is a file's extents sorted by LBlk, never overlapping.
// Neighbours that continue each other on the device with equal flags and
// stream are merged, so sequential writes keep one extent.
type extentMap struct{ ext []Extent }

// find returns the index of the first extent ending after lblk.
func (m *extentMap) find(lblk uint64) int {
	return sort.Search(len(m.ext), func(i int) bool { return m.ext[i].End() > lblk })
}

// lookup returns the extent containing lblk, if any.
func (m *extentMap) lookup(lblk uint64) (Extent, bool) {
	i := m.find(lblk)
	if i < len(m.ext) && m.ext[i].LBlk <= lblk {
		return m.ext[i], true
	}
	return Extent{}, false
}

// before returns the extent that ends exactly at lblk (the file's
// physically preceding data), if any.
func (m *extentMap) before(lblk uint64) (Extent, bool) {
	i := m.find(lblk)
	if i > 0 && m.ext[i-1].End() == lblk {
		return m.ext[i-1], true
	}
	if i == len(m.ext) && i > 0 {
		return m.ext[i-1], true
	}
	return Extent{}, false
}

// visit calls fn for every extent piece intersecting [lblk, lblk+n), clipped.
func (m *extentMap) visit(lblk, n uint64, fn func(Extent)) {
	end := lblk + n
	for i := m.find(lblk); i < len(m.ext) && m.ext[i].LBlk < end; i++ {
		fn(clip(m.ext[i], lblk, end))
	}
}

func clip(e Extent, lo, hi uint64) Extent {
	if e.LBlk < lo {
		d := lo - e.LBlk
		e.LBlk += d
		e.PBlk += d
		e.Len -= d
	}
	if e.End() > hi {
		e.Len = hi - e.LBlk
	}
	return e
}

// punch removes [lblk, lblk+n) and returns the removed pieces.
func (m *extentMap) punch(lblk, n uint64) []Extent {
	end := lblk + n
	i := m.find(lblk)
	if i == len(m.ext) || m.ext[i].LBlk >= end {
		return nil
	}
	var removed, keep []Extent
	j := i
	for ; j < len(m.ext) && m.ext[j].LBlk < end; j++ {
		e := m.ext[j]
		removed = append(removed, clip(e, lblk, end))
		if e.LBlk < lblk {
			keep = append(keep, clip(e, e.LBlk, lblk))
		}
		if e.End() > end {
			keep = append(keep, clip(e, end, e.End()))
		}
	}
	m.ext = append(m.ext[:i], append(keep, m.ext[j:]...)...)
	return removed
}

// insert adds e, which must cover a hole, merging with neighbours.
func (m *extentMap) insert(e Extent) {
	i := m.find(e.LBlk)
	if i > 0 && mergeable(m.ext[i-1], e) {
		m.ext[i-1].Len += e.Len
		if i < len(m.ext) && mergeable(m.ext[i-1], m.ext[i]) {
			m.ext[i-1].Len += m.ext[i].Len
			m.ext = append(m.ext[:i], m.ext[i+1:]...)
		}
		return
	}
	if i < len(m.ext) && mergeable(e, m.ext[i]) {
		m.ext[i].LBlk = e.LBlk
		m.ext[i].PBlk = e.PBlk
		m.ext[i].Len += e.Len
		return
	}
	m.ext = append(m.ext, Extent{})
	copy(m.ext[i+1:], m.ext[i:])
	m.ext[i] = e
}

func mergeable(a, b Extent) bool {
	return a.End() == b.LBlk && a.PBlk+a.Len == b.PBlk && a.Flags == b.Flags && a.Stream == b.Stream
}

// set maps e, replacing whatever mapped there; it returns the replaced
// pieces whose device blocks are no longer referenced.
func (m *extentMap) set(e Extent) []Extent {
	old := m.punch(e.LBlk, e.Len)
	m.insert(e)
	var freed []Extent
	for _, o := range old {
		// Converting unwritten to written in place keeps the same blocks.
		if o.PBlk+o.Len <= e.PBlk || o.PBlk >= e.PBlk+e.Len {
			freed = append(freed, o)
		} else if o.PBlk != e.PBlk+(o.LBlk-e.LBlk) {
			freed = append(freed, o)
		}
	}
	return freed
}

// blocks is the number of mapped blocks.
func (m *extentMap) blocks() uint64 {
	var n uint64
	for _, e := range m.ext {
		n += e.Len
	}
	return n
}
