package ftl

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/streamfs/streamfs/alloc/victim"
)

// none marks an unmapped logical page or an invalid physical page.
const none = ^uint32(0)

// Reclaim unit states.
const (
	ruFree uint8 = iota
	ruOpen
	ruClosed
)

// errStuck means GC found no unit with an invalid page; the geometry check
// in newLayout rules it out, so it signals a model bug, not bad input.
var errStuck = errors.New("ftl model: no reclaim unit to collect")

type unit struct {
	valid  uint32 // valid pages
	owner  int16  // writer that filled it, -1 when free
	state  uint8
	erases uint32
	closed uint64 // close sequence number: age for cost-benefit
	// prev and next link closed units into the greedy bucket of their
	// valid count; -1 ends a list.
	prev, next int32
}

type writer struct {
	ru int32  // open unit, -1 none
	wp uint32 // next page in it
}

// Counters are the drive's write counters in bytes, as the FDP statistics
// log keeps them, with the same numbers per handle.
type Counters struct {
	Host, Media, Erased, GCCopied uint64
	Handles                       []HandleCounters
}

// HandleCounters count one handle's host writes and the media writes its
// data caused (its host writes plus GC copies of pages it wrote last).
type HandleCounters struct {
	Host, Media uint64
	// Avail is what the handle's open unit can still take, in bytes.
	Avail uint64
}

// WAF is media over host bytes, 0 before any write.
func WAF(host, media uint64) float64 {
	if host == 0 {
		return 0
	}
	return float64(media) / float64(host)
}

// Model is the FTL state of one drive.
//
// One mutex guards everything. Per-handle locks would not be enough: a host
// write through one handle invalidates a page that may sit in any other
// handle's unit, and GC moves pages of every handle. The critical section is
// a few array updates per 4 KiB page (tens of nanoseconds), against tens of
// microseconds the FUSE daemon spends per write, so it is not contended.
type Model struct {
	g Geometry
	l layout

	mu      sync.Mutex // guards every field below
	l2p     []uint32   // logical page -> physical page, none if unmapped
	lh      []uint8    // handle that last wrote each logical page (GC attribution)
	p2l     []uint32   // physical page -> logical page, none if invalid
	units   []unit
	free    []uint32 // free units, used as a stack
	writers []writer // [0, Handles): host handles; then GC destinations
	bucket  []int32  // greedy: head of the closed units with v valid pages
	lowest  uint32   // no bucket below this holds a unit
	seq     uint64   // units closed so far
	ctr     Counters
	dirty   bool // changed since the last save
	err     error
}

// NewModel returns an empty (freshly erased) drive with logical bytes of
// host-visible space.
func NewModel(g Geometry, logical int64) (*Model, error) {
	l, err := newLayout(g, logical)
	if err != nil {
		return nil, err
	}
	m := alloc(g, l)
	for i := int(l.nru) - 1; i >= 0; i-- {
		m.free = append(m.free, uint32(i))
	}
	if g.Preopen {
		for h := range g.Handles {
			m.open(h)
		}
	}
	m.dirty = true
	return m, nil
}

// alloc makes the arrays of a model with every page unmapped and no free
// list; NewModel and decode fill in the rest.
func alloc(g Geometry, l layout) *Model {
	m := &Model{g: g, l: l}
	m.l2p = make([]uint32, l.lpages)
	m.lh = make([]uint8, l.lpages)
	m.p2l = make([]uint32, uint64(l.nru)*uint64(l.ppru))
	for i := range m.l2p {
		m.l2p[i] = none
	}
	for i := range m.p2l {
		m.p2l[i] = none
	}
	m.units = make([]unit, l.nru)
	for i := range m.units {
		m.units[i] = unit{owner: -1, prev: -1, next: -1}
	}
	m.writers = make([]writer, l.writers)
	for i := range m.writers {
		m.writers[i].ru = -1
	}
	m.bucket = make([]int32, l.ppru+1)
	for i := range m.bucket {
		m.bucket[i] = -1
	}
	m.ctr.Handles = make([]HandleCounters, g.Handles)
	return m
}

// Geometry returns the model's geometry.
func (m *Model) Geometry() Geometry { return m.g }

// LogicalBytes is the host-visible size.
func (m *Model) LogicalBytes() int64 { return int64(m.l.lpages) * PageSize }

// PhysicalBytes is the modelled flash size.
func (m *Model) PhysicalBytes() int64 { return int64(m.l.nru) * int64(m.l.ppru) * PageSize }

// Units is the number of physical reclaim units.
func (m *Model) Units() int { return int(m.l.nru) }

// pages returns the logical pages [first, last] the byte range touches.
func (m *Model) pages(off, n int64) (first, last uint32, ok bool) {
	if n <= 0 || off < 0 || off+n > m.LogicalBytes() {
		return 0, 0, false
	}
	return uint32(off / PageSize), uint32((off + n - 1) / PageSize), true
}

