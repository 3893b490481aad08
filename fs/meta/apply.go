package meta

import (
	"bytes"
	"fmt"
	"syscall"

	"github.com/streamfs/streamfs/alloc"
	"github.com/streamfs/streamfs/fs/format"
	"github.com/streamfs/streamfs/fs/meta/tree"
)

// apply applies one record to the trees. It is the only code that changes
// metadata: operations apply the records they journal (txn below), and
// replay applies the journal after a checkpoint, so the two cannot
// disagree. Blocks the record releases are appended to *freed (the caller
// hands them to the allocator once the record is durable). Records are
// "set" operations; RecMap and RecFree also keep the free-space records and
// the inode's block count right.
func (s *Store) apply(r *format.Record, freed *[]alloc.Extent) error {
	bad := func(f string, a ...any) error {
		return fmt.Errorf("record type %d: "+f+": %w", append([]any{r.Type}, append(a, format.ErrCorrupt)...)...)
	}
	checkIno := func(ino uint64) error {
		if ino == 0 || alloc.InoAG(ino) >= s.sb.AGCount {
			return bad("inode number %#x", ino)
		}
		return nil
	}
	switch r.Type {
	case format.RecInode:
		if err := checkIno(r.Inode.Ino); err != nil {
			return err
		}
		return s.applyInode(&r.Inode)
	case format.RecFree:
		if err := checkIno(r.Ino); err != nil {
			return err
		}
		return s.applyFree(r.Ino, freed)
	case format.RecLink:
		if err := checkIno(r.Parent); err != nil {
			return err
		}
		if err := checkIno(r.Ino); err != nil {
			return err
		}
		return treeErr(s.treeFor(r.Parent).Put(format.DirentKey(r.Parent, r.Name), format.DirentVal(r.Ino, r.Mode)))
	case format.RecUnlink:
		if err := checkIno(r.Parent); err != nil {
			return err
		}
		_, err := s.treeFor(r.Parent).Delete(format.DirentKey(r.Parent, r.Name))
		return treeErr(err)
	case format.RecMap:
		if err := checkIno(r.Ino); err != nil {
			return err
		}
		if !s.sb.InDataArea(r.PBlk, r.Len) {
			return bad("extent %d+%d outside the data area", r.PBlk, r.Len)
		}
		return s.applyMap(r.Ino, Extent{LBlk: r.LBlk, Len: r.Len, PBlk: r.PBlk, Flags: r.Flags, Stream: r.Stream}, freed)
	case format.RecPunch:
		if err := checkIno(r.Ino); err != nil {
			return err
		}
		return s.applyPunch(r.Ino, r.LBlk, r.Len, freed)
	case format.RecXattr:
		if err := checkIno(r.Ino); err != nil {
			return err
		}
		if r.Name == xattrCaps {
			// The writer holds in.mu (or replay runs alone).
			if in := s.itab.get(r.Ino); in != nil {
				in.noCaps = false
			}
		}
		return treeErr(s.treeFor(r.Ino).Update(func(tx *tree.Tx) error {
			if err := deleteChunks(tx, format.XattrPrefix(r.Ino, r.Name)); err != nil {
				return err
			}
			return putChunks(tx, r.Value, func(i int) []byte { return format.XattrKey(r.Ino, r.Name, i) })
		}))
	case format.RecXattrDel:
		if err := checkIno(r.Ino); err != nil {
			return err
		}
		return treeErr(s.treeFor(r.Ino).Update(func(tx *tree.Tx) error {
			return deleteChunks(tx, format.XattrPrefix(r.Ino, r.Name))
		}))
	default:
		return bad("unexpected")
	}
}

