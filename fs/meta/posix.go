package meta

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"syscall"

	"github.com/streamfs/streamfs/alloc"
	"github.com/streamfs/streamfs/fs/format"
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
	if !s.roomForDirty() {
		return // no room to record it: atime is dropped, as XFS drops it
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
// is left to replay. A filesystem mounted read-only goes read-write as a
// fresh read-write mount would start (makeWritable).
//
// Read-only means nothing more is written, unmount included: an unlinked
// file closed for the last time meanwhile is not freed (as XFS skips
// inactivation on a read-only filesystem). It stays on the orphan list the
// remount's checkpoint made durable, and the next read-write mount frees
// it (reclaimOrphans), as does a remount read-write (freeClosedOrphans);
// fsck counts it as an orphan, not an error.
func (s *Store) SetReadOnly(ro bool) error {
	s.modeMu.Lock()
	defer s.modeMu.Unlock()
	if s.readOnly.Load() {
		if ro {
			return nil
		}
		return s.makeWritable()
	}
	if !ro {
		s.remountRO.Store(false)
		if s.writable() == nil {
			s.freeClosedOrphans()
		}
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

// freeClosedOrphans frees, after a remount read-write, the unlinked files
// whose last close came while the filesystem was read-only (Release left
// them on the orphan list); files still open are freed at their last
// close. A failure leaves the file to the next mount, which frees orphans.
func (s *Store) freeClosedOrphans() {
	var orphans []uint64
	for _, t := range s.trees {
		err := t.Ascend(format.OrphanPrefix(), func(k, v []byte) bool {
			if len(k) != 10 || !bytes.HasPrefix(k, format.OrphanPrefix()) {
				return false
			}
			orphans = append(orphans, binary.BigEndian.Uint64(k[2:]))
			return true
		})
		if err != nil {
			s.log.Warn("listing orphans after a remount read-write; the next mount frees them", zapErr(err))
			return
		}
	}
	for _, ino := range orphans {
		in, err := s.loadInode(ino)
		if err != nil {
			continue // the next mount deals with it
		}
		if in == nil {
			// Only the orphan entry is left (a crash between the free
			// and its removal, replayed by a read-only mount):
			// RecFree removes it, as reclaimOrphans does.
			if tx, err := s.beginOp(opsInode, spacePool); err == nil {
				tx.free(ino)
				_ = tx.commit()
				tx.end()
			}
			continue
		}
		in.mu.Lock()
		if in.opens == 0 && in.attr.Nlink == 0 && !in.freed {
			s.freeLater(in)
		}
		in.mu.Unlock()
	}
}