// Write records a host write of n bytes at off through handle h (0-based;
// out-of-range handles count as handle 0). Every page the range touches is
// written whole, as on a drive with 4 KiB LBAs.
func (m *Model) Write(off, n int64, h int) error {
	first, last, ok := m.pages(off, n)
	if !ok {
		return nil
	}
	if h < 0 || h >= m.g.Handles {
		h = 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return m.err
	}
	// Foreground GC, as FEMU's ssd_write does before a write: whatever the
	// victims' share, until enough units are free. Bounded, in case no
	// victim gains anything.
	for i := uint32(0); m.l.fgUnits > 0 && uint32(len(m.free)) <= m.l.fgUnits && i < m.l.nru; i++ {
		v := m.victim(1)
		if v < 0 {
			break
		}
		m.relocate(v)
	}
	for lp := first; lp <= last; lp++ {
		if err := m.writePage(lp, h); err != nil {
			m.err = err
			return err
		}
	}
	bytes := uint64(last-first+1) * PageSize
	m.ctr.Host += bytes
	m.ctr.Media += bytes
	m.ctr.Handles[h].Host += bytes
	m.ctr.Handles[h].Media += bytes
	m.dirty = true
	m.background()
	return nil
}

// background is the GC a drive runs between commands (FEMU: after each
// one): one victim, only when few units are free and only one that gains
// enough.
func (m *Model) background() {
	if m.l.bgUnits == 0 || uint32(len(m.free)) > m.l.bgUnits {
		return
	}
	if v := m.victim(max(1, m.l.bgMinInvalid)); v >= 0 {
		m.relocate(v)
	}
}

func (m *Model) writePage(lp uint32, h int) error {
	if old := m.l2p[lp]; old != none {
		m.invalidate(old)
	}
	p, err := m.place(h, true)
	if err != nil {
		return err
	}
	m.l2p[lp] = p
	m.p2l[p] = lp
	m.lh[lp] = uint8(h)
	return nil
}

// Discard invalidates every page wholly inside [off, off+n): trimmed data
// is not copied by GC any more.
func (m *Model) Discard(off, n int64) {
	if n <= 0 || off < 0 || off+n > m.LogicalBytes() {
		return
	}
	first := (off + PageSize - 1) / PageSize
	end := (off + n) / PageSize
	m.mu.Lock()
	defer m.mu.Unlock()
	for lp := first; lp < end; lp++ {
		if p := m.l2p[lp]; p != none {
			m.invalidate(p)
			m.l2p[lp] = none
			m.dirty = true
		}
	}
	if m.err == nil {
		m.background()
	}
}

func (m *Model) invalidate(p uint32) {
	r := p / m.l.ppru
	m.p2l[p] = none
	u := &m.units[r]
	if u.state == ruClosed {
		m.unlink(int32(r))
		u.valid--
		m.link(int32(r))
		return
	}
	u.valid--
}

// link puts closed unit r at the head of its valid-count bucket.
func (m *Model) link(r int32) {
	u := &m.units[r]
	head := m.bucket[u.valid]
	u.prev, u.next = -1, head
	if head >= 0 {
		m.units[head].prev = r
	}
	m.bucket[u.valid] = r
	m.lowest = min(m.lowest, u.valid)
}

func (m *Model) unlink(r int32) {
	u := &m.units[r]
	if u.prev >= 0 {
		m.units[u.prev].next = u.next
	} else {
		m.bucket[u.valid] = u.next
	}
	if u.next >= 0 {
		m.units[u.next].prev = u.prev
	}
	u.prev, u.next = -1, -1
}

// place returns the next physical page of writer w, opening a new unit when
// it has none. Host writers (gc true) first let GC refill the free pool when
// they need a unit; GC destinations draw on the reserve. With Preopen a host
// writer takes its next unit as soon as one fills, as drives do.
func (m *Model) place(w int, gc bool) (uint32, error) {
	wr := &m.writers[w]
	if wr.ru >= 0 && wr.wp == m.l.ppru { // a full unit from a state saved before units closed when full
		m.close(wr.ru)
		wr.ru = -1
	}
	if wr.ru < 0 {
		if err := m.refill(w, gc); err != nil {
			return 0, err
		}
	}
	p := uint32(wr.ru)*m.l.ppru + wr.wp
	wr.wp++
	m.units[wr.ru].valid++
	if wr.wp == m.l.ppru {
		m.close(wr.ru)
		wr.ru = -1
		if m.g.Preopen && w < m.g.Handles {
			// The page is placed; a unit that cannot be had now is
			// asked for again at the next write.
			_ = m.refill(w, gc)
		}
	}
	return p, nil
}

// refill opens a free unit for writer w, collecting first when gc is set
// and the pool is down to the reserve.
func (m *Model) refill(w int, gc bool) error {
	if gc {
		if err := m.collect(); err != nil {
			return err
		}
	}
	if len(m.free) == 0 {
		return errStuck
	}
	m.open(w)
	return nil
}

// open gives writer w the free unit on top of the stack.
func (m *Model) open(w int) {
	r := m.free[len(m.free)-1]
	m.free = m.free[:len(m.free)-1]
	m.units[r].state = ruOpen
	m.units[r].owner = int16(w)
	m.writers[w] = writer{ru: int32(r), wp: 0}
}

