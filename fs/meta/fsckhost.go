package meta

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/streamfs/streamfs/alloc"
	"github.com/streamfs/streamfs/backend"
	"github.com/streamfs/streamfs/fs/format"
	"github.com/streamfs/streamfs/fs/meta/fsck"
	"github.com/streamfs/streamfs/fs/meta/tree"
	"github.com/streamfs/streamfs/fs/meta/wal"
)

// Fsck checks the filesystem on dev, which the caller has opened with its
// exclusive lock (nothing may have it mounted), and with opts.Repair
// repairs it: package fsck, over the Store as its host. The error is for
// operational failures only; metadata errors are in the report.
func Fsck(dev backend.Device, opts fsck.Options) (*fsck.Report, error) {
	return fsck.Check(dev, opts, fsckHost{})
}

// fsckHost opens Stores for fsck; checkImage is a Store seen by fsck, with
// only the capabilities the package's interfaces name.
type (
	fsckHost   struct{}
	checkImage Store
)

var (
	_ = (fsck.Host)(fsckHost{})
	_ = (fsck.Loading)((*checkImage)(nil))
	_ = (fsck.Trees)((*checkImage)(nil))
	_ = (fsck.Space)((*checkImage)(nil))
	_ = (fsck.Counters)((*checkImage)(nil))
	_ = (fsck.Repairs)((*checkImage)(nil))
	_ = (fsck.Zones)((*checkImage)(nil))
	_ = (fsck.Edit)((*fsckEdit)(nil))
)

// ReadSuper implements fsck.Host.
func (fsckHost) ReadSuper(dev backend.Device) (*format.Super, error) {
	sb, _, err := ReadSuper(dev)
	return sb, err
}

// WriteSuper implements fsck.Host.
func (fsckHost) WriteSuper(dev backend.Device, sb *format.Super) error { return WriteSuper(dev, sb) }

// Open implements fsck.Host: a Store with no state loaded, read-only
// unless repairing.
func (fsckHost) Open(dev backend.Device, sb *format.Super, repair bool, log *zap.Logger, l fsck.Loader) fsck.Image {
	s := newStore(dev, sb, Options{Logger: log}, !repair)
	s.check = l
	return (*checkImage)(s)
}

// Load implements fsck.Loading.
func (c *checkImage) Load() (*format.CkptHeader, int, error) {
	h, commits, _, err := (*Store)(c).load(true)
	return h, commits, err
}

// LoadDamaged implements fsck.Loading.
func (c *checkImage) LoadDamaged() (*format.CkptHeader, error) {
	s := (*Store)(c)
	found, err := wal.ReadCheckpoint(s.dev, wal.GeometryOf(s.sb))
	if err != nil {
		return nil, err
	}
	h, roots := found.Header, found.Roots
	s.j.Start(h.Seq, found.Slot, h.JournalSeq, h.JournalPos)
	if s.cache, err = tree.NewCache(s.opts.CacheBytes); err != nil {
		return nil, fmt.Errorf("tree cache: %w", err)
	}
	s.trees = make([]*tree.Tree, s.sb.AGCount)
	for ag := range s.trees {
		if s.trees[ag], err = tree.OpenDamaged(&nodePager{s: s, ag: uint32(ag)}, s.cache, s.treeConfig(ag), roots[ag]); err != nil {
			return nil, fmt.Errorf("AG %d tree: %w", ag, err)
		}
	}
	if err := s.rebuildAllocator(); err != nil {
		return nil, err
	}
	return h, nil
}

// LoadAGs implements fsck.Loading.
func (c *checkImage) LoadAGs() error { return (*Store)(c).loadAGs() }

// SkipJournal implements fsck.Loading.
func (c *checkImage) SkipJournal(h *format.CkptHeader) (int, error) {
	s := (*Store)(c)
	commits, _, err := s.j.Replay(h, func(*format.Record) error { return nil }, s.badCommitHook())
	return commits, err
}

// SlotDamage implements fsck.Loading.
func (c *checkImage) SlotDamage() (bool, error) {
	s := (*Store)(c)
	if s.found == nil || s.found.Damage == nil {
		return false, nil
	}
	return s.j.Interrupted(s.found), s.found.Damage
}

// FlushInodes implements fsck.Loading.
func (c *checkImage) FlushInodes() []error {
	s := (*Store)(c)
	var errs []error
	for _, in := range s.clearDirty() {
		if !in.freed {
			if err := s.applyInode(&in.attr); err != nil {
				errs = append(errs, fmt.Errorf("inode %d: %w", in.attr.Ino, err))
			}
		}
	}
	return errs
}

// FoldNodeSpace implements fsck.Loading.
func (c *checkImage) FoldNodeSpace() error {
	_, err := (*Store)(c).foldNodeSpace()
	return err
}