// applyInode stores an inode's attributes, keeping the AG counters, the
// orphan list and (for a new symlink) the target.
func (s *Store) applyInode(a *format.InodeRec) error {
	ino := a.Ino
	ag := alloc.InoAG(ino)
	t := s.trees[ag]
	old, existed, err := t.Get(format.InodeKey(ino))
	if err != nil {
		return treeErr(err)
	}
	var prev format.InodeRec
	if existed {
		if prev, err = format.DecodeInodeVal(old); err != nil {
			return fmt.Errorf("inode %d: %w", ino, err)
		}
	}
	if err := t.Put(format.InodeKey(ino), format.InodeVal(a)); err != nil {
		return treeErr(err)
	}
	if !existed {
		s.ags[ag].add(a.Stream, a.StreamSrc, 1)
		if a.Target != "" {
			if err := treeErr(t.Update(func(tx *tree.Tx) error {
				return putChunks(tx, []byte(a.Target), func(i int) []byte { return format.TargetKey(ino, i) })
			})); err != nil {
				return err
			}
		}
	} else {
		s.ags[ag].moveStream(streamKey{prev.Stream, prev.StreamSrc}, streamKey{a.Stream, a.StreamSrc})
	}
	orphan := a.Nlink == 0 && ino != RootIno
	if orphan && (!existed || prev.Nlink != 0) {
		if err := t.Put(format.OrphanKey(ino), nil); err != nil {
			return treeErr(err)
		}
	} else if !orphan && existed && prev.Nlink == 0 {
		if _, err := t.Delete(format.OrphanKey(ino)); err != nil {
			return treeErr(err)
		}
	}
	s.bumpAGNext(ino)
	return nil
}

// applyFree deletes everything ino owns and frees its blocks.
func (s *Store) applyFree(ino uint64, freed *[]alloc.Extent) error {
	t := s.treeFor(ino)
	var exts []Extent
	var stream uint32
	var src uint8
	found := false
	err := t.Update(func(tx *tree.Tx) error {
		var keys [][]byte
		prefix := format.InoPrefix(ino)
		var derr error
		err := tx.Ascend(prefix, func(k, v []byte) bool {
			if !bytes.HasPrefix(k, prefix) {
				return false
			}
			switch k[9] {
			case format.KindInode:
				a, err := format.DecodeInodeVal(v)
				if err != nil {
					derr = err
					return false
				}
				stream, src, found = a.Stream, a.StreamSrc, true
			case format.KindExtent:
				e, err := decodeExtent(k, v)
				if err != nil {
					derr = err
					return false
				}
				exts = append(exts, e)
			}
			keys = append(keys, bytes.Clone(k))
			return true
		})
		if err == nil {
			err = derr
		}
		if err != nil {
			return err
		}
		// Before anything is deleted: the inode stays as it was.
		if err := s.checkExtents(ino, exts); err != nil {
			return err
		}
		for _, k := range keys {
			if _, err := tx.Delete(k); err != nil {
				return err
			}
		}
		_, err = tx.Delete(format.OrphanKey(ino))
		return err
	})
	if err != nil {
		return treeErr(err)
	}
	if found {
		s.ags[alloc.InoAG(ino)].add(stream, src, -1)
	}
	s.itab.del(ino)
	for _, e := range exts {
		if err := s.spaceFree(e.PBlk, e.Len); err != nil {
			return fmt.Errorf("inode %d: %w", ino, err)
		}
		*freed = append(*freed, alloc.Extent{Start: e.PBlk, Len: e.Len})
	}
	return nil
}

// applyMap maps x in ino's extents.
func (s *Store) applyMap(ino uint64, x Extent, freed *[]alloc.Extent) error {
	var old, fresh []Extent
	var freshBuf [2]Extent
	err := s.treeFor(ino).Update(func(tx *tree.Tx) error {
		var err error
		old, fresh, err = setTx(tx, ino, x, freshBuf[:0])
		return err
	})
	if err != nil {
		return treeErr(err)
	}
	for _, f := range fresh {
		if err := s.spaceUse(f.PBlk, f.Len); err != nil {
			return fmt.Errorf("inode %d extent %d+%d: %w", ino, f.LBlk, f.Len, err)
		}
	}
	var delta int64
	for _, f := range fresh {
		delta += int64(f.Len)
	}
	if err := s.checkExtents(ino, old); err != nil {
		return err
	}
	for _, o := range old {
		delta -= int64(o.Len)
		if err := s.spaceFree(o.PBlk, o.Len); err != nil {
			return fmt.Errorf("inode %d: %w", ino, err)
		}
		*freed = append(*freed, alloc.Extent{Start: o.PBlk, Len: o.Len})
	}
	in := s.itab.get(ino)
	if in != nil {
		// Keep the bound on mapped blocks an upper bound (segments).
		if e := in.extEnd.Load(); e != 0 && e < x.End()+1 {
			in.extEnd.Store(x.End() + 1)
		}
	}
	return s.addBlocksTo(in, ino, delta)
}

