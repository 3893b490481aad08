// Package meta is the filesystem core below FUSE: inodes, directories,
// extent maps and file data I/O. The metadata lives in one copy-on-write
// B+tree per AG on the device (trees.go, package tree), read on demand
// through a bounded node cache; a write-ahead journal (package wal) makes
// changes durable at fsync and checkpoints write only the tree nodes that
// changed (the on-disk format is package format). Every operation reserves
// the tree blocks it may need before it changes anything (space.go). The
// FUSE layer (package fs) translates requests into calls here; fsck
// (package fsck) checks an unmounted image through the few capabilities
// fsckhost.go gives it.
//
// Lock order, outermost first:
//
//	Store.renameMu          cross-directory renames of directories
//	Inode.mu                several at once in ascending inode number
//	Store.opLock (shared)   every change to the trees (apply) and the journal
//	wal stripe locks        appending to the open transaction (wal.Log.Append)
//	tree locks (one per AG tree, one tree at a time), inodeTable shard
//	locks, Store.dirtyMu, Store.nodeMu, agState.mu, Inode.preMu,
//	allocator AG locks (leaves)
//
// The log's commitMu (wal.Log) is taken with no opLock held; a checkpoint
// takes opLock exclusively under commitMu (logHost.Freeze) to snapshot the
// trees. Several paths take commitMu while holding inode locks — a space
// reservation that commits or checkpoints to make room, the ENOSPC
// commit-and-retry, fsync — which is safe because nothing that holds
// commitMu or opLock exclusively ever waits for an inode lock (making room
// journals other dirty inodes only when their locks are free).
package meta

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/streamfs/streamfs/alloc"
	"github.com/streamfs/streamfs/backend"
	"github.com/streamfs/streamfs/fs/format"
	"github.com/streamfs/streamfs/fs/meta/fsck"
	"github.com/streamfs/streamfs/fs/meta/tree"
	"github.com/streamfs/streamfs/fs/meta/wal"
)

// Options are the mount-time choices.
type Options struct {
	ReadOnly       bool
	Discard        bool          // discard freed blocks on the device
	Policy         alloc.Policy  // placement policy
	PlacementCache bool          // per-inode placement cache
	CommitInterval time.Duration // periodic journal commit; 0: 5s
	CacheBytes     int64         // metadata node cache; 0: DefaultCacheBytes
	NoRecovery     bool          // read-only without replaying the journal (XFS's norecovery)
	// ACL stores POSIX ACLs and keeps them and the mode in step (acl.go);
	// without it the ACL names are not supported, as on ext4 with noacl.
	ACL    bool
	Logger *zap.Logger
}

// DefaultCacheBytes bounds the metadata node cache unless told otherwise.
const DefaultCacheBytes = 256 << 20

// Store is a mounted filesystem.
type Store struct {
	dev      backend.Device
	sb       *format.Super
	bs       uint64
	alloc    *alloc.Allocator
	log      *zap.Logger
	opts     Options
	readOnly atomic.Bool // mounted read-only (device opened so) until a remount read-write (makeWritable)
	// remountRO is set by a remount read-only (SetReadOnly); modeMu
	// serialises remounts and Close.
	remountRO atomic.Bool
	modeMu    sync.Mutex

	itab   *inodeTable
	agNext []atomic.Uint32 // next agino per AG
	rotor  atomic.Uint32   // AG of the next new directory
	ags    []agState       // per-AG counters

	zones *zoneData // the zoned layout's data space (zoned.go); nil otherwise

	trees       []*tree.Tree // one per AG; immutable after open
	cache       *tree.Cache
	metaReserve uint64 // blocks data allocation leaves for metadata

	nodeMu     sync.Mutex   // leaf; guards nodeEv
	nodeEv     []nodeEvent  // node blocks allocated/released since the last fold
	nodeAllocs atomic.Int64 // node blocks allocated since the last checkpoint
	nodeFrees  atomic.Int64 // node blocks released since the last checkpoint (it gives them back)
	kick       chan struct{}

	preBlocks atomic.Int64 // blocks held in preallocation windows (prealloc.go)
	preOwners sync.Map     // *Inode → struct{}: inodes holding windows (ENOSPC takes them all back)

	// Metadata space reservations (space.go).
	metaHeld   atomic.Int64  // node blocks reserved by operations in flight
	dirtyCount atomic.Int64  // len(dirty): each dirty inode holds a reservation too
	treeHeight atomic.Uint64 // tallest tree at mount or the last checkpoint

	found     *wal.Found // the checkpoint the mount started from, and damage seen
	enospcLog atomic.Int64

	renameMu sync.Mutex   // see package doc
	opLock   sync.RWMutex // see package doc
	j        *wal.Log

	dirtyMu sync.Mutex // leaf; guards dirty
	dirty   map[*Inode]struct{}

	ckptBytes atomic.Uint64 // bytes of tree nodes the last checkpoint wrote
	stats     storeStats

	stop   chan struct{}
	stopWG sync.WaitGroup

	// check is fsck taking part in the load of an image that may be
	// damaged (package fsck; fsckhost.go); nil for a mount.
	check fsck.Loader
}

