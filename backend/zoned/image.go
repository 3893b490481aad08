package zoned

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/streamfs/streamfs/backend"
)

// Image layout: the zones first, at their own offsets, so the data is an
// ordinary image; then two state slots; then a 4 KiB label in the last
// block. The filesystem sees only the zones (Size).
//
//	[0, zones*zoneSize)          zones
//	[data, data+slot)            state slot 0
//	[data+slot, data+2*slot)     state slot 1
//	[size-4096, size)            label
//
// The label is written once by Format. The state is every sequential
// zone's written length and full flag, plus the counters; saves alternate
// between the slots, each checksummed with a sequence number, so a torn
// save leaves the other slot whole.
//
// Crash consistency. On a drive the write pointer moves with the write; here
// it is saved separately, so the order of the two decides what a crash can
// leave. A save first flushes the data, then writes the state, then flushes
// again: a saved write pointer never covers data that is not durable. Bytes
// past a zone's saved write pointer may hold anything after a crash (a
// write that landed without its save, data of before a reset), and reads
// return zeroes there, whatever the media holds. A reset is saved before
// its data is discarded, so no saved state claims discarded data either.
// Flush saves whenever a write pointer moved since the last save, so what
// Flush acknowledged survives with its write pointer.
const (
	labelSize    = 4096
	slotHeader   = 64
	labelMagic   = "SFSZONED"
	slotMagic    = "SFSZNSST"
	imageVersion = 1
	zoneRecSize  = 9  // written length (8), flags (1)
	nCounters    = 10 // fields of Counters in the state
	flagFull     = 1  // finished (or written to capacity)
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrState means the label or saved state of a zoned image is damaged or
// does not fit it. Unlike the FTL model's counters, the state is the
// device's truth (what reads return), so it is refused, never guessed.
var ErrState = errors.New("zoned: image state invalid")

// Label is what the last block of a zoned image says.
type Label struct {
	Geometry Geometry
	Zones    int   // zones in all, conventional included
	SlotSize int64 // bytes per state slot
	Nonce    uint64
}

// DataBytes is the size of the zoned space.
func (l Label) DataBytes() int64 { return int64(l.Zones) * l.Geometry.ZoneSize }

func (l Label) slotOff(i uint64) int64 { return l.DataBytes() + int64(i%2)*l.SlotSize }

func slotSizeFor(zones int) int64 {
	n := int64(slotHeader + nCounters*8 + zones*zoneRecSize)
	return (n + 4095) &^ 4095
}

func (l Label) encode() []byte {
	b := make([]byte, labelSize)
	le := binary.LittleEndian
	copy(b, labelMagic)
	g := l.Geometry
	le.PutUint32(b[8:], imageVersion)
	le.PutUint64(b[16:], l.Nonce)
	le.PutUint64(b[24:], uint64(g.ZoneSize))
	le.PutUint64(b[32:], uint64(g.Cap()))
	le.PutUint32(b[40:], uint32(l.Zones))
	le.PutUint32(b[44:], uint32(g.Conv))
	le.PutUint32(b[48:], uint32(g.MaxOpen))
	le.PutUint32(b[52:], uint32(g.MaxActive))
	le.PutUint32(b[56:], uint32(g.Sector))
	le.PutUint64(b[64:], uint64(l.SlotSize))
	le.PutUint32(b[labelSize-4:], crc32.Checksum(b[:labelSize-4], castagnoli))
	return b
}

// errNoLabel means the media is not a zoned image.
var errNoLabel = errors.New("no zoned label")

func decodeLabel(b []byte, mediaSize int64) (Label, error) {
	if len(b) != labelSize || string(b[:8]) != labelMagic {
		return Label{}, errNoLabel
	}
	le := binary.LittleEndian
	bad := func(format string, a ...any) (Label, error) {
		return Label{}, fmt.Errorf("zoned label: "+format+": %w", append(a, ErrState)...)
	}
	if crc32.Checksum(b[:labelSize-4], castagnoli) != le.Uint32(b[labelSize-4:]) {
		return bad("checksum mismatch")
	}
	if v := le.Uint32(b[8:]); v != imageVersion {
		return bad("version %d, this build reads %d", v, imageVersion)
	}
	l := Label{Nonce: le.Uint64(b[16:]), Zones: int(le.Uint32(b[40:])), SlotSize: int64(le.Uint64(b[64:]))}
	g := Geometry{ZoneSize: int64(le.Uint64(b[24:])), ZoneCap: int64(le.Uint64(b[32:])),
		Conv: int(le.Uint32(b[44:])), MaxOpen: int(le.Uint32(b[48:])), MaxActive: int(le.Uint32(b[52:])),
		Sector: int(le.Uint32(b[56:]))}
	if g.ZoneCap == g.ZoneSize {
		g.ZoneCap = 0
	}
	if err := g.Validate(); err != nil {
		return bad("%v", err)
	}
	l.Geometry = g
	if l.Zones <= 0 || l.Zones > 1<<24 || g.Conv > l.Zones || l.SlotSize != slotSizeFor(l.Zones) ||
		l.DataBytes()+2*l.SlotSize+labelSize > mediaSize {
		return bad("%d zones of %d bytes and slots of %d do not fit %d bytes", l.Zones, g.ZoneSize, l.SlotSize, mediaSize)
	}
	return l, nil
}

// readLabel reads the label of media; ok is false when it has none.
func readLabel(media backend.Device) (Label, bool, error) {
	size := media.Size()
	if size < labelSize {
		return Label{}, false, nil
	}
	b := backend.AlignedBuf(labelSize)
	if err := media.ReadAt(b, size-labelSize); err != nil {
		return Label{}, false, fmt.Errorf("read zoned label: %w", err)
	}
	l, err := decodeLabel(b, size)
	if errors.Is(err, errNoLabel) {
		return Label{}, false, nil
	}
	if err != nil {
		return Label{}, true, err
	}
	return l, true, nil
}

// state is what a slot saves.
type state struct {
	ctr   Counters
	fill  []int64 // per zone: bytes written from its start
	full  []bool  // per zone: finished or written to capacity
	zones int
}

func (s state) encode(l Label, seq uint64) []byte {
	b := backend.AlignedBuf(int(l.SlotSize))
	le := binary.LittleEndian
	p := b[slotHeader:]
	for i, v := range s.ctr.fields() {
		le.PutUint64(p[8*i:], v)
	}
	p = p[nCounters*8:]
	for z := range s.zones {
		le.PutUint64(p[z*zoneRecSize:], uint64(s.fill[z]))
		if s.full[z] {
			p[z*zoneRecSize+8] = flagFull
		}
	}
	n := nCounters*8 + s.zones*zoneRecSize
	copy(b, slotMagic)
	le.PutUint64(b[8:], l.Nonce)
	le.PutUint64(b[16:], seq)
	le.PutUint32(b[24:], uint32(s.zones))
	le.PutUint32(b[28:], uint32(n))
	le.PutUint32(b[32:], crc32.Checksum(b[slotHeader:slotHeader+n], castagnoli))
	le.PutUint32(b[36:], crc32.Checksum(b[:36], castagnoli))
	return b
}

// decodeSlot checks a slot against the label and returns its sequence and
// state; every field is checked, so a damaged slot is refused.
func decodeSlot(b []byte, l Label) (uint64, state, error) {
	le := binary.LittleEndian
	bad := func(format string, a ...any) (uint64, state, error) {
		return 0, state{}, fmt.Errorf(format+": %w", append(a, ErrState)...)
	}
	if string(b[:8]) != slotMagic || crc32.Checksum(b[:36], castagnoli) != le.Uint32(b[36:]) {
		return bad("no state")
	}
	if le.Uint64(b[8:]) != l.Nonce {
		return bad("state of another format")
	}
	zones, n := int(le.Uint32(b[24:])), int(le.Uint32(b[28:]))
	if zones != l.Zones || n != nCounters*8+zones*zoneRecSize || slotHeader+n > len(b) {
		return bad("state of %d zones in %d bytes", zones, n)
	}
	p := b[slotHeader : slotHeader+n]
	if crc32.Checksum(p, castagnoli) != le.Uint32(b[32:]) {
		return bad("checksum mismatch")
	}
	var f [nCounters]uint64
	for i := range f {
		f[i] = le.Uint64(p[8*i:])
	}
	s := state{ctr: countersFrom(f), fill: make([]int64, zones), full: make([]bool, zones), zones: zones}
	p = p[nCounters*8:]
	capacity := l.Geometry.Cap()
	for z := range zones {
		fill, flags := le.Uint64(p[z*zoneRecSize:]), p[z*zoneRecSize+8]
		conv := z < l.Geometry.Conv
		if flags&^flagFull != 0 || fill > uint64(capacity) || fill%uint64(l.Geometry.Sector) != 0 ||
			(conv && (fill != 0 || flags != 0)) {
			return bad("zone %d: written %d, flags %#x", z, fill, flags)
		}
		s.fill[z], s.full[z] = int64(fill), flags&flagFull != 0 || int64(fill) == capacity
	}
	return le.Uint64(b[16:]), s, nil
}

// loadState reads both slots and returns the newest valid one.
func loadState(media backend.Device, l Label) (uint64, state, error) {
	var (
		best    state
		bestSeq uint64
		found   bool
		errs    []error
	)
	b := backend.AlignedBuf(int(l.SlotSize))
	for i := range uint64(2) {
		if err := media.ReadAt(b, l.slotOff(i)); err != nil {
			errs = append(errs, fmt.Errorf("slot %d: %w", i, err))
			continue
		}
		seq, s, err := decodeSlot(b, l)
		if err != nil {
			errs = append(errs, fmt.Errorf("slot %d: %w", i, err))
			continue
		}
		if seq%2 != i {
			errs = append(errs, fmt.Errorf("slot %d: sequence %d belongs to the other slot: %w", i, seq, ErrState))
			continue
		}
		if !found || seq > bestSeq {
			best, bestSeq, found = s, seq, true
		}
	}
	if !found {
		return 0, state{}, fmt.Errorf("zoned image: no valid state slot: %w", errors.Join(errs...))
	}
	return bestSeq, best, nil
}

// Format makes media a zoned image with geometry g: as many zones as fit
// beside the state slots and the label, all empty. The slots are written
// and flushed before the label, so a torn format leaves no label.
func Format(media backend.Device, g Geometry) (Label, error) {
	if err := g.Validate(); err != nil {
		return Label{}, err
	}
	size := media.Size()
	// Size the slots for as many zones as the whole media could hold: an
	// upper bound, so the zone count can follow from what is left.
	upper := slotSizeFor(int(min(size/g.ZoneSize, 1<<24)))
	zones := (size - 2*upper - labelSize) / g.ZoneSize
	if zones <= int64(g.Conv) || zones > 1<<24 {
		return Label{}, fmt.Errorf("zoned format: %d bytes hold %d zones of %d bytes, need more than the %d conventional: %w",
			size, max(zones, 0), g.ZoneSize, g.Conv, ErrGeometry)
	}
	var nb [8]byte
	if _, err := rand.Read(nb[:]); err != nil {
		return Label{}, fmt.Errorf("zoned format: %w", err)
	}
	l := Label{Geometry: g, Zones: int(zones), SlotSize: slotSizeFor(int(zones)), Nonce: binary.LittleEndian.Uint64(nb[:])}
	empty := state{fill: make([]int64, zones), full: make([]bool, zones), zones: int(zones)}
	// Slot 1 holds sequence 1; slot 0 is cleared so no older state wins.
	if err := media.WriteAt(backend.AlignedBuf(int(l.SlotSize)), l.slotOff(0), backend.StreamMeta); err != nil {
		return Label{}, fmt.Errorf("zoned format: clear slot: %w", err)
	}
	if err := media.WriteAt(empty.encode(l, 1), l.slotOff(1), backend.StreamMeta); err != nil {
		return Label{}, fmt.Errorf("zoned format: save state: %w", err)
	}
	if err := media.Flush(); err != nil {
		return Label{}, fmt.Errorf("zoned format: %w", err)
	}
	if err := media.WriteAt(l.encode(), size-labelSize, backend.StreamMeta); err != nil {
		return Label{}, fmt.Errorf("zoned format: write label: %w", err)
	}
	if err := media.Flush(); err != nil {
		return Label{}, fmt.Errorf("zoned format: %w", err)
	}
	// The old contents of the zones are invisible (every write pointer is
	// at its zone's start); discarding them only gives the space back.
	if err := media.Discard(0, l.DataBytes()); err != nil {
		return Label{}, fmt.Errorf("zoned format: discard: %w", err)
	}
	return l, nil
}
