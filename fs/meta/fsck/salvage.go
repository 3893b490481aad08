package fsck

import (
	"bytes"

	"github.com/streamfs/streamfs/fs/format"
)

// salvageTrees rebuilds, with -y, every AG tree whose structure is damaged
// (a node that fails its checksum, owner, order or separator checks), as
// xfs_repair rebuilds a damaged btree: every entry reachable through valid
// nodes is kept (tree.Salvage, which never follows a pointer out of a node
// that does not verify, so stale node copies in free space stay dead), the
// AG gets a fresh tree holding exactly those entries, and the old tree's
// blocks become free with the free-space rebuild that follows (checkSpace).
// What the lost subtrees held shows up in the checks after it: entries of
// missing inodes are dropped, inodes no entry reaches go to lost+found, the
// counters are recounted. It returns whether it rebuilt any tree.
func (f *fsck) salvageTrees() bool {
	// Salvage every damaged tree before building any new one, so that the
	// allocator withholds what each salvage could not vouch for before a
	// new node is placed anywhere.
	var damaged []*salvaged
	for ag, t := range f.img.Trees() {
		damage := t.Check(nil)
		if len(damage) == 0 {
			continue
		}
		for _, err := range damage {
			f.problem(true, "AG %d tree: %v: tree rebuilt from the entries reachable through valid nodes", ag, err)
		}
		damaged = append(damaged, f.salvageAG(ag))
	}
	rebuilt := false
	for _, sv := range damaged {
		if err := f.img.ReplaceTree(sv.ag, sv.keys, sv.vals); err != nil {
			f.problem(false, "AG %d: rebuilding the tree: %v", sv.ag, err)
			continue
		}
		rebuilt = true
	}
	if rebuilt {
		f.fixes++
		// The new trees' nodes come out of the free-space records now, so
		// that the space check sees records and trees as a checkpoint would.
		if err := f.img.FoldNodeSpace(); err != nil {
			f.problem(false, "tree node space after the rebuild: %v", err)
		}
	}
	return rebuilt
}

// salvaged is what Salvage found in one AG's tree, in key order.
type salvaged struct {
	ag         int
	keys, vals [][]byte
}

// salvageAG collects every entry Salvage finds in AG ag's tree, reports
// what is lost, and makes the allocator withhold the AG's blocks that the
// salvaged free-space records do not call free: a lost node may have
// described them, so the new trees' nodes may not go there (the
// free-space rebuild hands back what is really free).
func (f *fsck) salvageAG(ag int) *salvaged {
	sb := f.img.Super()
	sv := &salvaged{ag: ag}
	lost := f.img.Trees()[ag].Salvage(func(k, v []byte) {
		sv.keys = append(sv.keys, bytes.Clone(k))
		sv.vals = append(sv.vals, bytes.Clone(v))
	}, nil)
	for _, err := range lost {
		f.problem(true, "AG %d: %v: dropped", ag, err)
	}
	lo := max(uint64(ag)*sb.AGBlocks, sb.MetaEnd())
	hi := min(uint64(ag+1)*sb.AGBlocks, sb.BackupBlock)
	cursor := lo
	for i, k := range sv.keys {
		if !bytes.HasPrefix(k, format.FreePrefix()) {
			continue
		}
		fs, fn, err := format.DecodeFree(k, sv.vals[i])
		if err != nil || fs < cursor || fs+fn > hi {
			continue
		}
		if fs > cursor {
			f.withhold(cursor, fs-cursor)
		}
		cursor = fs + fn
	}
	if hi > cursor {
		f.withhold(cursor, hi-cursor)
	}
	return sv
}

// loadDamaged loads the newest checkpoint for fsck -y when the ordinary
// load failed on damaged metadata (loadErr): the trees are opened without
// reading their roots, the allocator counts whatever a damaged node hides
// as used, and the damaged trees are rebuilt (salvageTrees) before the AG
// counters are read. The journal after the checkpoint is not replayed: its
// commits change trees that no longer hold what they held when the
// commits were written, so applying them could build on lost state. Its
// commits are read and skipped, and the repaired checkpoint starts the
// journal after them. It returns the checkpoint and the commits replayed
// (none; the skipped ones are reported as a problem).
func (f *fsck) loadDamaged(loadErr error) (*format.CkptHeader, int, error) {
	h, err := f.img.LoadDamaged()
	if err != nil {
		return nil, 0, err
	}
	f.reserveInUse()
	if !f.salvageTrees() {
		return nil, 0, loadErr // the damage is not in a tree
	}
	if err := f.img.LoadAGs(); err != nil {
		return nil, 0, err
	}
	commits, err := f.img.SkipJournal(h)
	if err != nil {
		return nil, 0, err
	}
	if commits > 0 {
		f.problem(true, "%d journal commits after checkpoint %d not replayed: the trees they change were damaged", commits, h.Seq)
	}
	return h, 0, nil
}