// badCommitHook is the replay's handler of undecodable commits: fsck's,
// or none (fail).
func (s *Store) badCommitHook() func(error) {
	if s.check == nil {
		return nil
	}
	return s.check.BadCommit
}

type storeStats struct {
	checkpoints atomic.Uint64
	pauseMax    atomic.Int64 // longest checkpoint pause of operations (ns)
	pauseTotal  atomic.Int64
	// Bytes written per stream: ids below 256 in the array, others in
	// the map (uint32 → *atomic.Uint64).
	smallStreams [256]atomic.Uint64
	streamBytes  sync.Map
	dataErrors   atomic.Uint64
}

func (st *storeStats) notePause(d time.Duration) {
	st.pauseTotal.Add(int64(d))
	for {
		cur := st.pauseMax.Load()
		if int64(d) <= cur || st.pauseMax.CompareAndSwap(cur, int64(d)) {
			return
		}
	}
}

// Counters are what the filesystem did since mount, for `streamfs stats`.
type Counters struct {
	Checkpoints       uint64 `json:"checkpoints"`
	Shutdown          bool   `json:"shutdown"`
	DataIOErrors      uint64 `json:"data_io_errors"`
	ReadOnly          bool   `json:"read_only"`
	CheckpointPayload uint64 `json:"checkpoint_bytes"`
	CacheHits         uint64 `json:"node_cache_hits"`
	CacheMisses       uint64 `json:"node_cache_misses"`
	// CheckpointPauseMax is the longest time a checkpoint held operations
	// back (while it copied the dirty tree nodes), in microseconds.
	CheckpointPauseMax   int64 `json:"checkpoint_pause_max_us"`
	CheckpointPauseTotal int64 `json:"checkpoint_pause_total_us"`
}

// Counters returns the counters.
func (s *Store) Counters() Counters {
	c := Counters{
		Checkpoints:          s.stats.checkpoints.Load(),
		Shutdown:             s.j.Failed(),
		DataIOErrors:         s.stats.dataErrors.Load(),
		ReadOnly:             s.ReadOnly(),
		CheckpointPayload:    s.ckptBytes.Load(),
		CheckpointPauseMax:   s.stats.pauseMax.Load() / 1000,
		CheckpointPauseTotal: s.stats.pauseTotal.Load() / 1000,
	}
	if s.cache != nil {
		c.CacheHits, c.CacheMisses = s.cache.Metrics()
	}
	return c
}

