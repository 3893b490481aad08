// Package meta is the filesystem core below FUSE: inodes, directories,
// extent maps and file data I/O, kept in memory and made durable by a
// write-ahead journal and checkpoints (the on-disk format is package
// format). The FUSE layer (package fs) translates requests into calls here.
//
// Lock order, outermost first:
//
//	Store.renameMu          cross-directory renames of directories
//	Inode.mu                several at once in ascending inode number
//	Store.opLock (shared)   every change to in-memory metadata
//	journal.mu              appending to the open transaction
//	inodeTable shard locks, Store.dirtyMu, allocator AG locks (leaves)
//
// journal.commitMu is taken with no opLock held; a checkpoint takes opLock
// exclusively under commitMu to snapshot the state. Two paths take
// commitMu while holding an inode lock — the ENOSPC commit-and-retry and the
// metadata-room check (metaRoom) — which is safe because nothing that holds
// commitMu or opLock exclusively ever waits for an inode lock.
package meta

import (
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
)

// Options are the mount-time choices.
type Options struct {
	ReadOnly       bool
	Discard        bool          // discard freed blocks on the device
	Policy         alloc.Policy  // placement policy
	PlacementCache bool          // per-inode placement cache
	CommitInterval time.Duration // periodic journal commit; 0: 5s
	ErrorsContinue bool          // errors=continue instead of remount-ro
	NoRecovery     bool          // read-only without replaying the journal (XFS's norecovery)
	Logger         *zap.Logger
}

// Store is a mounted filesystem.
type Store struct {
	dev      backend.Device
	sb       *format.Super
	bs       uint64
	alloc    *alloc.Allocator
	log      *zap.Logger
	opts     Options
	readOnly bool
	// remountRO is set by a remount read-only (SetReadOnly); readOnly is
	// fixed at mount.
	remountRO atomic.Bool

	itab   *inodeTable
	agNext []atomic.Uint32 // next agino per AG
	rotor  atomic.Uint32   // AG of the next new directory

	renameMu sync.Mutex   // see package doc
	opLock   sync.RWMutex // see package doc
	j        *journal

	dirtyMu sync.Mutex // leaf; guards dirty
	dirty   map[*Inode]struct{}

	metaFull  atomic.Bool   // the last checkpoint filled 90% of a slot
	ckptBytes atomic.Uint64 // size of the last checkpoint's payload
	stats     storeStats

	stop   chan struct{}
	stopWG sync.WaitGroup

	// badCommit, set by fsck, hears of a checksum-valid journal commit
	// whose records do not decode; replay then ends before it instead of
	// failing.
	badCommit func(error)
}

type storeStats struct {
	checkpoints atomic.Uint64
	streamBytes sync.Map // uint32 → *atomic.Uint64 bytes written per stream
	metaErrors  atomic.Uint64
	dataErrors  atomic.Uint64
}

// Counters are what the filesystem did since mount, for `streamfs stats`.
type Counters struct {
	Checkpoints       uint64 `json:"checkpoints"`
	MetaWriteErrors   uint64 `json:"meta_write_errors"`
	DataIOErrors      uint64 `json:"data_io_errors"`
	ReadOnly          bool   `json:"read_only"`
	MetadataFull      bool   `json:"metadata_full"`
	CheckpointPayload uint64 `json:"checkpoint_bytes"`
}

