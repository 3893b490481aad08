package meta

import (
	"syscall"

	"go.uber.org/zap"
)

// Metadata space reservations, as XFS's xfs_trans_reserve: an operation
// reserves the worst-case number of tree node blocks it may allocate before
// it changes anything, and fails with ENOSPC — changing nothing — when they
// are not there. Once it holds its reservation it cannot run out of blocks
// half-way, so running out of space never shuts the filesystem down.
//
// Where the blocks go. Every first change of a clean tree node copies it
// to a fresh block; the old copy comes back only after the next checkpoint
// (the last durable checkpoint still references it). So between two
// checkpoints node copies only take space, and a checkpoint gives back as
// much as the copies took. Free space is split three ways:
//
//	free blocks (allocator)
//	  - held: reservations of operations in flight, and of inodes whose
//	    attributes changed and are not yet journaled (their record is
//	    written later, by SyncAll or the checkpoint; roomForDirty lets an
//	    inode become dirty only when that fits)
//	  - the checkpoint's own floor (ckptFloor): a checkpoint folds node
//	    allocations into the free-space records and writes dirty inodes,
//	    which copies nodes too; it must always find them
//	  - the reserve pool (metaReserve above the floor): only operations
//	    that give space back or change none in the end — unlink, rmdir,
//	    truncate, setattr, rename, punch, removexattr, freeing orphans —
//	    may use it, so they work on a device that is 100% full
//	  = what data and growing metadata (create, link, mkdir, setxattr,
//	    the mapping of a write) may use.
//
// When an operation does not find its blocks it commits the journal (blocks
// freed by the open transaction come back) and, if that is not enough,
// forces a checkpoint (old node copies come back), and tries again. Only
// then is it ENOSPC.
//
// The cost of a Put or Delete is bounded by the tree height h: a copy of
// every node on its path, a split or a sibling copy per level, and a new
// root: 2h+1 blocks. The height is read at mount and at every checkpoint;
// one level of slack covers growth in between (a tree that grows a level
// between two checkpoints has at least fan-out times more entries, which
// would force a checkpoint by its dirty nodes long before).

// spaceClass says which part of free space an operation may use.
type spaceClass int

const (
	// spaceGrow: the operation adds metadata; it leaves the reserve pool.
	spaceGrow spaceClass = iota
	// spacePool: the operation frees space or keeps the metadata's size;
	// it may use the pool, down to the checkpoint's floor.
	spacePool
)

// Operation sizes in tree Put/Delete calls, worst case.
const (
	opsInode   = 2 // the inode record, and its orphan entry
	opsEntry   = 1 // a directory entry
	opsMap     = 12
	opsPunch   = 8 // the punched range's edge extents, their free space
	opsPerFree = 4 // per extent freed: its record and up to three free-space changes
	opsXattr   = 4 // a small xattr (a file capability) deleted; values in general: valueOps
)

// valueOps is the cost of writing or deleting a value of n bytes stored in
// chunks under neighbouring keys, in Put/Delete units: the chunks span at
// most one leaf per minimum fill of a node (a quarter of it), plus the two
// at the ends.
func (s *Store) valueOps(n int) int {
	return n/int((s.bs-64)/4) + 2
}

// opCost is the worst-case number of node blocks one Put or Delete takes.
func (s *Store) opCost() uint64 {
	h := s.treeHeight.Load() + 1
	return 2*h + 1
}

// ckptFloor is what a checkpoint may need for itself: the pool operations
// stop above it.
func (s *Store) ckptFloor() uint64 {
	return max(s.metaReserve/4, 2*uint64(s.sb.AGCount)*s.opCost())
}

// dirtyCost is what journaling one dirty inode's attributes may take: a
// copy of its path. An inode record keeps its size, so replacing it never
// splits a node, and its orphan entry changes only with its link count,
// which operations journal at once.
func (s *Store) dirtyCost() uint64 { return s.treeHeight.Load() + 1 }

// held is the space promised to operations in flight and to dirty inodes.
func (s *Store) held() uint64 {
	return uint64(max(s.metaHeld.Load(), 0)) + uint64(max(s.dirtyCount.Load(), 0))*s.dirtyCost()
}

// room is the free space nothing has a claim on yet.
func (s *Store) room() uint64 {
	free, held := s.alloc.FreeBlocks(), s.held()
	if free <= held {
		return 0
	}
	return free - held
}