// ReadSuper reads the primary superblock, falling back to the backup copy
// at the end of the device. usedBackup says the primary was bad.
func ReadSuper(dev backend.Device) (sb *format.Super, usedBackup bool, err error) {
	if dev.Size() < format.SuperSize {
		return nil, false, fmt.Errorf("device is %d bytes, too small to hold a superblock: %w", dev.Size(), format.ErrNotStreamfs)
	}
	buf := make([]byte, format.SuperSize)
	if err := dev.ReadAt(buf, 0); err != nil {
		return nil, false, fmt.Errorf("reading superblock: %w", err)
	}
	sb, perr := format.DecodeSuper(buf)
	if perr == nil {
		if sb.TotalBlocks*uint64(sb.BlockSize) > uint64(dev.Size()) {
			perr = fmt.Errorf("superblock says %d bytes, device has %d (truncated image?): %w",
				sb.TotalBlocks*uint64(sb.BlockSize), dev.Size(), format.ErrCorrupt)
		} else {
			return sb, false, nil
		}
	}
	if errors.Is(perr, format.ErrNewerFormat) {
		return nil, false, perr
	}
	// The backup is the last block of the device, for whatever block size
	// (of the conventional zones on a zoned device).
	size := dev.Size()
	if z, ok := dev.(backend.Zoned); ok {
		g := z.Geometry()
		size = int64(g.Conventional) * g.ZoneSize
	}
	for bs := int64(65536); bs >= 512; bs /= 2 {
		off := (size/bs - 1) * bs
		if off <= 0 {
			continue
		}
		if err := dev.ReadAt(buf, off); err != nil {
			continue
		}
		b, err := format.DecodeSuper(buf)
		if err != nil || int64(b.BlockSize) != bs || b.TotalBlocks*uint64(bs) > uint64(dev.Size()) {
			continue
		}
		return b, true, nil
	}
	if errors.Is(perr, format.ErrNotStreamfs) {
		return nil, false, fmt.Errorf("no streamfs superblock (foreign or blank device; run streamfs mkfs): %w", perr)
	}
	return nil, false, fmt.Errorf("primary superblock unusable and no valid backup: %w", perr)
}

// WriteSuper writes the primary and backup superblocks and flushes.
func WriteSuper(dev backend.Device, sb *format.Super) error {
	b := make([]byte, sb.BlockSize)
	copy(b, sb.Encode())
	if err := dev.WriteAt(b, 0, backend.StreamMeta); err != nil {
		return fmt.Errorf("writing primary superblock: %w", err)
	}
	if err := dev.WriteAt(b, int64(sb.BackupBlock*uint64(sb.BlockSize)), backend.StreamMeta); err != nil {
		return fmt.Errorf("writing backup superblock: %w", err)
	}
	return dev.Flush()
}

// Open mounts the filesystem on dev: reads the superblock and the newest
// checkpoint's tree roots, replays the journal into the trees, frees
// orphans and (unless read-only) writes a fresh checkpoint. Nothing is read
// in proportion to the number of files: the trees are read on demand.
func Open(dev backend.Device, opts Options) (*Store, error) {
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	sb, backup, err := ReadSuper(dev)
	if err != nil {
		return nil, err
	}
	if backup {
		log.Warn("primary superblock is corrupt; mounted from the backup copy (streamfs fsck -y rewrites it)")
	}
	ro := opts.ReadOnly
	if opts.NoRecovery && !ro {
		return nil, errors.New("norecovery needs a read-only mount (-o ro,norecovery)")
	}
	if sb.ReadOnlyOnly() && !ro {
		return nil, fmt.Errorf("filesystem has read-only-compatible features %#x this build does not know: mount with -o ro", sb.ROCompat)
	}
	s := newStore(dev, sb, opts, ro)
	start := time.Now()
	h, commits, records, err := s.load(!opts.NoRecovery)
	if err == nil {
		err = s.openZones()
	}
	if err != nil {
		s.closeCaches()
		return nil, err
	}
	if !ro {
		// The replayed state goes into a checkpoint before anything new.
		// Even with nothing replayed: the checkpoint moves the journal past
		// the sequence number replay stopped at, whose torn copy may be on
		// the media; a new commit under that number could be mistaken
		// for it (or it for the new commit) by the next replay.
		if err := s.checkpoint(); err != nil {
			s.closeCaches()
			return nil, fmt.Errorf("writing checkpoint after recovery: %w", err)
		}
	}
	orphans, err := s.reclaimOrphans()
	if err != nil {
		s.closeCaches()
		return nil, err
	}
	if !ro && orphans > 0 {
		if err := s.checkpoint(); err != nil {
			s.closeCaches()
			return nil, fmt.Errorf("writing checkpoint after freeing orphans: %w", err)
		}
	}
	if !ro {
		// Replay reserved every block its records mapped; start afresh from
		// the free-space records now that they are durable.
		if err := s.rebuildAllocator(); err != nil {
			s.closeCaches()
			return nil, err
		}
		if err := s.loadZones(); err != nil {
			s.closeCaches()
			return nil, err
		}
	}
	log.Info("mounted",
		zap.String("uuid", format.UUIDString(sb.UUID)),
		zap.Uint64("checkpoint", h.Seq),
		zap.Int("replayed_commits", commits),
		zap.Int("replayed_records", records),
		zap.Int("orphans_reclaimed", orphans),
		zap.Bool("read_only", ro),
		zap.Bool("norecovery", opts.NoRecovery),
		zap.Duration("took", time.Since(start)))
	if !ro {
		s.stopWG.Add(1)
		go s.committer()
	}
	return s, nil
}