func (m *Model) close(r int32) {
	m.seq++
	u := &m.units[r]
	u.state = ruClosed
	u.closed = m.seq
	m.link(r)
}

// collect runs GC until more than gcReserve units are free.
func (m *Model) collect() error {
	for len(m.free) <= gcReserve {
		v := m.victim(1)
		if v < 0 {
			if len(m.free) > 0 {
				return nil // nothing to gain now; the reserve still serves
			}
			return errStuck
		}
		m.relocate(v)
	}
	return nil
}

// victim picks the closed unit to collect among those with at least
// minInvalid invalid pages, -1 if there is none.
func (m *Model) victim(minInvalid uint32) int32 {
	if minInvalid > m.l.ppru {
		return -1
	}
	maxValid := m.l.ppru - minInvalid
	if m.g.GC == "cost-benefit" {
		// Cost-benefit (victim.Score); an empty unit wins outright.
		best, bestScore := int32(-1), -1.0
		for i := range m.units {
			u := &m.units[i]
			if u.state != ruClosed || u.valid > maxValid {
				continue
			}
			if u.valid == 0 {
				return int32(i)
			}
			score := victim.Score(m.seq-u.closed+1, uint64(u.valid), uint64(m.l.ppru))
			if score > bestScore {
				best, bestScore = int32(i), score
			}
		}
		return best
	}
	// Greedy: fewest valid pages. The buckets and their lowest non-empty
	// index make this O(1) per page written, amortised, even when it runs
	// after every command.
	for v := m.lowest; v <= maxValid; v++ {
		if m.bucket[v] >= 0 {
			m.lowest = v
			return m.bucket[v]
		}
	}
	if maxValid+1 > m.lowest {
		m.lowest = maxValid + 1
	}
	return -1
}

// relocate copies the victim's valid pages to GC destinations and erases it.
func (m *Model) relocate(v int32) {
	m.unlink(v)
	m.units[v].state = ruOpen // out of the buckets while its pages move
	base := uint32(v) * m.l.ppru
	for p := base; p < base+m.l.ppru; p++ {
		lp := m.p2l[p]
		if lp == none {
			continue
		}
		h := int(m.lh[lp])
		w := m.g.Handles // initial isolation: one shared GC destination
		if m.g.Isolation == "persistent" {
			w = m.g.Handles + h
		}
		np, err := m.place(w, false)
		if err != nil {
			// Cannot happen with a validated layout (the victim frees
			// more than its copies take); leave the page where it is.
			continue
		}
		m.p2l[p] = none
		m.units[v].valid--
		m.p2l[np] = lp
		m.l2p[lp] = np
		m.ctr.Media += PageSize
		m.ctr.GCCopied += PageSize
		m.ctr.Handles[h].Media += PageSize
	}
	u := &m.units[v]
	if u.valid != 0 {
		// Pages left behind: keep the unit closed rather than lose them.
		u.state = ruClosed
		m.link(v)
		return
	}
	u.state = ruFree
	u.owner = -1
	u.erases++
	m.ctr.Erased += uint64(m.l.ppru) * PageSize
	m.free = append(m.free, uint32(v))
}

// Precondition leaves the drive as one that has been written before (mode
// "seq": every logical page once, in order; "random": then one logical
// capacity of uniform random 4 KiB overwrites, seeded by seed), not one
// fresh from a whole-device discard, and zeroes the counters so that they
// count only what follows. "none" does nothing.
func (m *Model) Precondition(mode string, seed uint64) error {
	switch mode {
	case "none":
		return nil
	case "seq", "random":
	default:
		return fmt.Errorf("precondition=%s: want none, seq or random: %w", mode, ErrGeometry)
	}
	size, unit := m.LogicalBytes(), int64(m.l.ppru)*PageSize
	for off := int64(0); off < size; off += unit {
		if err := m.Write(off, min(unit, size-off), 0); err != nil {
			return fmt.Errorf("precondition: %w", err)
		}
	}
	if mode == "random" {
		rng := rand.New(rand.NewPCG(seed, 0x5eed))
		for range m.l.lpages {
			if err := m.Write(rng.Int64N(int64(m.l.lpages))*PageSize, PageSize, 0); err != nil {
				return fmt.Errorf("precondition: %w", err)
			}
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ctr = Counters{Handles: make([]HandleCounters, m.g.Handles)}
	m.dirty = true
	return nil
}

// Counters returns a snapshot of the counters.
func (m *Model) Counters() Counters {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.ctr
	c.Handles = append([]HandleCounters(nil), m.ctr.Handles...)
	for h := range c.Handles {
		if w := m.writers[h]; w.ru >= 0 {
			c.Handles[h].Avail = uint64(m.l.ppru-w.wp) * PageSize
		} else {
			c.Handles[h].Avail = 0
		}
	}
	return c
}

// Err is the error that stopped the model, if any.
func (m *Model) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return fmt.Errorf("model stopped counting: %w", m.err)
	}
	return nil
}