// floor is the free space class c must leave untouched.
func (s *Store) floor(c spaceClass) uint64 {
	if c == spacePool {
		return s.ckptFloor()
	}
	return s.metaReserve
}

// tryReserve reserves the blocks of ops tree changes if class c finds them,
// without waiting for anything.
func (s *Store) tryReserve(ops int, c spaceClass) (uint64, bool) {
	need := uint64(ops) * s.opCost()
	held := s.metaHeld.Add(int64(need))
	if s.alloc.FreeBlocks() >= uint64(held)+uint64(max(s.dirtyCount.Load(), 0))*s.dirtyCost()+s.floor(c) {
		return need, true
	}
	s.metaHeld.Add(-int64(need))
	return 0, false
}

// reserveMeta reserves the blocks of ops tree changes for an operation of
// class c, committing the journal and then checkpointing to make room.
// Call it holding inode locks but not opLock (a checkpoint takes opLock
// exclusively). Give the blocks back with unreserve once the operation's
// records are applied.
func (s *Store) reserveMeta(ops int, c spaceClass) (uint64, error) {
	for attempt := 0; ; attempt++ {
		if n, ok := s.tryReserve(ops, c); ok {
			return n, nil
		}
		var err error
		switch attempt {
		case 0:
			err = s.makeRoom()
		case 1:
			if s.nodeFrees.Load() == 0 {
				continue // a checkpoint would give nothing back
			}
			err = s.checkpoint() // old copies of tree nodes come back
		default:
			s.logENOSPC()
			return 0, syscall.ENOSPC
		}
		if err != nil {
			if s.j.Failed() {
				return 0, syscall.EIO
			}
			return 0, err
		}
	}
}

// roomForDirty makes sure one more inode may become dirty (its record is
// journaled later, by SyncAll or the checkpoint, and takes up to
// dirtyCost blocks then): the dirty marks of writes that allocate nothing
// (in-place overwrites, atime, size changes inside preallocated space)
// would otherwise pile up claims no reservation ever checked. Short of
// room, the dirty inodes are journaled and the journal committed, then a
// checkpoint gives old node copies back. It reports false when there is
// still no room: the caller refuses (ENOSPC) or, for atime, skips. Call
// holding no opLock (inode locks are fine).
func (s *Store) roomForDirty() bool {
	for attempt := 0; ; attempt++ {
		if s.alloc.FreeBlocks() >= s.held()+s.dirtyCost()+s.ckptFloor() {
			return true
		}
		var err error
		switch attempt {
		case 0:
			err = s.makeRoom()
		case 1:
			if s.nodeFrees.Load() == 0 {
				return false
			}
			err = s.checkpoint()
		default:
			s.logENOSPC()
			return false
		}
		if err != nil {
			return false
		}
	}
}

// makeRoom journals the dirty inodes whose locks are free (their
// reservations become what their records really took, usually far less:
// neighbours share a leaf) and commits (blocks freed by the open
// transaction come back). The caller may hold inode locks.
func (s *Store) makeRoom() error {
	s.logAllDirty(true)
	return s.j.Sync()
}

// unreserve gives back a reservation.
func (s *Store) unreserve(n uint64) {
	if n != 0 {
		s.metaHeld.Add(-int64(n))
	}
}

// noteHeight records the tallest tree's height for opCost (mount and every
// checkpoint).
func (s *Store) noteHeight() {
	var h uint64
	for _, t := range s.trees {
		if th, err := t.Height(); err == nil && uint64(th) > h {
			h = uint64(th)
		}
	}
	s.treeHeight.Store(h)
}

// lowRoom says the pool is being used and enough old node copies wait for
// a checkpoint to give them back: worth one before a pool operation has to
// wait for it. (With few copies waiting a checkpoint would give nothing
// back, and kicking one per operation would only pause them all.)
func (s *Store) lowRoom() bool {
	return s.room() < s.metaReserve/2+s.ckptFloor() && uint64(s.nodeFrees.Load()) >= max(s.metaReserve/8, 8)
}

// logENOSPC says, at most every 10 s, that the filesystem is full.
func (s *Store) logENOSPC() {
	nowS := now() / 1e9
	if last := s.enospcLog.Load(); nowS-last >= 10 && s.enospcLog.CompareAndSwap(last, nowS) {
		s.log.Warn("filesystem full: ENOSPC", zap.Uint64("free_blocks", s.alloc.FreeBlocks()),
			zap.Uint64("reserved_blocks", s.held()), zap.Uint64("metadata_reserve_blocks", s.metaReserve))
	}
}