// makeWritable turns a store mounted read-only read-write (a remount
// read-write), ending as Open ends for a read-write mount: the device
// reopened for writing, what the mount replayed in memory made durable by
// a checkpoint (which also moves the journal past where replay stopped),
// the allocator rebuilt from the durable free-space records, orphans
// freed and the committer started. It refuses, leaving the mount
// read-only and working, a norecovery mount (its journal was not
// replayed: writing over it would lose what it holds, as XFS refuses),
// unknown read-only-compatible features, a shut-down filesystem and a
// write-protected device. A failed checkpoint write shuts the filesystem
// down like any failed metadata write: reads go on, and the next mount
// recovers from the journal. s.modeMu is held.
func (s *Store) makeWritable() error {
	select {
	case <-s.stop:
		return fmt.Errorf("remount read-write: unmounted: %w", syscall.EINVAL)
	default:
	}
	switch {
	case s.opts.NoRecovery:
		return fmt.Errorf("mounted with norecovery: the journal was not replayed, so the filesystem cannot go read-write; unmount and mount it read-write: %w", syscall.EINVAL)
	case s.sb.ReadOnlyOnly():
		return fmt.Errorf("filesystem has read-only-compatible features %#x this build does not know: %w", s.sb.ROCompat, syscall.EOPNOTSUPP)
	case s.j.Failed():
		return fmt.Errorf("remount read-write: %w", ErrJournalFailed)
	}
	if err := backend.MakeWritable(s.dev); err != nil {
		if errors.Is(err, backend.ErrCannotReopen) {
			err = fmt.Errorf("%w: %w", err, syscall.EOPNOTSUPP)
		}
		return fmt.Errorf("remount read-write: %w", err)
	}
	s.j.SetWritable()
	// Operations are still refused (readOnly): nothing but the
	// checkpoint and the orphans below changes the trees.
	if err := s.checkpoint(); err != nil {
		return fmt.Errorf("remount read-write: writing a checkpoint of the mounted state: %w", err)
	}
	fresh, err := s.buildAllocator()
	if err == nil {
		err = s.alloc.ReplaceFree(fresh)
		fresh.Close()
	}
	if err != nil {
		// Read-only, the allocator only over-reserves (replay kept every
		// block its records mapped): safe, space comes back at the next
		// mount.
		s.log.Warn("remount read-write: free space not rebuilt; blocks replay reserved stay in use until the next mount", zapErr(err))
	}
	if err := s.loadZones(); err != nil {
		// Nothing was written to the zones; the checkpoint above is fine
		// for a read-only mount too.
		return fmt.Errorf("remount read-write: %w", err)
	}
	s.readOnly.Store(false)
	s.freeClosedOrphans()
	s.stopWG.Add(1)
	go s.committer()
	s.log.Info("remounted read-write", zap.Uint64("checkpoint", s.j.CheckpointSeq()))
	return nil
}