// applyPunch makes ino's blocks [lblk, lblk+n) a hole.
func (s *Store) applyPunch(ino, lblk, n uint64, freed *[]alloc.Extent) error {
	var old []Extent
	err := s.treeFor(ino).Update(func(tx *tree.Tx) error {
		var err error
		old, err = punchTx(tx, ino, lblk, n)
		return err
	})
	if err != nil {
		return treeErr(err)
	}
	if err := s.checkExtents(ino, old); err != nil {
		return err
	}
	var delta int64
	for _, o := range old {
		delta -= int64(o.Len)
		if err := s.spaceFree(o.PBlk, o.Len); err != nil {
			return fmt.Errorf("inode %d: %w", ino, err)
		}
		*freed = append(*freed, alloc.Extent{Start: o.PBlk, Len: o.Len})
	}
	in := s.itab.get(ino)
	if in != nil {
		// Nothing is mapped from lblk on if the punch reaches the bound
		// (a truncate): appends after it skip the tree walk again.
		if e := in.extEnd.Load(); e != 0 && lblk+n >= e-1 && lblk+1 < e {
			in.extEnd.Store(lblk + 1)
		}
	}
	return s.addBlocksTo(in, ino, delta)
}

// addBlocks adjusts ino's block count. A cached inode (an operation holds
// it, or replay loaded it) only changes in memory and is marked dirty: its
// attributes reach the tree with its next journaled change or checkpoint,
// so an allocating write does not rewrite the inode record as well. An
// inode not in memory (replay) has its stored record adjusted.
func (s *Store) addBlocks(ino uint64, delta int64) error {
	if delta == 0 {
		return nil
	}
	return s.addBlocksTo(s.itab.get(ino), ino, delta)
}

// addBlocksTo is addBlocks with ino's cached inode (nil: none) looked up.
func (s *Store) addBlocksTo(in *Inode, ino uint64, delta int64) error {
	if delta == 0 {
		return nil
	}
	if in != nil {
		// The caller holds in.mu (operations) or runs alone (replay).
		in.attr.Blocks = uint64(int64(in.attr.Blocks) + delta)
		s.markDirtyLocked(in)
		return nil
	}
	t := s.treeFor(ino)
	return treeErr(t.Update(func(tx *tree.Tx) error {
		v, ok, err := tx.Get(format.InodeKey(ino))
		if err != nil || !ok {
			return err
		}
		a, err := format.DecodeInodeVal(v)
		if err != nil {
			return err
		}
		a.Blocks = uint64(int64(a.Blocks) + delta)
		return tx.Put(format.InodeKey(ino), format.InodeVal(&a))
	}))
}

// putChunks stores value under the keys key(0), key(1), ...
func putChunks(tx *tree.Tx, value []byte, key func(int) []byte) error {
	for i := 0; ; i++ {
		n := min(len(value), format.ChunkBytes)
		if err := tx.Put(key(i), value[:n]); err != nil {
			return err
		}
		value = value[n:]
		if len(value) == 0 {
			return nil
		}
	}
}

// deleteChunks deletes every key with prefix.
func deleteChunks(tx *tree.Tx, prefix []byte) error {
	var keys [][]byte
	err := tx.Ascend(prefix, func(k, v []byte) bool {
		if !bytes.HasPrefix(k, prefix) {
			return false
		}
		keys = append(keys, bytes.Clone(k))
		return true
	})
	for _, k := range keys {
		if err == nil {
			_, err = tx.Delete(k)
		}
	}
	return err
}

// getChunks reads the value stored under the keys prefix+chunk; ok is
// false when there is none.
func getChunks(r seeker, prefix []byte, max int) (val []byte, ok bool, err error) {
	var derr error
	next := 0
	err = r.Ascend(prefix, func(k, v []byte) bool {
		if !bytes.HasPrefix(k, prefix) || len(k) != len(prefix)+1 {
			return false
		}
		if int(k[len(prefix)]) != next || len(val)+len(v) > max {
			derr = fmt.Errorf("value chunk %d of %d bytes after %d bytes: %w", k[len(prefix)], len(v), len(val), format.ErrCorrupt)
			return false
		}
		next++
		ok = true
		val = append(val, v...)
		return true
	})
	if err == nil {
		err = derr
	}
	return val, ok, treeErr(err)
}