// SkipSeq implements fsck.Loading.
func (c *checkImage) SkipSeq(n uint64) { c.j.SkipSeq(n) }

// Checkpoint implements fsck.Loading.
func (c *checkImage) Checkpoint() error { return (*Store)(c).checkpoint() }

// Close implements fsck.Loading.
func (c *checkImage) Close() { (*Store)(c).closeCaches() }

// Super implements fsck.Trees.
func (c *checkImage) Super() *format.Super { return c.sb }

// Trees implements fsck.Trees.
func (c *checkImage) Trees() []*tree.Tree { return c.trees }

// ReplaceTree implements fsck.Trees.
func (c *checkImage) ReplaceTree(ag int, keys, vals [][]byte) error {
	s := (*Store)(c)
	nt, err := tree.Open(&nodePager{s: s, ag: uint32(ag)}, s.cache, s.treeConfig(ag), 0)
	if err != nil {
		return err
	}
	for i, k := range keys {
		if err := nt.Put(k, vals[i]); err != nil {
			return fmt.Errorf("key % x: %w", k, treeErr(err))
		}
	}
	s.trees[ag] = nt
	return nil
}

// Withhold implements fsck.Space. It marks only the free parts used:
// reserve tries block by block once any block is in use, which would cost
// a step per block of every file here.
func (c *checkImage) Withhold(start, n uint64) {
	s := (*Store)(c)
	if !s.sb.InMetaArea(start, n) {
		return
	}
	var free []alloc.Extent
	s.alloc.FreeExtentsIn(start, n, 1, func(e alloc.Extent) bool {
		free = append(free, e)
		return true
	})
	for _, e := range free {
		_ = s.alloc.MarkUsed(e.Start, e.Len) // free a moment ago; fsck runs alone
	}
}

// AGCounters implements fsck.Counters.
func (c *checkImage) AGCounters(ag int) (int64, map[fsck.StreamKey]int64) {
	st := &c.ags[ag]
	st.mu.Lock()
	defer st.mu.Unlock()
	streams := make(map[fsck.StreamKey]int64, len(st.streams))
	for k, n := range st.streams {
		streams[fsck.StreamKey{ID: k.id, Src: k.src}] = n
	}
	return st.inodes, streams
}

// SetAGInodes implements fsck.Counters.
func (c *checkImage) SetAGInodes(ag int, n int64) {
	st := &c.ags[ag]
	st.mu.Lock()
	st.inodes, st.dirty = n, true
	st.mu.Unlock()
}

// SetAGStreams implements fsck.Counters.
func (c *checkImage) SetAGStreams(ag int, streams map[fsck.StreamKey]int64) {
	m := make(map[streamKey]int64, len(streams))
	for k, n := range streams {
		m[streamKey{k.ID, k.Src}] = n
	}
	st := &c.ags[ag]
	st.mu.Lock()
	st.streams, st.dirty = m, true
	st.mu.Unlock()
}

// NextAgino implements fsck.Counters.
func (c *checkImage) NextAgino(ag int) uint32 { return c.agNext[ag].Load() }

// SetNextAgino implements fsck.Counters.
func (c *checkImage) SetNextAgino(ag int, agino uint32) { c.agNext[ag].Store(agino) }

// Rotor implements fsck.Counters.
func (c *checkImage) Rotor() uint32 { return c.rotor.Load() }

// ZoneReport implements fsck.Zones.
func (c *checkImage) ZoneReport() ([]backend.Zone, bool, error) {
	z, ok := c.dev.(backend.Zoned)
	if !ok {
		return nil, false, nil
	}
	report, err := z.ReportZones(0, 0)
	if err != nil {
		return nil, true, fmt.Errorf("%s: %w", c.dev.Kind(), err)
	}
	return report, true, nil
}

// Edit implements fsck.Repairs.
func (c *checkImage) Edit() fsck.Edit { return &fsckEdit{t: txn{s: (*Store)(c)}} }

// NewGen implements fsck.Repairs.
func (c *checkImage) NewGen() uint32 { return newGen() }

// fsckEdit is a transaction fsck's repairs go through: applied as replay
// applies records, never journaled (the repaired checkpoint writes them).
type fsckEdit struct{ t txn }

func (e *fsckEdit) Inode(a *format.InodeRec) { e.t.inode(a) }
func (e *fsckEdit) Link(dir, ino uint64, mode uint32, name string) {
	e.t.link(dir, ino, mode, name)
}
func (e *fsckEdit) Unlink(dir uint64, name string) { e.t.unlink(dir, name) }
func (e *fsckEdit) Done() (bool, error)            { return len(e.t.e.Buf) > 0, e.t.err }