// newStore builds an empty Store for sb: no state loaded, no allocator, no
// committer (Open and fsck add those).
func newStore(dev backend.Device, sb *format.Super, opts Options, ro bool) *Store {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.CommitInterval == 0 {
		opts.CommitInterval = 5 * time.Second
	}
	if opts.CacheBytes <= 0 {
		opts.CacheBytes = DefaultCacheBytes
	}
	s := &Store{
		dev: dev, sb: sb, bs: uint64(sb.BlockSize), log: opts.Logger, opts: opts,
		itab:   newInodeTable(),
		agNext: make([]atomic.Uint32, sb.AGCount),
		dirty:  make(map[*Inode]struct{}),
		stop:   make(chan struct{}),
		kick:   make(chan struct{}, 1),
	}
	s.readOnly.Store(ro)
	s.metaReserve = min(max(sb.TotalBlocks/200, 256), 1<<18)
	s.j = wal.New(dev, wal.GeometryOf(sb), (*logHost)(s), ro)
	return s
}

// load reads the newest checkpoint, opens the trees and the allocator, and
// replays the journal after it (unless !recover).
func (s *Store) load(recover bool) (h *format.CkptHeader, commits, records int, err error) {
	found, err := wal.ReadCheckpoint(s.dev, wal.GeometryOf(s.sb))
	if err != nil {
		return nil, 0, 0, err
	}
	s.found, h = found, found.Header
	if found.Damage != nil {
		// A crash while a checkpoint writes its slot leaves a valid header
		// (sectors land whole) over roots that do not verify. That is
		// benign when the slot is older than the one in use (it was being
		// overwritten) or when the journal still holds everything the
		// interrupted checkpoint contained; wal.Log.Interrupted decides
		// once the journal is replayed.
		s.log.Warn("a checkpoint slot is damaged; using the other one (streamfs fsck reports it)", zap.Error(found.Damage))
	}
	s.j.Start(h.Seq, found.Slot, h.JournalSeq, h.JournalPos)
	if err := s.openTrees(found.Roots); err != nil {
		return nil, 0, 0, err
	}
	s.noteHeight()
	if err := s.loadAGs(); err != nil {
		return nil, 0, 0, err
	}
	if err := s.rebuildAllocator(); err != nil {
		return nil, 0, 0, err
	}
	if s.check != nil {
		s.check.BeforeReplay()
	}
	if !recover {
		s.log.Warn("norecovery: the journal is not replayed; changes committed after the last checkpoint are not visible",
			zap.Uint64("checkpoint", h.Seq))
		return h, 0, 0, nil
	}
	// First pass: keep every block the journal maps away from the tree
	// nodes that replay allocates. Second pass: apply.
	var quiet func(error)
	if s.check != nil {
		quiet = func(error) {} // reported by the second pass
	}
	_, _, err = s.j.Replay(h, func(r *format.Record) error {
		if r.Type == format.RecMap {
			s.reserve(r.PBlk, r.Len)
		}
		return nil
	}, quiet)
	if err != nil {
		return nil, 0, 0, err
	}
	var freed []alloc.Extent
	commits, records, err = s.j.Replay(h, func(r *format.Record) error { return s.apply(r, &freed) }, s.badCommitHook())
	if err != nil {
		return nil, 0, 0, err
	}
	if root, err := s.loadInode(RootIno); err != nil || root == nil || !root.IsDir() {
		return nil, 0, 0, fmt.Errorf("root directory missing or unreadable: %w", errors.Join(err, format.ErrCorrupt))
	}
	return h, commits, records, nil
}

// reserve marks blocks used in the allocator, whatever of them is free.
func (s *Store) reserve(start, n uint64) {
	if !s.sb.InMetaArea(start, n) {
		return // apply reports it, or blocks of a sequential zone (no free-space records)
	}
	if s.alloc.MarkUsed(start, n) == nil {
		return
	}
	for b := start; b < start+n; b++ {
		_ = s.alloc.MarkUsed(b, 1)
	}
}

// rebuildAllocator makes a fresh allocator whose free space is what the
// trees' free-space records say.
func (s *Store) rebuildAllocator() error {
	a, err := s.buildAllocator()
	if err != nil {
		return err
	}
	if s.alloc != nil {
		s.alloc.Close()
	}
	s.alloc = a
	return nil
}

