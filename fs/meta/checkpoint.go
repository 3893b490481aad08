package meta

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/streamfs/streamfs/alloc"
	"github.com/streamfs/streamfs/fs/meta/tree"
	"github.com/streamfs/streamfs/fs/meta/wal"
)

// The Store is the log's host (package wal): it hands the log the frozen
// trees of a checkpoint, and hears when a checkpoint is durable, when
// blocks may be reused and when the log failed.
type logHost Store

var _ wal.Host = (*logHost)(nil)

// checkpoint takes a checkpoint now.
func (s *Store) checkpoint() error { return s.j.Checkpoint() }

// NeedCheckpoint implements wal.Host.
func (h *logHost) NeedCheckpoint() bool { return (*Store)(h).needCheckpoint() }

// Freeze implements wal.Host: operations pause (opLock exclusively) while
// the dirty tree nodes are frozen and the open transaction is closed.
func (h *logHost) Freeze(closeTx func()) (wal.Frozen, error) {
	s := (*Store)(h)
	s.opLock.Lock()
	if s.j.Failed() {
		// An operation that failed half-way shut the filesystem down
		// while this checkpoint waited for opLock: the trees hold its
		// partial changes, which must never reach the media.
		s.opLock.Unlock()
		return wal.Frozen{}, wal.ErrFailed
	}
	paused := time.Now()
	frozen, roots, released, err := s.snapshotLocked()
	s.nodeAllocs.Store(0)
	s.nodeFrees.Store(0)
	closeTx()
	s.opLock.Unlock()
	s.stats.notePause(time.Since(paused))
	if err != nil {
		return wal.Frozen{}, err
	}
	return wal.Frozen{Nodes: frozen, Roots: roots, Released: released}, nil
}

// Written implements wal.Host.
func (h *logHost) Written(f wal.Frozen, nodeBytes uint64) {
	s := (*Store)(h)
	for _, t := range s.trees {
		t.Written()
	}
	s.stats.checkpoints.Add(1)
	s.ckptBytes.Store(nodeBytes)
	s.log.Debug("checkpoint", zap.Int("trees", len(f.Nodes)), zap.Int("released", len(f.Released)), zap.Uint64("bytes", nodeBytes))
}

// Release implements wal.Host: durably freed blocks go back to the
// allocator (and, with discard, the device hears of them first).
func (h *logHost) Release(frees []alloc.Extent) {
	s := (*Store)(h)
	for _, e := range frees {
		if s.zones != nil && !s.sb.InMetaArea(e.Start, e.Len) {
			s.zoneFree(e) // garbage until its zone is reset
			continue
		}
		// Discard before the blocks can be handed out again.
		if s.opts.Discard {
			_ = s.dev.Discard(int64(e.Start*s.bs), int64(e.Len*s.bs))
		}
		if err := s.alloc.Free(e.Start, e.Len); err != nil {
			s.log.Error("freeing blocks failed: allocator and metadata disagree", zapErr(err))
		}
	}
}

// Failed implements wal.Host.
func (h *logHost) Failed(err error) {
	(*Store)(h).log.Error("metadata write failed: filesystem shut down; unmount, then mount again to recover from the log", zapErr(err))
}

// snapshotLocked prepares a checkpoint's writes. opLock is held exclusively.
func (s *Store) snapshotLocked() (frozen []*tree.Frozen, roots []uint64, released []uint64, err error) {
	t0 := time.Now()
	for _, in := range s.clearDirty() {
		if in.freed {
			continue
		}
		if err := s.applyInode(&in.attr); err != nil {
			return nil, nil, nil, fmt.Errorf("inode %d: %w", in.attr.Ino, err)
		}
	}
	if err := s.storeAGs(); err != nil {
		return nil, nil, nil, err
	}
	t1 := time.Now()
	if released, err = s.foldNodeSpace(); err != nil {
		return nil, nil, nil, err
	}
	t2 := time.Now()
	roots = make([]uint64, len(s.trees))
	frozen = make([]*tree.Frozen, len(s.trees))
	for ag, t := range s.trees {
		roots[ag], frozen[ag] = t.Freeze()
	}
	s.noteHeight()
	s.log.Debug("checkpoint snapshot", zap.Duration("inodes", t1.Sub(t0)), zap.Duration("fold", t2.Sub(t1)),
		zap.Duration("freeze", time.Since(t2)))
	return frozen, roots, released, nil
}

func (s *Store) bumpAGNext(ino uint64) {
	ag, agino := alloc.InoAG(ino), alloc.InoAGino(ino)
	for {
		cur := s.agNext[ag].Load()
		if cur > agino || s.agNext[ag].CompareAndSwap(cur, agino+1) {
			return
		}
	}
}
