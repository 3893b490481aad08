package meta

import (
	"bytes"
	"fmt"

	"github.com/streamfs/streamfs/fs/format"
	"github.com/streamfs/streamfs/fs/meta/tree"
	"github.com/streamfs/streamfs/fs/meta/wal"
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
	s := f.s
	// Salvage every damaged tree before building any new one, so that the
	// allocator withholds what each salvage could not vouch for before a
	// new node is placed anywhere.
	var damaged []*salvaged
	for ag, t := range s.trees {
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
		if err := sv.build(s); err != nil {
			f.problem(false, "AG %d: rebuilding the tree: %v", sv.ag, err)
			continue
		}
		rebuilt = true
	}
	if rebuilt {
		f.fixes++
		// The new trees' nodes come out of the free-space records now, so
		// that the space check sees records and trees as a checkpoint would.
		if _, err := s.foldNodeSpace(); err != nil {
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
	s := f.s
	sv := &salvaged{ag: ag}
	lost := s.trees[ag].Salvage(func(k, v []byte) {
		sv.keys = append(sv.keys, bytes.Clone(k))
		sv.vals = append(sv.vals, bytes.Clone(v))
	}, nil)
	for _, err := range lost {
		f.problem(true, "AG %d: %v: dropped", ag, err)
	}
	lo := max(uint64(ag)*s.sb.AGBlocks, s.sb.MetaEnd())
	hi := min(uint64(ag+1)*s.sb.AGBlocks, s.sb.BackupBlock)
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

// build replaces the AG's tree with a new one holding the salvaged entries.
func (sv *salvaged) build(s *Store) error {
	nt, err := tree.Open(&nodePager{s: s, ag: uint32(sv.ag)}, s.cache, s.treeConfig(sv.ag), 0)
	if err != nil {
		return err
	}
	for i, k := range sv.keys {
		if err := nt.Put(k, sv.vals[i]); err != nil {
			return fmt.Errorf("key % x: %w", k, treeErr(err))
		}
	}
	s.trees[sv.ag] = nt
	return nil
}

// loadDamaged loads the newest checkpoint for fsck -y when the ordinary
// load failed on damaged metadata (loadErr): the trees are opened without
// reading their roots, the allocator counts whatever a damaged node hides
// as used, and the damaged trees are rebuilt (salvageTrees) before the AG
// counters are read. The journal after the checkpoint is not replayed: its
// commits change trees that no longer hold what they held when the
// commits were written, so applying them could build on lost state. Its
// commits are read and skipped, and the repaired checkpoint starts the
// journal after them. It returns the checkpoint and the commits skipped.
func (f *fsck) loadDamaged(loadErr error) (*format.CkptHeader, int, error) {
	s := f.s
	found, err := wal.ReadCheckpoint(s.dev, wal.GeometryOf(s.sb))
	if err != nil {
		return nil, 0, err
	}
	h, roots := found.Header, found.Roots
	s.j.Start(h.Seq, found.Slot, h.JournalSeq, h.JournalPos)
	if s.cache, err = tree.NewCache(s.opts.CacheBytes); err != nil {
		return nil, 0, fmt.Errorf("tree cache: %w", err)
	}
	s.trees = make([]*tree.Tree, s.sb.AGCount)
	for ag := range s.trees {
		if s.trees[ag], err = tree.OpenDamaged(&nodePager{s: s, ag: uint32(ag)}, s.cache, s.treeConfig(ag), roots[ag]); err != nil {
			return nil, 0, fmt.Errorf("AG %d tree: %w", ag, err)
		}
	}
	if err := s.rebuildAllocator(); err != nil {
		return nil, 0, err
	}
	f.reserveInUse()
	if !f.salvageTrees() {
		return nil, 0, loadErr // the damage is not in a tree
	}
	if err := s.loadAGs(); err != nil {
		return nil, 0, err
	}
	commits, _, err := s.j.Replay(h, func(*format.Record) error { return nil }, s.badCommitHook())
	if err != nil {
		return nil, 0, err
	}
	if commits > 0 {
		f.problem(true, "%d journal commits after checkpoint %d not replayed: the trees they change were damaged", commits, h.Seq)
	}
	return h, 0, nil
}
