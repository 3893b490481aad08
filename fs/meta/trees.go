package meta

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/streamfs/streamfs/alloc"
	"github.com/streamfs/streamfs/fs/format"
	"github.com/streamfs/streamfs/fs/meta/tree"
)

// The metadata lives in one copy-on-write B+tree per AG (fs/format/keys.go
// lists the keys). Operations change the trees in memory by applying their
// journal records (apply.go) — the same code replay runs — and a checkpoint
// writes the dirty nodes to fresh blocks and then the new roots.
//
// Node blocks come from AG space through the allocator. The free-space
// records in the trees describe the space as of the trees themselves: node
// blocks allocated and released since the last checkpoint are folded into
// them when the next checkpoint is taken (foldNodeSpace), and blocks that a
// durable checkpoint still references are handed back to the allocator only
// after the next checkpoint is durable.

// nodePager gives the tree of one AG its blocks.
type nodePager struct {
	s  *Store
	ag uint32
}

func (p *nodePager) Read(blk uint64, buf []byte) error {
	if !p.s.sb.InMetaArea(blk, 1) {
		return fmt.Errorf("tree node at block %d outside the data area: %w", blk, format.ErrCorrupt)
	}
	if err := p.s.dev.ReadAt(buf, int64(blk*p.s.bs)); err != nil {
		return fmt.Errorf("reading tree node at block %d: %w", blk, err)
	}
	return nil
}

// Alloc ignores hint: nodes go to the top of the AG's free space, away
// from the data appends extend into (alloc.AllocMeta).
func (p *nodePager) Alloc(hint uint64) (uint64, error) {
	s := p.s
	b, err := s.alloc.AllocMeta(p.ag)
	if err != nil {
		return 0, fmt.Errorf("allocating a tree node: %w", err)
	}
	s.nodeMu.Lock()
	s.nodeEv = append(s.nodeEv, nodeEvent{blk: b, alloc: true})
	s.nodeMu.Unlock()
	s.nodeAllocs.Add(1)
	return b, nil
}

func (p *nodePager) Free(blk uint64) {
	s := p.s
	s.nodeMu.Lock()
	s.nodeEv = append(s.nodeEv, nodeEvent{blk: blk})
	s.nodeMu.Unlock()
	s.nodeFrees.Add(1)
}

// nodeEvent is one node block allocated or released since the events were
// last folded into the free-space records.
type nodeEvent struct {
	blk   uint64
	alloc bool
}

// treeFor returns the tree of the AG holding ino.
func (s *Store) treeFor(ino uint64) *tree.Tree { return s.trees[alloc.InoAG(ino)] }

// agOfBlock returns the AG holding block b.
func (s *Store) agOfBlock(b uint64) uint32 { return uint32(b / s.sb.AGBlocks) }

// openTrees opens every AG tree at the given roots.
func (s *Store) openTrees(roots []uint64) error {
	if s.cache == nil {
		c, err := tree.NewCache(s.opts.CacheBytes)
		if err != nil {
			return fmt.Errorf("tree cache: %w", err)
		}
		s.cache = c
	}
	s.trees = make([]*tree.Tree, s.sb.AGCount)
	for ag := range s.trees {
		t, err := tree.Open(&nodePager{s: s, ag: uint32(ag)}, s.cache, s.treeConfig(ag), roots[ag])
		if err != nil {
			return fmt.Errorf("AG %d tree: %w", ag, treeErr(err))
		}
		s.trees[ag] = t
	}
	return nil
}

// treeConfig is the configuration of AG ag's tree.
func (s *Store) treeConfig(ag int) tree.Config {
	return tree.Config{NodeSize: int(s.bs), Owner: uint64(ag) + 1, UUID: s.sb.UUID}
}

// treeErr makes tree corruption a format.ErrCorrupt.
func treeErr(err error) error {
	if err != nil && errors.Is(err, tree.ErrCorrupt) && !errors.Is(err, format.ErrCorrupt) {
		return fmt.Errorf("%w: %w", err, format.ErrCorrupt)
	}
	return err
}

// splitByAG calls fn for the pieces of [start, start+n) in each AG.
func (s *Store) splitByAG(start, n uint64, fn func(ag uint32, start, n uint64) error) error {
	for n > 0 {
		ag := s.agOfBlock(start)
		end := min(start+n, (uint64(ag)+1)*s.sb.AGBlocks)
		if err := fn(ag, start, end-start); err != nil {
			return err
		}
		n -= end - start
		start = end
	}
	return nil
}

// spaceFree records [start, start+n) as free in the trees.
func (s *Store) spaceFree(start, n uint64) error {
	if s.sb.Zoned() && !s.sb.InMetaArea(start, n) {
		return nil // a sequential zone's blocks have no free-space records
	}
	return s.splitByAG(start, n, func(ag uint32, start, n uint64) error {
		return treeErr(s.trees[ag].Update(func(tx *tree.Tx) error { return freeInTx(tx, start, n) }))
	})
}

