package meta

import (
	"fmt"
	"syscall"

	"github.com/streamfs/streamfs/alloc"
)

// This file holds small additions for kernel-filesystem behaviour (atime,
// ranged FITRIM, FS_IOC_SHUTDOWN, remount): each is one self-contained
// method so it ports easily onto a rewritten store.

// TouchAtime sets in's access time to t; the FUSE layer decides when, by
// the mount's atime policy. Like a write's times it reaches the journal
// with the inode's next logged change or commit, not as a record per read.
func (s *Store) TouchAtime(in *Inode, t int64) {
	if s.writable() != nil {
		return
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.freed {
		return
	}
	s.opLock.RLock()
	in.attr.Atime = t
	s.markDirtyLocked(in)
	s.opLock.RUnlock()
}

// TrimRange discards the free extents of at least minLen blocks inside
// blocks [start, end) (FITRIM's range) and returns the blocks discarded.
func (s *Store) TrimRange(start, end, minLen uint64) (uint64, error) {
	if s.ReadOnly() {
		return 0, syscall.EROFS
	}
	return s.alloc.TrimRange(start, end-start, max(minLen, 1), func(e alloc.Extent) error {
		return s.dev.Discard(int64(e.Start*s.bs), int64(e.Len*s.bs))
	})
}

// devStream is the stream a data write of a file with stream id carries to
// the device: remapped onto the device's streams, so an image moved to a
// device with fewer placement handles still writes (alloc.DeviceStream).
func (s *Store) devStream(id uint32) uint32 {
	return alloc.DeviceStream(id, s.dev.MaxStreams())
}

// SetReadOnly switches a mounted filesystem read-only or back (remount).
// Going read-only commits everything and writes a checkpoint, so nothing
// is left to replay. A filesystem mounted read-only (its device opened
// read-only, its log perhaps not replayed) cannot go read-write.
//
// Read-only means nothing more is written, unmount included: an unlinked
// file closed for the last time meanwhile is not freed (as XFS skips
// inactivation on a read-only filesystem). It stays on the orphan list the
// remount's checkpoint made durable, and the next read-write mount frees
// it (reclaimOrphans); fsck counts it as an orphan, not an error.
func (s *Store) SetReadOnly(ro bool) error {
	if s.readOnly {
		if ro {
			return nil
		}
		return fmt.Errorf("mounted read-only (device opened read-only): unmount and mount read-write instead: %w", syscall.EROFS)
	}
	if !ro {
		s.remountRO.Store(false)
		return nil
	}
	if s.j.Failed() {
		s.remountRO.Store(true)
		return nil
	}
	if err := s.SyncAll(); err != nil {
		return fmt.Errorf("remount read-only: %w", err)
	}
	if err := s.checkpoint(); err != nil {
		return fmt.Errorf("remount read-only: checkpoint: %w", err)
	}
	s.remountRO.Store(true)
	return nil
}