// txn collects one operation's records: each is applied to the trees as it
// is added and the whole is journaled by commit. A failure to apply leaves
// the trees ahead of the journal, so it shuts the filesystem down.
type txn struct {
	s     *Store
	e     format.Encoder
	freed []alloc.Extent
	err   error
	hint  uint64 // an inode the transaction changes (journal stripe)
	resv  uint64 // metadata blocks reserved for it (space.go)
	// inline holds the records of a small operation (a create is an inode,
	// an entry and the parent's inode): growing e.Buf from nothing took
	// six allocations. wal.Log.Append copies the records out.
	inline [320]byte
}

// rec journals r and applies it from its in-memory form: no operation
// decodes the bytes it just encoded. Replay applies the decoded bytes
// through the same apply, so the two agree as long as the encoding is
// lossless for what apply reads: Validate runs the decoder's checks on r
// here, format's round-trip test keeps the encoding lossless, tests decode
// every record the live path journals and compare it with r
// (checkRecords), and TestLiveReplayTrees compares the trees of a live run
// with a replay of its journal.
func (t *txn) rec(r *format.Record) {
	t.e.Record(r)
	if t.err != nil {
		return
	}
	if t.hint == 0 {
		t.hint = max(r.Ino, r.Inode.Ino, r.Parent)
	}
	if t.err = r.Validate(); t.err == nil {
		if checkRecords != nil {
			t.err = checkRecords(*r, t.e.Buf)
		}
		if t.err == nil {
			t.err = t.s.apply(r, &t.freed)
		}
	}
	t.failed()
}

// checkRecords is nil but in tests, where it decodes the last record of
// the journaled bytes and compares it with the one applied.
var checkRecords func(applied format.Record, journaled []byte) error

func (t *txn) inode(a *format.InodeRec) {
	r := format.Record{Type: format.RecInode, Inode: *a, Ino: a.Ino}
	t.rec(&r)
}

func (t *txn) free(ino uint64) {
	r := format.Record{Type: format.RecFree, Ino: ino}
	t.rec(&r)
}

func (t *txn) unlink(parent uint64, name string) {
	r := format.Record{Type: format.RecUnlink, Parent: parent, Name: name}
	t.rec(&r)
}

func (t *txn) link(parent, ino uint64, mode uint32, name string) {
	r := format.Record{Type: format.RecLink, Parent: parent, Ino: ino, Mode: mode & syscall.S_IFMT, Name: name}
	t.rec(&r)
}

func (t *txn) mapExt(ino uint64, x Extent) {
	r := format.Record{Type: format.RecMap, Ino: ino, LBlk: x.LBlk, Len: x.Len, PBlk: x.PBlk, Flags: x.Flags, Stream: x.Stream}
	t.rec(&r)
}

func (t *txn) punch(ino, lblk, n uint64) {
	r := format.Record{Type: format.RecPunch, Ino: ino, LBlk: lblk, Len: n}
	t.rec(&r)
}

func (t *txn) xattr(ino uint64, name string, v []byte) {
	r := format.Record{Type: format.RecXattr, Ino: ino, Name: name, Value: v}
	t.rec(&r)
}

func (t *txn) xattrDel(ino uint64, name string) {
	r := format.Record{Type: format.RecXattrDel, Ino: ino, Name: name}
	t.rec(&r)
}

// failed shuts the filesystem down the moment a record fails to apply: the
// trees are then ahead of the journal, half-changed, and a checkpoint
// waiting for opLock must find the shutdown when it gets it, before it
// could write them.
func (t *txn) failed() {
	if t.err != nil {
		t.s.shutdown(fmt.Errorf("applying metadata change: %w", t.err))
	}
}

// end finishes an operation's transaction after commit (or instead of it,
// when the operation changed nothing): opLock is released, and the
// reservation, whose blocks the applied records have taken as far as they
// needed them.
func (t *txn) end() {
	t.s.opLock.RUnlock()
	t.s.unreserve(t.resv)
	t.resv = 0
}

// commit journals the records (opLock is held shared by the caller).
func (t *txn) commit(extra ...alloc.Extent) error {
	if t.err != nil {
		return syscall.EIO // failed shut the filesystem down
	}
	if len(t.e.Buf) > 0 || len(extra) > 0 {
		t.s.j.Append(t.e.Buf, append(t.freed, extra...), t.hint)
	}
	t.s.kickCheckpoint()
	return nil
}