// Counters returns the counters.
func (s *Store) Counters() Counters {
	return Counters{
		Checkpoints:       s.stats.checkpoints.Load(),
		MetaWriteErrors:   s.stats.metaErrors.Load(),
		DataIOErrors:      s.stats.dataErrors.Load(),
		ReadOnly:          s.ReadOnly(),
		MetadataFull:      s.metaFull.Load(),
		CheckpointPayload: s.ckptBytes.Load(),
	}
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
	// The backup is the last block of the device, for whatever block size.
	for bs := int64(65536); bs >= 512; bs /= 2 {
		off := (dev.Size()/bs - 1) * bs
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
	if err := dev.WriteAt(b, 0, 0); err != nil {
		return fmt.Errorf("writing primary superblock: %w", err)
	}
	if err := dev.WriteAt(b, int64(sb.BackupBlock*uint64(sb.BlockSize)), 0); err != nil {
		return fmt.Errorf("writing backup superblock: %w", err)
	}
	return dev.Flush()
}

// Open mounts the filesystem on dev: reads the superblock, loads the newest
// checkpoint, replays the journal, rebuilds free space, reclaims orphans and
// (unless read-only) writes a fresh checkpoint.
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
	h, commits, records, err := s.load(s.apply)
	if err != nil {
		return nil, err
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	if err := s.newAllocator(); err != nil {
		return nil, err
	}
	if err := s.markUsed(); err != nil {
		s.alloc.Close()
		return nil, err
	}
	orphans := s.reclaimOrphans()
	if !ro {
		s.j.commitMu.Lock()
		err := s.j.checkpointLocked()
		s.j.commitMu.Unlock()
		if err != nil {
			s.alloc.Close()
			return nil, fmt.Errorf("writing checkpoint after recovery: %w", err)
		}
	}
	log.Info("mounted",
		zap.String("uuid", format.UUIDString(sb.UUID)),
		zap.Uint64("checkpoint", h.Seq),
		zap.Int("replayed_commits", commits),
		zap.Int("replayed_records", records),
		zap.Int("orphans_reclaimed", orphans),
		zap.Int("inodes", s.itab.count()),
		zap.Bool("read_only", ro),
		zap.Duration("took", time.Since(start)))
	if !ro {
		s.stopWG.Add(1)
		go s.committer()
	}
	return s, nil
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
	s := &Store{
		dev: dev, sb: sb, bs: uint64(sb.BlockSize), log: opts.Logger, opts: opts, readOnly: ro,
		itab:   newInodeTable(),
		agNext: make([]atomic.Uint32, sb.AGCount),
		dirty:  make(map[*Inode]struct{}),
		stop:   make(chan struct{}),
	}
	s.j = &journal{s: s}
	return s
}

// load reads the newest checkpoint and replays the journal after it,
// passing every record to apply (s.apply for a mount; fsck passes one that
// reports bad records and goes on).
func (s *Store) load(apply func(*format.Record) error) (h *format.CkptHeader, commits, records int, err error) {
	h, slot, payload, err := s.readCheckpoint()
	if err != nil {
		return nil, 0, 0, err
	}
	if err := format.DecodeRecords(payload, apply); err != nil {
		return nil, 0, 0, fmt.Errorf("checkpoint %d: %w", h.Seq, err)
	}
	s.j.ckptSeq, s.j.ckptSlot = h.Seq, slot
	if s.opts.NoRecovery {
		s.log.Warn("norecovery: the journal is not replayed; changes committed after the last checkpoint are not visible",
			zap.Uint64("checkpoint", h.Seq))
		return h, 0, 0, nil
	}
	commits, records, err = s.replay(h, apply)
	if err != nil {
		return nil, 0, 0, err
	}
	return h, commits, records, nil
}

// newAllocator makes the (still all-free) block allocator.
func (s *Store) newAllocator() error {
	a, err := alloc.New(alloc.Geometry{AGCount: s.sb.AGCount, AGBlocks: s.sb.AGBlocks, TotalBlocks: s.sb.TotalBlocks},
		alloc.Options{Policy: s.opts.Policy, HWStreams: s.dev.MaxStreams(), PlacementCache: s.opts.PlacementCache})
	if err != nil {
		return fmt.Errorf("allocator: %w", err)
	}
	s.alloc = a
	return nil
}

// check validates cross-record invariants after load and replay.
func (s *Store) check() error {
	root := s.itab.get(RootIno)
	if root == nil || !root.IsDir() {
		return fmt.Errorf("root directory missing: %w", format.ErrCorrupt)
	}
	for _, in := range s.itab.all() {
		for name, ino := range in.dir {
			if s.itab.get(ino) == nil {
				return fmt.Errorf("directory %d entry %q points at missing inode %d (run streamfs fsck): %w",
					in.attr.Ino, name, ino, format.ErrCorrupt)
			}
		}
	}
	return nil
}

// markUsed tells the allocator what metadata and files occupy.
func (s *Store) markUsed() error {
	if err := s.alloc.MarkUsed(0, s.sb.MetaEnd()); err != nil {
		return fmt.Errorf("metadata area: %w", err)
	}
	if err := s.alloc.MarkUsed(s.sb.BackupBlock, s.sb.TotalBlocks-s.sb.BackupBlock); err != nil {
		return fmt.Errorf("backup superblock: %w", err)
	}
	for _, in := range s.itab.all() {
		for _, e := range in.ext.ext {
			if err := s.alloc.MarkUsed(e.PBlk, e.Len); err != nil {
				return fmt.Errorf("inode %d extent %d+%d at block %d overlaps other data (run streamfs fsck): %w",
					in.attr.Ino, e.LBlk, e.Len, e.PBlk, format.ErrCorrupt)
			}
		}
	}
	return nil
}

// reclaimOrphans frees inodes left unlinked-but-open by a crash.
func (s *Store) reclaimOrphans() int {
	n := 0
	for _, in := range s.itab.all() {
		if in.attr.Nlink == 0 && in.attr.Ino != RootIno {
			var freed []alloc.Extent
			for _, e := range in.ext.ext {
				freed = append(freed, alloc.Extent{Start: e.PBlk, Len: e.Len})
			}
			s.itab.del(in.attr.Ino)
			if !s.readOnly {
				for _, f := range freed {
					_ = s.alloc.Free(f.Start, f.Len)
				}
			}
			n++
		}
	}
	return n
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
		}
	}
}

