package meta

import (
	"bytes"

	"github.com/streamfs/streamfs/fs/format"
	"github.com/streamfs/streamfs/fs/meta/tree"
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

// A file's extents are keys (ino, lblk) in the tree of the inode's AG, so
// finding, inserting and splitting one is O(log n) whatever the file's
// size. Neighbours that continue each other on the device with equal flags
// and stream are merged, so sequential writes keep one extent.

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

func mergeable(a, b Extent) bool {
	return a.End() == b.LBlk && a.PBlk+a.Len == b.PBlk && a.Flags == b.Flags && a.Stream == b.Stream
}

func decodeExtent(k, v []byte) (Extent, error) {
	lblk, n, pblk, flags, stream, err := format.DecodeExtent(k, v)
	return Extent{LBlk: lblk, Len: n, PBlk: pblk, Flags: flags, Stream: stream}, err
}

func extentVal(e Extent) []byte { return format.ExtentVal(e.Len, e.PBlk, e.Flags, e.Stream) }

// seeker is what a tree and a transaction share for reading.
type seeker interface {
	SeekLE(key []byte) (k, v []byte, ok bool, err error)
	Ascend(from []byte, fn func(k, v []byte) bool) error
	AscendLE(key []byte, fn func(k, v []byte) bool) error
}

// extentsIn returns ino's extents intersecting [lblk, lblk+n), unclipped.
func extentsIn(r seeker, ino, lblk, n uint64) ([]Extent, error) {
	c := newExtentRange(ino, lblk, n)
	var out []Extent
	var derr error
	err := r.AscendLE(format.ExtentKey(ino, lblk), func(k, v []byte) bool {
		more, err := c.take(k, v, &out)
		derr = err
		return more
	})
	if err == nil {
		err = derr
	}
	return out, err
}

// extentRange picks ino's extents intersecting [lblk, end), unclipped,
// out of an AscendLE that starts at ino's extent key at lblk.
type extentRange struct {
	prefix    [10]byte // format.InoKindPrefix, held here so it needs no allocation
	lblk, end uint64
}

func newExtentRange(ino, lblk, n uint64) extentRange {
	end := lblk + n
	if end < lblk {
		end = ^uint64(0)
	}
	c := extentRange{lblk: lblk, end: end}
	copy(c.prefix[:], format.InoKindPrefix(ino, format.KindExtent))
	return c
}

// take looks at one entry of the walk and appends it to out if it is one
// of the extents; more says the walk goes on. Keys before ino's extents
// (AscendLE may start at another inode's or kind's key) are skipped.
func (c *extentRange) take(k, v []byte, out *[]Extent) (more bool, err error) {
	if !bytes.HasPrefix(k, c.prefix[:]) {
		return bytes.Compare(k, c.prefix[:]) < 0, nil
	}
	e, err := decodeExtent(k, v)
	if err != nil {
		return false, err
	}
	if e.LBlk >= c.end {
		return false, nil
	}
	if e.End() > c.lblk {
		// Resliced within the capacity: an append through out would
		// move a caller's buffer to the heap on every lookup.
		n := len(*out)
		if n == cap(*out) {
			grown := make([]Extent, n, 2*n+4)
			copy(grown, *out)
			*out = grown
		}
		*out = (*out)[:n+1]
		(*out)[n] = e
	}
	return true, nil
}

// ascendExtents calls fn for ino's extents starting at or after file block
// from, in order, until fn returns false.
func ascendExtents(r seeker, ino, from uint64, fn func(Extent) bool) error {
	return walkExtents(r.Ascend, ino, from, fn)
}

// ascendExtentsLE is ascendExtents from the last extent starting at or
// before file block lblk (the one that may contain it), with one descent.
func ascendExtentsLE(r seeker, ino, lblk uint64, fn func(Extent) bool) error {
	return walkExtents(r.AscendLE, ino, lblk, fn)
}

// walkExtents runs ascend (Ascend or AscendLE) from ino's extent key at
// lblk, passing fn ino's extents and skipping keys before them (AscendLE
// may start at another inode's or kind's key).
func walkExtents(ascend func([]byte, func(k, v []byte) bool) error, ino, lblk uint64, fn func(Extent) bool) error {
	prefix := format.InoKindPrefix(ino, format.KindExtent)
	var derr error
	err := ascend(format.ExtentKey(ino, lblk), func(k, v []byte) bool {
		if !bytes.HasPrefix(k, prefix) {
			return bytes.Compare(k, prefix) < 0
		}
		e, err := decodeExtent(k, v)
		if err != nil {
			derr = err
			return false
		}
		return fn(e)
	})
	if err == nil {
		err = derr
	}
	return err
}

// extentsAround looks at ino's extents near file blocks [lo, hi): prev is
// the last one starting before lo, next the first one starting at or after
// hi, and overlaps says whether any extent maps a block of [lo, hi). One
// descent (Around) and no copies: it runs for every allocating write.
func extentsAround(tx *tree.Tx, ino, lo, hi uint64) (prev Extent, hasPrev, overlaps bool, next Extent, hasNext bool, err error) {
	// The last key before ino's extents at lo: (ino, lo-1), or for lo 0 the
	// kind prefix, which sorts before all of them.
	key := format.ExtentKey(ino, lo-1)
	if lo == 0 {
		key = key[:10]
	}
	before, after, err := tx.Around(key)
	if err != nil {
		return
	}
	// ino's extent keys start with the 10-byte kind prefix (decodeExtent
	// rejects a malformed one).
	ours := func(k []byte) bool { return bytes.HasPrefix(k, key[:10]) }
	if before.OK && ours(before.Key) {
		if prev, err = decodeExtent(before.Key, before.Val); err != nil {
			return
		}
		hasPrev = true
		if prev.End() > lo {
			overlaps = true
			return
		}
	}
	if after.OK && ours(after.Key) {
		var e Extent
		if e, err = decodeExtent(after.Key, after.Val); err != nil {
			return
		}
		if e.LBlk < hi {
			overlaps = true
		} else {
			next, hasNext = e, true
		}
	}
	return
}

// extentBefore returns ino's last extent starting before lblk.
func extentBefore(r seeker, ino, lblk uint64) (Extent, bool, error) {
	if lblk == 0 {
		return Extent{}, false, nil
	}
	k, v, ok, err := r.SeekLE(format.ExtentKey(ino, lblk-1))
	if err != nil || !ok || !bytes.HasPrefix(k, format.InoKindPrefix(ino, format.KindExtent)) {
		return Extent{}, false, err
	}
	e, err := decodeExtent(k, v)
	return e, err == nil, err
}

// punchTx removes [lblk, lblk+n) from ino's extents and returns the removed
// pieces.
func punchTx(tx *tree.Tx, ino, lblk, n uint64) ([]Extent, error) {
	end := lblk + n
	found, err := extentsIn(tx, ino, lblk, n)
	if err != nil {
		return nil, err
	}
	var removed []Extent
	for _, e := range found {
		removed = append(removed, clip(e, lblk, end))
		if _, err := tx.Delete(format.ExtentKey(ino, e.LBlk)); err != nil {
			return nil, err
		}
		if e.LBlk < lblk {
			l := clip(e, e.LBlk, lblk)
			if err := tx.Put(format.ExtentKey(ino, l.LBlk), extentVal(l)); err != nil {
				return nil, err
			}
		}
		if e.End() > end {
			r := clip(e, end, e.End())
			if err := tx.Put(format.ExtentKey(ino, r.LBlk), extentVal(r)); err != nil {
				return nil, err
			}
		}
	}
	return removed, nil
}

// insertTx adds e, which must cover a hole, merging with its neighbours.
func insertTx(tx *tree.Tx, ino uint64, e Extent) error {
	prev, hasPrev, err := extentBefore(tx, ino, e.LBlk)
	if err != nil {
		return err
	}
	next, hasNext := Extent{}, false
	if v, ok, err := tx.Get(format.ExtentKey(ino, e.End())); err != nil {
		return err
	} else if ok {
		if next, err = decodeExtent(format.ExtentKey(ino, e.End()), v); err != nil {
			return err
		}
		hasNext = true
	}
	return putMergedTx(tx, ino, e, prev, hasPrev, next, hasNext)
}

// putMergedTx stores e, which covers a hole, merged with prev (the extent
// before it, if any) and next (the extent after it, if any) where they
// continue each other. Merging into prev rewrites prev's value under its
// own key: no delete and insert.
func putMergedTx(tx *tree.Tx, ino uint64, e, prev Extent, hasPrev bool, next Extent, hasNext bool) error {
	if hasPrev && mergeable(prev, e) {
		e = Extent{LBlk: prev.LBlk, Len: prev.Len + e.Len, PBlk: prev.PBlk, Flags: e.Flags, Stream: e.Stream}
	}
	if hasNext && mergeable(e, next) {
		if _, err := tx.Delete(format.ExtentKey(ino, next.LBlk)); err != nil {
			return err
		}
		e.Len += next.Len
	}
	return tx.Put(format.ExtentKey(ino, e.LBlk), extentVal(e))
}

// setTx maps e in ino's extents, replacing whatever mapped there. It
// returns the replaced pieces whose device blocks are no longer referenced
// (freed), and the pieces of e whose blocks were not mapped before (fresh:
// converting unwritten to written in place keeps the same blocks), appended
// to fresh (a caller's buffer: an append should not allocate).
func setTx(tx *tree.Tx, ino uint64, e Extent, fresh []Extent) (freed, _ []Extent, err error) {
	// The common case, a write into a hole (an append), needs one look at
	// the neighbours and one Put.
	prev, hasPrev, overlaps, next, hasNext, err := extentsAround(tx, ino, e.LBlk, e.End())
	if err != nil {
		return nil, nil, err
	}
	if !overlaps {
		if err := putMergedTx(tx, ino, e, prev, hasPrev, next, hasNext); err != nil {
			return nil, nil, err
		}
		return nil, append(fresh, e), nil
	}
	old, err := punchTx(tx, ino, e.LBlk, e.Len)
	if err != nil {
		return nil, nil, err
	}
	if err := insertTx(tx, ino, e); err != nil {
		return nil, nil, err
	}
	cur := e.LBlk
	for _, o := range old {
		if o.PBlk == e.PBlk+(o.LBlk-e.LBlk) {
			if o.LBlk > cur {
				fresh = append(fresh, clip(e, cur, o.LBlk))
			}
			cur = o.End()
			continue
		}
		freed = append(freed, o)
	}
	if cur < e.End() {
		fresh = append(fresh, clip(e, cur, e.End()))
	}
	return freed, fresh, nil
}

// Extents returns a copy of the file's extent map.
func (s *Store) Extents(in *Inode) ([]Extent, error) {
	in.mu.RLock()
	defer in.mu.RUnlock()
	exts, err := extentsIn(s.treeFor(in.attr.Ino), in.attr.Ino, 0, ^uint64(0))
	if err == nil {
		err = s.checkExtents(in.attr.Ino, exts)
	}
	return exts, err
}

// ExtentRange returns the file's extent pieces intersecting file blocks
// [lblk, lblk+n), clipped to them.
func (s *Store) ExtentRange(in *Inode, lblk, n uint64) ([]Extent, error) {
	in.mu.RLock()
	defer in.mu.RUnlock()
	return s.visit(in, lblk, n, nil)
}