// buildAllocator returns an allocator whose free space is what the trees'
// free-space records say.
func (s *Store) buildAllocator() (*alloc.Allocator, error) {
	a, err := alloc.New(alloc.Geometry{AGCount: s.sb.AGCount, AGBlocks: s.sb.AGBlocks, TotalBlocks: s.sb.TotalBlocks},
		alloc.Options{Policy: s.opts.Policy, HWStreams: s.dev.MaxStreams(), PlacementCache: s.opts.PlacementCache})
	if err != nil {
		return nil, fmt.Errorf("allocator: %w", err)
	}
	for ag, t := range s.trees {
		agStart := uint64(ag) * s.sb.AGBlocks
		agEnd := min(agStart+s.sb.AGBlocks, s.sb.TotalBlocks)
		cursor := agStart
		var derr error
		err := t.Ascend(format.FreePrefix(), func(k, v []byte) bool {
			if len(k) == 0 || k[0] != format.KeyFreeSpc {
				return false
			}
			fs, fn, err := format.DecodeFree(k, v)
			if err != nil {
				if s.check != nil {
					return true
				}
				derr = err
				return false
			}
			if fs < cursor || fs+fn > agEnd || fs < s.sb.MetaEnd() || fs+fn > s.sb.BackupBlock {
				if s.check != nil {
					return true
				}
				derr = fmt.Errorf("free extent %d+%d out of order or outside AG %d's data area: %w", fs, fn, ag, format.ErrCorrupt)
				return false
			}
			if fs > cursor {
				derr = a.MarkUsed(cursor, fs-cursor)
			}
			cursor = fs + fn
			return derr == nil
		})
		if err != nil && derr == nil && s.check != nil {
			// A node on the way does not verify: the rest of the AG
			// counts as used.
			err = nil
		}
		if err == nil {
			err = derr
		}
		if err == nil && agEnd > cursor {
			err = a.MarkUsed(cursor, agEnd-cursor)
		}
		if err != nil {
			a.Close()
			return nil, fmt.Errorf("AG %d free space: %w", ag, treeErr(err))
		}
	}
	return a, nil
}

// reclaimOrphans frees inodes left unlinked-but-open by a crash (they are
// listed in the AG trees; a read-only mount leaves them).
func (s *Store) reclaimOrphans() (int, error) {
	var orphans []uint64
	for ag, t := range s.trees {
		err := t.Ascend(format.OrphanPrefix(), func(k, v []byte) bool {
			if len(k) != 10 || k[0] != format.KeyAG || k[1] != format.OrphanPrefix()[1] {
				return false
			}
			orphans = append(orphans, binary.BigEndian.Uint64(k[2:]))
			return true
		})
		if err != nil {
			return 0, fmt.Errorf("AG %d orphans: %w", ag, treeErr(err))
		}
	}
	if s.readOnly.Load() {
		return 0, nil
	}
	for _, ino := range orphans {
		in, err := s.loadInode(ino)
		if err != nil {
			return 0, err
		}
		if in == nil {
			// Only the orphan entry is left: RecFree removes it.
			tx, err := s.beginOp(opsInode, spacePool)
			if err != nil {
				return 0, err
			}
			tx.free(ino)
			err = tx.commit()
			tx.end()
			if err != nil {
				return 0, err
			}
			continue
		}
		in.mu.Lock()
		err = s.freeOrphanLocked(in)
		in.mu.Unlock()
		if err != nil {
			return 0, err
		}
	}
	return len(orphans), nil
}

// begin starts an operation's transaction: opLock is taken shared and the
// caller releases it after commit.
func (s *Store) begin() *txn {
	s.opLock.RLock()
	t := txnPool.Get().(*txn)
	*t = txn{s: s}
	t.e.Buf = t.inline[:0]
	return t
}

// beginOp reserves the metadata blocks of ops tree changes of class c
// (space.go), then begins. The caller must not hold opLock; it ends the
// transaction with txn.end, which releases both.
func (s *Store) beginOp(ops int, c spaceClass) (*txn, error) {
	n, err := s.reserveMeta(ops, c)
	if err != nil {
		return nil, err
	}
	t := s.begin()
	t.resv = n
	return t, nil
}

// txnPool recycles transactions of the write path (mapLocked), the one
// operation that runs for every allocating write; others leave theirs to
// the collector.
var txnPool = sync.Pool{New: func() any { return new(txn) }}