// SyncAll journals every dirty inode and commits.
func (s *Store) SyncAll() error {
	if s.readOnly {
		return nil
	}
	s.dirtyMu.Lock()
	var ins []*Inode
	for in := range s.dirty {
		ins = append(ins, in)
	}
	s.dirtyMu.Unlock()
	for _, in := range ins {
		in.mu.Lock()
		s.logDirtyLocked(in)
		in.mu.Unlock()
	}
	return s.j.sync()
}

// Close flushes everything, writes a final checkpoint (nothing is left to
// replay after a clean unmount) and releases the allocator. The device is
// the caller's to close.
func (s *Store) Close() error {
	select {
	case <-s.stop:
		return nil
	default:
	}
	close(s.stop)
	s.stopWG.Wait()
	var err error
	if !s.readOnly && !s.j.failed.Load() {
		if err = s.SyncAll(); err == nil {
			s.j.commitMu.Lock()
			err = s.j.checkpointLocked()
			s.j.commitMu.Unlock()
		}
	}
	s.alloc.Close()
	if err != nil {
		return fmt.Errorf("final checkpoint: %w", err)
	}
	if !s.readOnly && s.j.failed.Load() {
		s.log.Warn("unmounted without a final checkpoint: the filesystem was shut down or its journal failed")
		return nil
	}
	s.log.Info("unmounted cleanly")
	return nil
}

// metaError records a failed metadata write (the n-th in a row). The
// failed commit's records stay queued and the next commit retries them;
// with errors=remount-ro, maxMetaFailures failures in a row stop the
// journal and turn the filesystem read-only, so no later commit can point
// at state that never reached the device. errors=continue keeps retrying.
func (s *Store) metaError(err error, n int64) {
	s.stats.metaErrors.Add(1)
	if s.opts.ErrorsContinue || n < maxMetaFailures {
		s.log.Warn("metadata write failed; will retry with the next commit",
			zap.Int64("failures_in_a_row", n), zap.Bool("errors_continue", s.opts.ErrorsContinue), zapErr(err))
		return
	}
	if s.j.failed.CompareAndSwap(false, true) {
		s.log.Error("metadata writes keep failing: filesystem is now read-only; unmount and run streamfs fsck",
			zap.Int64("failures_in_a_row", n), zapErr(err))
	}
}

// metaRoom refuses growth of the metadata (ENOSPC) once the checkpoint
// slot, which must hold all of it, is nearly full. Between checkpoints the
// state grows by at most about twice the record bytes appended; when that
// estimate reaches the limit a checkpoint measures it exactly. It may run
// with an inode lock held (see the package doc).
func (s *Store) metaRoom() error {
	limit := (s.sb.CkptBlocks - 1) * s.bs * 9 / 10
	if !s.metaFull.Load() && s.ckptBytes.Load()+2*s.j.sinceCkpt.Load() <= limit {
		return nil
	}
	if s.j.sinceCkpt.Load() > 0 {
		s.j.commitMu.Lock()
		err := s.j.checkpointLocked()
		s.j.commitMu.Unlock()
		if err != nil {
			return err
		}
	}
	if s.metaFull.Load() {
		return syscall.ENOSPC
	}
	return nil
}

// writable returns EROFS once the filesystem went read-only.
func (s *Store) writable() error {
	if s.readOnly || s.remountRO.Load() || s.j.failed.Load() {
		return syscall.EROFS
	}
	return nil
}

func zapErr(err error) zap.Field { return zap.Error(err) }

// Super returns the superblock.
func (s *Store) Super() *format.Super { return s.sb }

// Allocator returns the block allocator.
func (s *Store) Allocator() *alloc.Allocator { return s.alloc }

// Device returns the backend device.
func (s *Store) Device() backend.Device { return s.dev }

// ReadOnly reports a read-only mount.
func (s *Store) ReadOnly() bool { return s.readOnly || s.remountRO.Load() || s.j.failed.Load() }

// markDirtyLocked notes that in's attributes need journaling. in.mu held.
func (s *Store) markDirtyLocked(in *Inode) {
	if in.dirty {
		return
	}
	in.dirty = true
	s.dirtyMu.Lock()
	s.dirty[in] = struct{}{}
	s.dirtyMu.Unlock()
}

// logDirtyLocked journals in's attributes if they changed. in.mu held.
func (s *Store) logDirtyLocked(in *Inode) {
	var e format.Encoder
	s.opLock.RLock() // a checkpoint clears dirty marks under opLock alone
	if in.dirty && !in.freed {
		e.Inode(&in.attr)
		in.dirty = false
		s.j.append(e.Buf, nil)
	}
	s.dirtyMu.Lock()
	if !in.dirty {
		delete(s.dirty, in)
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
	return cleared
}

// redirty marks again what clearDirty cleared, after the checkpoint that
// was to capture it failed.
func (s *Store) redirty(ins []*Inode) {
	s.opLock.Lock()
	defer s.opLock.Unlock()
	s.dirtyMu.Lock()
	defer s.dirtyMu.Unlock()
	for _, in := range ins {
		if !in.freed {
			in.dirty = true
			s.dirty[in] = struct{}{}
		}
	}
}