// spaceUse records [start, start+n) as in use in the trees; it must be free.
func (s *Store) spaceUse(start, n uint64) error {
	if s.sb.Zoned() && !s.sb.InMetaArea(start, n) {
		return nil
	}
	return s.splitByAG(start, n, func(ag uint32, start, n uint64) error {
		return treeErr(s.trees[ag].Update(func(tx *tree.Tx) error { return useInTx(tx, start, n) }))
	})
}

func freeInTx(tx *tree.Tx, start, n uint64) error {
	end := start + n
	if k, v, ok, err := tx.SeekLE(format.FreeKey(start)); err != nil {
		return err
	} else if ok && bytes.HasPrefix(k, format.FreePrefix()) {
		k = bytes.Clone(k)
		ps, pn, err := format.DecodeFree(k, v)
		if err != nil {
			return err
		}
		if ps+pn > start {
			return fmt.Errorf("freeing blocks %d+%d: already free in %d+%d: %w", start, n, ps, pn, format.ErrCorrupt)
		}
		if ps+pn == start {
			if _, err := tx.Delete(k); err != nil {
				return err
			}
			start, n = ps, n+pn
		}
	}
	if k, v, ok, err := tx.Seek(format.FreeKey(start)); err != nil {
		return err
	} else if ok && bytes.HasPrefix(k, format.FreePrefix()) {
		k = bytes.Clone(k)
		ns, nn, err := format.DecodeFree(k, v)
		if err != nil {
			return err
		}
		if ns < end {
			return fmt.Errorf("freeing blocks up to %d: already free from %d: %w", end, ns, format.ErrCorrupt)
		}
		if ns == end {
			if _, err := tx.Delete(k); err != nil {
				return err
			}
			n += nn
		}
	}
	return tx.Put(format.FreeKey(start), format.FreeVal(n))
}

func useInTx(tx *tree.Tx, start, n uint64) error {
	// Not copied: k only names the record to change.
	k, v, ok, err := tx.LastLE(format.FreeKey(start))
	if err != nil {
		return err
	}
	if !ok || !bytes.HasPrefix(k, format.FreePrefix()) {
		return fmt.Errorf("using blocks %d+%d: not free: %w", start, n, format.ErrCorrupt)
	}
	fs, fn, err := format.DecodeFree(k, v)
	if err != nil {
		return err
	}
	if fs+fn < start+n {
		return fmt.Errorf("using blocks %d+%d: free extent is %d+%d: %w", start, n, fs, fn, format.ErrCorrupt)
	}
	end := start + n
	switch {
	case fs < start:
		// The head stays free under its own key; the tail, if any, is new.
		if err := tx.Put(k, format.FreeVal(start-fs)); err != nil {
			return err
		}
		if fs+fn > end {
			return tx.Put(format.FreeKey(end), format.FreeVal(fs+fn-end))
		}
		return nil
	case fs+fn > end:
		// Used from the front (appends): the record's start moves up,
		// rewritten in place.
		return tx.Rekey(k, format.FreeKey(end), format.FreeVal(fs+fn-end))
	default:
		_, err := tx.Delete(k)
		return err
	}
}

// foldNodeSpace brings the free-space records up to date with the node
// blocks allocated and released since the last fold, until folding causes
// no further node changes (updating a free-space record may itself copy a
// node). It returns the released blocks: they may be reused once the
// checkpoint being prepared is durable. opLock is held exclusively.
func (s *Store) foldNodeSpace() ([]uint64, error) {
	var released []uint64
	for round := 0; ; round++ {
		// Blocks reserved for splits that did not happen are not in use.
		for _, t := range s.trees {
			t.DropSpare()
		}
		s.nodeMu.Lock()
		ev := s.nodeEv
		s.nodeEv = nil
		s.nodeMu.Unlock()
		if len(ev) == 0 {
			return released, nil
		}
		if round > 64 {
			return released, errors.New("tree node space does not settle")
		}
		// Node blocks come in runs: fold each run of neighbouring blocks
		// with one change to the free-space records. An allocation and a
		// release of the same block in one round cancel out.
		net := make(map[uint64]int, len(ev))
		last := make(map[uint64]bool, len(ev)) // last event was an allocation
		for _, e := range ev {
			if e.alloc {
				net[e.blk]++
			} else {
				net[e.blk]--
			}
			last[e.blk] = e.alloc
		}
		for b, a := range last {
			if !a {
				released = append(released, b)
			}
		}
		var used, freed []uint64
		for b, d := range net {
			switch {
			case d > 0:
				used = append(used, b)
			case d < 0:
				freed = append(freed, b)
			}
		}
		if err := foldRuns(freed, s.spaceFree); err != nil {
			return released, err
		}
		if err := foldRuns(used, s.spaceUse); err != nil {
			return released, err
		}
	}
}