// needCheckpoint says the dirty tree nodes should be written: they are
// pinned in memory until then, so this bounds memory.
func (s *Store) needCheckpoint() bool {
	return s.nodeAllocs.Load()*int64(s.bs) > s.dirtyLimit()
}

// dirtyLimit bounds the bytes of tree nodes changed since the last
// checkpoint: a quarter of the cache, at most 32 MiB, so a checkpoint
// stays short and pinned nodes stay a small part of memory.
func (s *Store) dirtyLimit() int64 { return min(s.opts.CacheBytes/4, 32<<20) }

// kickCheckpoint asks the committer for a checkpoint when enough tree nodes
// changed; it never blocks.
func (s *Store) kickCheckpoint() {
	if s.needCheckpoint() || s.lowRoom() {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

func (s *Store) closeCaches() {
	if s.alloc != nil {
		s.alloc.Close()
	}
	if s.cache != nil {
		s.cache.Close()
	}
	if s.zones != nil {
		s.zones.a.Close()
	}
}

// committer commits the journal periodically: the kernel never forwards
// syncfs, so this bounds what a crash loses without fsync.
func (s *Store) committer() {
	defer s.stopWG.Done()
	t := time.NewTicker(s.opts.CommitInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			if err := s.SyncAll(); err != nil && !errors.Is(err, ErrJournalFailed) {
				s.log.Error("periodic commit failed", zapErr(err))
			}
			if s.needCheckpoint() {
				_ = s.checkpoint()
			}
		case <-s.kick:
			if s.lowRoom() {
				s.logAllDirty(true)
			}
			if s.needCheckpoint() || s.lowRoom() {
				_ = s.checkpoint()
			}
		}
	}
}

// SyncAll journals every dirty inode and commits.
func (s *Store) SyncAll() error {
	if s.readOnly.Load() {
		return nil
	}
	s.logAllDirty(false)
	return s.j.Sync()
}

// logAllDirty journals every dirty inode; with try, only those whose lock
// is free (the caller may hold inode locks).
func (s *Store) logAllDirty(try bool) {
	s.dirtyMu.Lock()
	var ins []*Inode
	for in := range s.dirty {
		ins = append(ins, in)
	}
	s.dirtyMu.Unlock()
	for _, in := range ins {
		if try {
			if !in.mu.TryLock() {
				continue
			}
		} else {
			in.mu.Lock()
		}
		s.logDirtyLocked(in)
		in.mu.Unlock()
	}
}

// Close flushes everything and writes a final checkpoint (nothing is left
// to replay after a clean unmount): only what changed since the last one.
// The device is the caller's to close.
func (s *Store) Close() error {
	s.modeMu.Lock() // not while a remount starts the committer
	defer s.modeMu.Unlock()
	select {
	case <-s.stop:
		return nil
	default:
	}
	t0 := time.Now()
	close(s.stop)
	s.stopWG.Wait()
	t1 := time.Now()
	var err error
	t2 := t1 // read-only or failed: no commit, no checkpoint
	// After a remount read-only nothing changed since its checkpoint, and
	// nothing may be written any more.
	if !s.readOnly.Load() && !s.remountRO.Load() && !s.j.Failed() {
		if err = s.SyncAll(); err == nil {
			t2 = time.Now()
			err = s.checkpoint()
		}
	}
	t3 := time.Now()
	s.closeCaches()
	if err != nil {
		return fmt.Errorf("final checkpoint: %w", err)
	}
	if s.j.Failed() {
		s.log.Info("unmounted a shut-down filesystem; the next mount recovers from the log")
		return nil
	}
	// Where an unmount's time goes: the committer finishing, the last
	// commit, the final checkpoint.
	s.log.Info("unmounted cleanly", zap.Duration("committer_stop", t1.Sub(t0)),
		zap.Duration("final_commit", t2.Sub(t1)), zap.Duration("final_checkpoint", t3.Sub(t2)),
		zap.Uint64("checkpoint_bytes", s.ckptBytes.Load()))
	return nil
}

// shutdown stops all metadata writes after a failed one, as XFS does: the
// failed write or flush may or may not be on the media, so nothing may be
// built on it. Reads go on; every change and fsync gets EIO; the next mount
// recovers from the journal. It returns the error for the caller to pass on.
func (s *Store) shutdown(err error) error { return s.j.Fail(err) }

// ErrJournalFailed means a metadata write failed and the filesystem shut
// down: nothing more is committed until it is mounted again.
var ErrJournalFailed = wal.ErrFailed

// Shutdown flags (FS_IOC_SHUTDOWN).
const (
	ShutdownDefault    = 0 // flush data and the log, then shut down
	ShutdownLogFlush   = 1 // commit the log, then shut down
	ShutdownNoLogFlush = 2 // shut down at once; uncommitted changes are lost
)

// Shutdown shuts the filesystem down on request (FS_IOC_SHUTDOWN).
func (s *Store) Shutdown(flags uint32) error {
	switch flags {
	case ShutdownDefault, ShutdownLogFlush:
		if !s.readOnly.Load() {
			if err := s.SyncAll(); err != nil && !errors.Is(err, ErrJournalFailed) {
				return err
			}
		}
	case ShutdownNoLogFlush:
	default:
		return syscall.EINVAL
	}
	if s.j.Stop() {
		s.log.Warn("filesystem shut down on request (FS_IOC_SHUTDOWN); unmount, then mount again to recover from the log",
			zap.Uint32("flags", flags))
	}
	return nil
}

// writable returns EROFS once the filesystem went read-only.
func (s *Store) writable() error {
	if s.readOnly.Load() || s.remountRO.Load() {
		return syscall.EROFS
	}
	if s.j.Failed() {
		return syscall.EIO
	}
	return nil
}

func zapErr(err error) zap.Field { return zap.Error(err) }

// Super returns the superblock.
func (s *Store) Super() *format.Super { return s.sb }

// Allocator returns the block allocator.
func (s *Store) Allocator() *alloc.Allocator { return s.alloc }

// MaxStreams is the number of write streams files may carry (the
// FS_IOC_WRITE_STREAM GET_MAX answer): the AG allocator's, or on zones
// what the open and active zone limits leave room for.
func (s *Store) MaxStreams() uint32 {
	if n, ok := s.zoneStreams(); ok {
		return n
	}
	return s.alloc.MaxStreams()
}

// Device returns the backend device.
func (s *Store) Device() backend.Device { return s.dev }

// ReadOnly reports a read-only mount.
func (s *Store) ReadOnly() bool { return s.readOnly.Load() || s.remountRO.Load() || s.j.Failed() }

// markDirtyLocked notes that in's attributes need journaling. in.mu held.
func (s *Store) markDirtyLocked(in *Inode) {
	if in.dirty {
		return
	}
	in.dirty = true
	s.dirtyMu.Lock()
	s.dirty[in] = struct{}{}
	s.dirtyCount.Store(int64(len(s.dirty)))
	s.dirtyMu.Unlock()
}

// logDirtyLocked journals in's attributes if they changed. in.mu held.
func (s *Store) logDirtyLocked(in *Inode) {
	s.opLock.RLock() // a checkpoint clears dirty marks under opLock alone
	if in.dirty && !in.freed {
		tx := &txn{s: s}
		tx.inode(&in.attr)
		in.dirty = false
		_ = tx.commit()
	}
	s.dirtyMu.Lock()
	if !in.dirty {
		delete(s.dirty, in)
		s.dirtyCount.Store(int64(len(s.dirty)))
	}
	s.dirtyMu.Unlock()
	s.opLock.RUnlock()
}

// clearDirty forgets dirty marks after a checkpoint captured them and
// returns the inodes it cleared. opLock is held exclusively.
func (s *Store) clearDirty() []*Inode {
	s.dirtyMu.Lock()
	defer s.dirtyMu.Unlock()
	var cleared []*Inode
	for in := range s.dirty {
		in.dirty = false
		cleared = append(cleared, in)
	}
	s.dirty = make(map[*Inode]struct{})
	s.dirtyCount.Store(0)
	return cleared
}
