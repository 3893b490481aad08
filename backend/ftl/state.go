package ftl

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrState means a saved model state is damaged or does not fit the drive.
var ErrState = errors.New("ftl state invalid")

// stateBound is the most bytes encode can produce for a layout.
func stateBound(l layout, handles int) int64 {
	return 5*4 + 5*8 + int64(handles)*16 + int64(l.writers)*8 + int64(l.nru)*15 + int64(l.lpages)*5
}

// snapshot is what encode serialises, copied under the model's lock: the
// copies are a few memmoves, while the serialisation of a large drive's map
// takes milliseconds that host writes should not wait for.
type snapshot struct {
	l       layout
	handles int
	ctr     Counters
	seq     uint64
	writers []writer
	units   []unit
	l2p     []uint32
	lh      []uint8
}

func (m *Model) snapshot() snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	// What decode cannot know, the order of the free list and of the
	// units within a greedy bucket (tie-breaks), is made decode's order
	// here, so that a model loaded from this state continues exactly as
	// this one does (a replay does the same at the trace's save records).
	m.canonical()
	s := snapshot{l: m.l, handles: m.g.Handles, ctr: m.ctr, seq: m.seq,
		writers: append([]writer(nil), m.writers...), units: append([]unit(nil), m.units...),
		l2p: append([]uint32(nil), m.l2p...), lh: append([]uint8(nil), m.lh...)}
	s.ctr.Handles = append([]HandleCounters(nil), m.ctr.Handles...)
	m.dirty = false
	return s
}

// canonical rebuilds the free list and the greedy buckets in the order
// decode builds them.
func (m *Model) canonical() {
	m.free = m.free[:0]
	for i := range m.bucket {
		m.bucket[i] = -1
	}
	m.lowest = 0
	for r := int(m.l.nru) - 1; r >= 0; r-- {
		switch m.units[r].state {
		case ruFree:
			m.free = append(m.free, uint32(r))
		case ruClosed:
			m.link(int32(r))
		}
	}
}

// encode serialises the model: dimensions, counters, writers, units, and
// the logical-to-physical map with each page's last handle. The reverse map,
// valid counts, buckets and free list are derived, so decode rebuilds them.
func (m *Model) encode() []byte { return m.snapshot().encode() }

func (s snapshot) encode() []byte {
	le := binary.LittleEndian
	b := make([]byte, 0, stateBound(s.l, s.handles))
	for _, v := range []uint32{s.l.lpages, s.l.ppru, s.l.nru, uint32(s.l.writers), uint32(s.handles)} {
		b = le.AppendUint32(b, v)
	}
	for _, v := range []uint64{s.ctr.Host, s.ctr.Media, s.ctr.Erased, s.ctr.GCCopied, s.seq} {
		b = le.AppendUint64(b, v)
	}
	for _, h := range s.ctr.Handles {
		b = le.AppendUint64(b, h.Host)
		b = le.AppendUint64(b, h.Media)
	}
	for _, w := range s.writers {
		b = le.AppendUint32(b, uint32(w.ru))
		b = le.AppendUint32(b, w.wp)
	}
	for _, u := range s.units {
		b = append(b, u.state)
		b = le.AppendUint16(b, uint16(u.owner))
		b = le.AppendUint32(b, u.erases)
		b = le.AppendUint64(b, u.closed)
	}
	for _, p := range s.l2p {
		b = le.AppendUint32(b, p)
	}
	return append(b, s.lh...)
}

// decode rebuilds a model from encode's bytes, checking every field
// against the geometry so that a damaged state is refused, never trusted.
func decode(g Geometry, logical int64, b []byte) (*Model, error) {
	l, err := newLayout(g, logical)
	if err != nil {
		return nil, err
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf(format+": %w", append(a, ErrState)...)
	}
	if int64(len(b)) != stateBound(l, g.Handles) {
		return nil, bad("state of %d bytes, want %d", len(b), stateBound(l, g.Handles))
	}
	le := binary.LittleEndian
	u32 := func() uint32 { v := le.Uint32(b); b = b[4:]; return v }
	u64 := func() uint64 { v := le.Uint64(b); b = b[8:]; return v }
	if lp, pp, nr, wr, hs := u32(), u32(), u32(), u32(), u32(); lp != l.lpages || pp != l.ppru || nr != l.nru || int(wr) != l.writers || int(hs) != g.Handles {
		return nil, bad("state dimensions %d/%d/%d/%d/%d do not match the geometry", lp, pp, nr, wr, hs)
	}
	m := alloc(g, l)
	m.ctr.Host, m.ctr.Media, m.ctr.Erased, m.ctr.GCCopied, m.seq = u64(), u64(), u64(), u64(), u64()
	for h := range m.ctr.Handles {
		m.ctr.Handles[h].Host, m.ctr.Handles[h].Media = u64(), u64()
	}
	for w := range m.writers {
		ru, wp := int32(u32()), u32()
		if ru < -1 || ru >= int32(l.nru) || wp > l.ppru {
			return nil, bad("writer %d: unit %d, page %d", w, ru, wp)
		}
		m.writers[w] = writer{ru: ru, wp: wp}
	}
	for r := range m.units {
		u := &m.units[r]
		u.state = b[0]
		u.owner = int16(le.Uint16(b[1:]))
		u.erases = le.Uint32(b[3:])
		u.closed = le.Uint64(b[7:])
		b = b[15:]
		if u.state > ruClosed || u.owner < -1 || int(u.owner) >= l.writers || u.closed > m.seq {
			return nil, bad("unit %d: state %d owner %d", r, u.state, u.owner)
		}
		if u.state == ruOpen && (u.owner < 0 || m.writers[u.owner].ru != int32(r)) {
			return nil, bad("unit %d open but not its writer's", r)
		}
	}
	for w, wr := range m.writers {
		if wr.ru >= 0 && (m.units[wr.ru].state != ruOpen || int(m.units[wr.ru].owner) != w) {
			return nil, bad("writer %d: unit %d not open for it", w, wr.ru)
		}
	}
	for lp := range m.l2p {
		p := u32()
		if p == none {
			continue
		}
		r := p / l.ppru
		if r >= l.nru || m.p2l[p] != none {
			return nil, bad("logical page %d: physical page %d out of range or shared", lp, p)
		}
		u := &m.units[r]
		if u.state == ruFree || (u.state == ruOpen && p%l.ppru >= m.writers[u.owner].wp) {
			return nil, bad("logical page %d: physical page %d not written", lp, p)
		}
		m.l2p[lp] = p
		m.p2l[p] = uint32(lp)
		u.valid++
	}
	copy(m.lh, b)
	for lp, h := range m.lh {
		if int(h) >= g.Handles {
			return nil, bad("logical page %d: handle %d", lp, h)
		}
	}
	for r := int(l.nru) - 1; r >= 0; r-- {
		switch m.units[r].state {
		case ruFree:
			m.free = append(m.free, uint32(r))
		case ruClosed:
			m.link(int32(r))
		}
	}
	return m, nil
}
