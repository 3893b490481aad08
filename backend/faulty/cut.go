package faulty

import (
	"encoding/binary"
	"fmt"

	"github.com/streamfs/streamfs/backend"
)

// sectorUnit is the tear granularity: unit if positive, else the inner
// device's sector size.
func (d *Device) sectorUnit(unit int) int64 {
	if unit > 0 {
		return int64(unit)
	}
	return int64(d.inner.SectorSize())
}

// resolveLocked decides, as a power cut with opt would, what of pending
// (the unflushed writes, in issue order) stays on dst, and makes dst so.
// dst is the inner device or a copy of it: on entry it holds every pending
// write.
func (d *Device) resolveLocked(dst backend.Device, pending []record, opt CutOptions) error {
	if opt.Reorder {
		return d.resolveReorderedLocked(dst, pending, opt)
	}
	keep := 0
	if opt.KeepRandomPrefix {
		keep = d.rng.IntN(len(pending) + 1)
	}
	for i := len(pending) - 1; i >= keep; i-- {
		r := pending[i]
		if err := dst.WriteAt(r.old, r.off, 0); err != nil {
			return fmt.Errorf("roll back %d bytes at %d: %w", len(r.old), r.off, err)
		}
	}
	if !opt.TearLast || keep == 0 {
		return nil
	}
	// With the later writes rolled back, the media holds the last kept
	// write whole; restoring its old bytes past the tear point tears it.
	r := pending[keep-1]
	unit := d.sectorUnit(opt.TearUnit)
	end := r.off + int64(len(r.old))
	cut := d.tearPoint(r.off, int64(len(r.old)), unit)
	if cut < end {
		if err := dst.WriteAt(r.old[cut-r.off:], cut, 0); err != nil {
			return fmt.Errorf("tear %d bytes at %d: %w", end-cut, cut, err)
		}
	}
	if opt.Garbage && cut < end {
		g := min((cut/unit+1)*unit, end) // the sector being written at the cut
		if err := dst.WriteAt(d.garbageLocked(g-cut), cut, 0); err != nil {
			return fmt.Errorf("garble %d bytes at %d: %w", g-cut, cut, err)
		}
	}
	return nil
}

// resolveReorderedLocked is resolveLocked for opt.Reorder: roll every
// pending write back, then apply a random subset of them in a random order,
// tearing as opt says.
func (d *Device) resolveReorderedLocked(dst backend.Device, pending []record, opt CutOptions) error {
	// Newest first, what the media holds in a write's range just before
	// its rollback is exactly what that write left there.
	after := make([][]byte, len(pending))
	for i := len(pending) - 1; i >= 0; i-- {
		r := pending[i]
		buf := make([]byte, len(r.old))
		if err := dst.ReadAt(buf, r.off); err != nil {
			return fmt.Errorf("read back %d bytes at %d: %w", len(buf), r.off, err)
		}
		after[i] = buf
		if err := dst.WriteAt(r.old, r.off, 0); err != nil {
			return fmt.Errorf("roll back %d bytes at %d: %w", len(r.old), r.off, err)
		}
	}
	// A landing chance drawn per cut (rather than a fixed 1/2) makes
	// "nothing landed" and "everything landed" common with many writes.
	p := d.rng.Float64()
	var order []int
	for i := range pending {
		if d.rng.Float64() < p {
			order = append(order, i)
		}
	}
	d.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	unit := d.sectorUnit(opt.TearUnit)
	for k, i := range order {
		torn := opt.TearLast && k == len(order)-1
		if opt.TearAny && d.rng.IntN(2) == 0 {
			torn = true
		}
		off := pending[i].off
		var err error
		if torn {
			err = d.landPartlyLocked(dst, after[i], off, 0, unit, opt.Garbage)
		} else {
			err = dst.WriteAt(after[i], off, 0)
		}
		if err != nil {
			return fmt.Errorf("replay %d bytes at %d: %w", len(after[i]), off, err)
		}
	}
	return nil
}

// tearPoint picks where a torn write stops: the write's start (nothing
// landed) or a unit boundary strictly inside it. The write never lands
// whole: that would not be a tear.
func (d *Device) tearPoint(off, n, unit int64) int64 {
	first := (off/unit + 1) * unit // first boundary after off
	end := off + n
	choices := int64(1)
	if first < end {
		choices += (end-1-first)/unit + 1
	}
	k := d.rng.Int64N(choices)
	if k == 0 {
		return off
	}
	return first + (k-1)*unit
}

// landPartlyLocked writes a random proper subset (possibly empty) of the
// unit-sized pieces of data at off to dst; with garbage, one piece that did
// not land gets random bytes instead. Pieces follow dst's absolute unit
// boundaries, so an unaligned write has short first and last pieces.
func (d *Device) landPartlyLocked(dst backend.Device, data []byte, off int64, stream uint32, unit int64, garbage bool) error {
	end := off + int64(len(data))
	if end == off {
		return nil
	}
	// bounds[i], bounds[i+1] delimit piece i.
	bounds := []int64{off}
	for b := (off/unit + 1) * unit; b < end; b += unit {
		bounds = append(bounds, b)
	}
	bounds = append(bounds, end)
	n := len(bounds) - 1
	q := d.rng.Float64()
	landed := make([]bool, n)
	all := true
	for i := range landed {
		landed[i] = d.rng.Float64() < q
		all = all && landed[i]
	}
	if all {
		landed[d.rng.IntN(n)] = false
	}
	for i := 0; i < n; {
		if !landed[i] {
			i++
			continue
		}
		j := i
		for j < n && landed[j] {
			j++
		}
		s, e := bounds[i], bounds[j]
		if err := dst.WriteAt(data[s-off:e-off], s, stream); err != nil {
			return fmt.Errorf("land %d bytes at %d: %w", e-s, s, err)
		}
		i = j
	}
	if !garbage {
		return nil
	}
	var unlanded []int
	for i, ok := range landed {
		if !ok {
			unlanded = append(unlanded, i)
		}
	}
	i := unlanded[d.rng.IntN(len(unlanded))]
	s, e := bounds[i], bounds[i+1]
	if err := dst.WriteAt(d.garbageLocked(e-s), s, stream); err != nil {
		return fmt.Errorf("garble %d bytes at %d: %w", e-s, s, err)
	}
	return nil
}

// garbageLocked returns n random bytes from the seeded source.
func (d *Device) garbageLocked(n int64) []byte {
	g := make([]byte, (n+7)/8*8)
	for i := 0; i < len(g); i += 8 {
		binary.LittleEndian.PutUint64(g[i:], d.rng.Uint64())
	}
	return g[:n]
}
