package fsck

import (
	"bytes"
	"errors"
	"fmt"
	"sort"

	"github.com/streamfs/streamfs/fs/format"
	"github.com/streamfs/streamfs/fs/meta/tree"
)

// freeSpace is the owner name of a free-space record.
const freeSpace = "free space"

// checkSpace checks that every block of the data area has exactly one
// owner: free, a tree node or a file's extent (on the zoned layout, the
// conventional zones: free or a tree node; zones.go checks file data). The free-space records are
// derived data: where they disagree with what is in use (a free extent
// over a file's blocks or a tree node, blocks neither free nor in use, a
// malformed or misplaced record; freeBad says the walk found one of the
// latter), -y rebuilds them, as xfs_repair rebuilds its free-space trees
// from the inodes' extent maps. Blocks claimed by two users (two files, a
// file and a tree node) are reported: which one is right is not known.
func (f *fsck) checkSpace(owners []owner, freeBad bool) {
	sb := f.img.Super()
	sort.SliceStable(owners, func(i, j int) bool { return owners[i].start < owners[j].start })
	cursor := sb.MetaEnd()
	prev := owner{0, cursor, "the metadata area"} // the owner reaching furthest so far
	for _, o := range owners {
		if o.what != freeSpace && !sb.InMetaArea(o.start, o.n) {
			f.problem(false, "blocks %d+%d (%s) lie outside the metadata area", o.start, o.n, o.what)
			continue
		}
		switch {
		case o.start < cursor && (o.what == freeSpace || prev.what == freeSpace):
			freeBad = true
			f.problem(true, "blocks %d+%d (%s) also belong to %s: free space rebuilt", o.start, o.n, o.what, prev.what)
		case o.start < cursor:
			f.problem(false, "blocks %d+%d (%s) also belong to %s", o.start, o.n, o.what, prev.what)
		case o.start > cursor:
			freeBad = true
			f.problem(true, "blocks %d..%d are neither free nor in use (leaked): made free", cursor, o.start-1)
		}
		if end := o.start + o.n; end > cursor {
			cursor, prev = end, o
		}
		if o.what == freeSpace {
			f.rep.FreeBlocks += o.n
		} else {
			f.rep.UsedBlocks += o.n
		}
	}
	switch {
	case cursor < sb.BackupBlock:
		freeBad = true
		f.problem(true, "blocks %d..%d are neither free nor in use (leaked): made free", cursor, sb.BackupBlock-1)
	case cursor > sb.BackupBlock && prev.what == freeSpace:
		freeBad = true
		f.problem(true, "free extent %d+%d reaches beyond the data area: free space rebuilt", prev.start, prev.n)
	}
	if !freeBad || !f.repair {
		return
	}
	var used []owner
	for _, o := range owners {
		if o.what != freeSpace {
			used = append(used, o)
		}
	}
	if err := f.rebuildFree(used); err != nil {
		f.problem(false, "rebuilding free space: %v", err)
		return
	}
	f.fixes++
}

// rebuildFree replaces every AG's free-space records with the blocks of
// its data area that no owner in used (sorted by start) holds. First the
// allocator is told that all of used is in use, so that no tree node
// written from here on (the rebuild's own copies included) can land on
// blocks a file or a tree holds even where the old records called them
// free. Blocks the allocator already withholds (copies of nodes the
// checkpoint on the device still references) stay withheld until the
// repaired checkpoint is durable, as after any checkpoint.
func (f *fsck) rebuildFree(used []owner) error {
	sb := f.img.Super()
	for _, o := range used {
		f.withhold(o.start, o.n)
	}
	for ag, t := range f.img.Trees() {
		lo := max(uint64(ag)*sb.AGBlocks, sb.MetaEnd())
		hi := min(uint64(ag+1)*sb.AGBlocks, sb.BackupBlock)
		var free []owner
		cursor := lo
		for _, o := range used {
			if o.start+o.n <= cursor || o.start >= hi {
				continue
			}
			if o.start > cursor {
				free = append(free, owner{cursor, o.start - cursor, freeSpace})
			}
			cursor = max(cursor, o.start+o.n)
		}
		if cursor < hi {
			free = append(free, owner{cursor, hi - cursor, freeSpace})
		}
		var old [][]byte
		err := t.Ascend(format.FreePrefix(), func(k, _ []byte) bool {
			if !bytes.HasPrefix(k, format.FreePrefix()) {
				return false
			}
			old = append(old, bytes.Clone(k))
			return true
		})
		if err != nil {
			return fmt.Errorf("AG %d: %w", ag, err)
		}
		err = t.Update(func(tx *tree.Tx) error {
			for _, k := range old {
				if _, err := tx.Delete(k); err != nil {
					return err
				}
			}
			for _, e := range free {
				if err := tx.Put(format.FreeKey(e.start), format.FreeVal(e.n)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("AG %d: %w", ag, treeErr(err))
		}
	}
	return nil
}

// reserveInUse makes the allocator withhold every block that a tree node or
// a file's extent reachable in the trees holds, whatever the free-space
// records say. fsck distrusts those records, and everything it does before
// it rebuilds them (replaying the journal, folding node space, rebuilding a
// damaged tree, dropping entries) copies tree nodes into blocks the
// allocator hands out: a record that calls a file's blocks free would
// otherwise put a node there, and the repaired checkpoint would write it
// over the file's data. Extents outside the data area are left to the
// checks (withhold ignores them).
func (f *fsck) reserveInUse() {
	for _, t := range f.img.Trees() {
		t.Salvage(func(k, v []byte) {
			if len(k) == 18 && k[0] == format.KeyInoSpc && k[9] == format.KindExtent {
				if e, err := decodeExtent(k, v); err == nil {
					f.withhold(e.PBlk, e.Len)
				}
			}
		}, func(blk uint64) { f.withhold(blk, 1) })
	}
}

// withhold makes the allocator withhold the free parts of [start, start+n).
func (f *fsck) withhold(start, n uint64) { f.img.Withhold(start, n) }

// treeErr marks a tree's corruption error as format.ErrCorrupt, as the
// filesystem's own tree errors are.
func treeErr(err error) error {
	if err != nil && errors.Is(err, tree.ErrCorrupt) && !errors.Is(err, format.ErrCorrupt) {
		return fmt.Errorf("%w: %w", err, format.ErrCorrupt)
	}
	return err
}