// foldRuns calls fn once per run of consecutive blocks in blks.
func foldRuns(blks []uint64, fn func(start, n uint64) error) error {
	slices.Sort(blks)
	for i := 0; i < len(blks); {
		k := i + 1
		for k < len(blks) && blks[k] == blks[k-1]+1 {
			k++
		}
		if err := fn(blks[i], uint64(k-i)); err != nil {
			return fmt.Errorf("node blocks %d+%d: %w", blks[i], k-i, err)
		}
		i = k
	}
	return nil
}

// agState is the in-memory part of an AG header: counters the checkpoint
// writes into the AG's tree.
type agState struct {
	mu      sync.Mutex // leaf
	inodes  int64
	streams map[streamKey]int64 // inodes with a stream, by stream and source
	dirty   bool
}

// streamKey is a stream id and where an inode's stream came from.
type streamKey struct {
	id  uint32
	src uint8
}

func (a *agState) add(stream uint32, src uint8, d int64) {
	a.mu.Lock()
	a.inodes += d
	if stream != 0 {
		if a.streams == nil {
			a.streams = map[streamKey]int64{}
		}
		a.streams[streamKey{stream, src}] += d
	}
	a.dirty = true
	a.mu.Unlock()
}

func (a *agState) moveStream(from, to streamKey) {
	if from == to {
		return
	}
	a.mu.Lock()
	if a.streams == nil {
		a.streams = map[streamKey]int64{}
	}
	if from.id != 0 {
		a.streams[from]--
	}
	if to.id != 0 {
		a.streams[to]++
	}
	a.dirty = true
	a.mu.Unlock()
}

// loadAGs reads every AG header and stream count.
func (s *Store) loadAGs() error {
	s.ags = make([]agState, s.sb.AGCount)
	for ag, t := range s.trees {
		v, ok, err := t.Get(format.AGHeaderKey())
		if err != nil {
			return fmt.Errorf("AG %d header: %w", ag, treeErr(err))
		}
		h, err := format.DecodeAGHeader(v)
		if !ok {
			err = fmt.Errorf("AG %d header missing: %w", ag, format.ErrCorrupt)
		} else if err != nil {
			err = fmt.Errorf("AG %d: %w", ag, err)
		}
		if err != nil {
			if s.check == nil {
				return err
			}
			s.check.BadAGHeader(ag, err)
			h = &format.AGHeader{}
		}
		s.agNext[ag].Store(h.NextAgino)
		st := &s.ags[ag]
		st.inodes = int64(h.Inodes)
		err = t.Ascend(format.StreamCountPrefix(), func(k, v []byte) bool {
			if !bytes.HasPrefix(k, format.StreamCountPrefix()) || len(k) != 7 || len(v) != 8 {
				return false
			}
			if st.streams == nil {
				st.streams = map[streamKey]int64{}
			}
			st.streams[streamKey{be32(k[2:]), k[6]}] = int64(le64(v))
			return true
		})
		if err != nil {
			return fmt.Errorf("AG %d stream counts: %w", ag, treeErr(err))
		}
	}
	v, ok, err := s.trees[0].Get(rotorKey)
	if err != nil {
		return treeErr(err)
	}
	if ok && len(v) == 4 {
		s.rotor.Store(le32(v) % s.sb.AGCount)
	}
	return nil
}

// rotorKey keeps the next directory AG in AG 0's tree (an AG-area key).
var rotorKey = format.RotorKey()

// storeAGs writes changed AG headers into the trees. opLock held exclusively.
func (s *Store) storeAGs() error {
	for ag := range s.ags {
		st := &s.ags[ag]
		st.mu.Lock()
		dirty := st.dirty
		st.dirty = false
		h := format.AGHeader{NextAgino: s.agNext[ag].Load(), Inodes: uint64(max(st.inodes, 0))}
		streams := make(map[streamKey]int64, len(st.streams))
		for k, v := range st.streams {
			streams[k] = v
		}
		st.mu.Unlock()
		t := s.trees[ag]
		old, _, err := t.Get(format.AGHeaderKey())
		if err != nil {
			return treeErr(err)
		}
		if nv := h.Encode(); !bytes.Equal(old, nv) {
			if err := t.Put(format.AGHeaderKey(), nv); err != nil {
				return treeErr(err)
			}
		}
		if !dirty {
			continue
		}
		for k, n := range streams {
			if n <= 0 {
				if _, err := t.Delete(format.StreamCountKey(k.id, k.src)); err != nil {
					return treeErr(err)
				}
				continue
			}
			if err := t.Put(format.StreamCountKey(k.id, k.src), put64(uint64(n))); err != nil {
				return treeErr(err)
			}
		}
	}
	r := s.rotor.Load()
	return treeErr(s.trees[0].Put(rotorKey, put32(r)))
}
