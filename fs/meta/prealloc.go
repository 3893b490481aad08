package meta

// Speculative preallocation, as XFS's EOF blocks: an append that needs new
// blocks allocates more than it writes — about as much again as the file
// already holds — and keeps the rest in memory for the file's next appends.
// With the FUSE writeback cache the kernel sends a file's data at
// writeback time, in 1 MiB WRITEs; files that share an AG (set) would
// otherwise take turns at the AG's free space and interleave megabyte by
// megabyte. The window is only taken from the allocator's in-memory free
// space: it is never mapped until its blocks are written (a committed
// extent never points at unwritten blocks), and the free-space tree does
// not know about it, so a crash loses nothing and leaks nothing. It is
// given back when a writer closes the file, on truncate and fallocate, and
// — every file's — before any allocation fails with ENOSPC.
//
// Locking: a window list changes under its inode's preMu, a leaf lock;
// the callers below hold in.mu as well, except trimAllPrealloc, which must
// not wait for other inodes' locks while its caller holds its own.

// maxPrealloc caps one preallocation window (blocks are converted with the
// block size); maxWindows bounds the windows an inode keeps when writes
// arrive out of order (async WRITEs of one file are served concurrently).
const (
	maxPreallocBytes = 256 << 20
	maxWindows       = 8
)

// prealloc is a run of allocated, unmapped blocks meant for file blocks
// [lblk, lblk+n): file block lblk+i goes to device block pblk+i.
type prealloc struct {
	lblk, pblk, n uint64
}

// preallocSize returns how many blocks to ask for when an append at file
// block lblk needs n: as many as the file already spans (doubling, as
// XFS does), capped, and never more than a 32nd of the free space, so
// windows of many files cannot run the device out of space.
func (s *Store) preallocSize(lblk, n uint64) uint64 {
	w := max(n, lblk)
	w = min(w, maxPreallocBytes/s.bs)
	if free := s.room(); free > s.metaReserve {
		w = min(w, (free-s.metaReserve)/32)
	} else {
		w = 0
	}
	return max(w, n)
}

// takePreallocLocked returns blocks for file blocks [lblk, lblk+up to n)
// from in's windows, if one covers lblk. in.mu is held.
func (s *Store) takePreallocLocked(in *Inode, lblk, n uint64) (Extent, bool) {
	in.preMu.Lock()
	defer in.preMu.Unlock()
	for i, w := range in.pre {
		if lblk < w.lblk || lblk >= w.lblk+w.n {
			continue
		}
		k := min(n, w.lblk+w.n-lblk)
		x := Extent{LBlk: lblk, Len: k, PBlk: w.pblk + (lblk - w.lblk), Stream: in.attr.Stream}
		head := prealloc{lblk: w.lblk, pblk: w.pblk, n: lblk - w.lblk}
		tail := prealloc{lblk: lblk + k, pblk: x.PBlk + k, n: w.lblk + w.n - lblk - k}
		in.pre = append(in.pre[:i], in.pre[i+1:]...)
		s.preBlocks.Add(-int64(w.n))
		for _, p := range []prealloc{tail, head} {
			if p.n > 0 {
				s.keepWindow(in, p)
			}
		}
		s.noteWindows(in)
		return x, true
	}
	return Extent{}, false
}

// keepPreallocLocked adds window p to in's. With too many, the window
// farthest into the file is given back (p itself, if it is that one): the
// windows behind it hold holes for chunks already on their way, while the
// farthest is speculation, and the next append's goal finds its blocks
// again if no one took them meanwhile. in.mu is held.
func (s *Store) keepPreallocLocked(in *Inode, p prealloc) {
	in.preMu.Lock()
	defer in.preMu.Unlock()
	s.keepWindow(in, p)
	s.noteWindows(in)
}

// keepWindow is keepPreallocLocked with in.preMu held.
func (s *Store) keepWindow(in *Inode, p prealloc) {
	if len(in.pre) >= maxWindows {
		far, at := p, -1
		for i, w := range in.pre {
			if w.lblk > far.lblk {
				far, at = w, i
			}
		}
		_ = s.alloc.Free(far.pblk, far.n)
		if at < 0 {
			return
		}
		in.pre = append(in.pre[:at], in.pre[at+1:]...)
		s.preBlocks.Add(-int64(far.n))
	}
	in.pre = append(in.pre, p)
	s.preBlocks.Add(int64(p.n))
}

// maxGapBytes bounds the hole reserveGapLocked keeps: the kernel's
// writeback has a few megabytes of a file in flight at once, and a larger
// hole is more likely a sparse file's than a late chunk's.
const maxGapBytes = 16 << 20

// holeWorthKeepingLocked reports whether file blocks [lblk, lblk+n), a
// hole an out-of-order write leaves in front of itself, should get a
// window of their own: small enough to be a late chunk's, room to spare
// above the metadata reserve after the extra blocks about to be taken
// with it, and no window already serving part of it. in.mu is held.
func (s *Store) holeWorthKeepingLocked(in *Inode, lblk, n, extra uint64) bool {
	if n*s.bs > maxGapBytes || s.room() < s.metaReserve+extra+32*n {
		return false
	}
	in.preMu.Lock()
	defer in.preMu.Unlock()
	for _, w := range in.pre {
		if w.lblk < lblk+n && lblk < w.lblk+w.n {
			return false
		}
	}
	return true
}

// reserveGapLocked keeps device blocks [pblk, pblk+n), the hole an
// out-of-order write just left in front of itself at file blocks
// [lblk, lblk+n), as a window for the write still to come. Async
// writeback sends a file's chunks concurrently, and the daemon serves
// them in whatever order its goroutines take the inode lock; left free,
// the hole is exactly the small extent best fit hands the next file in
// the AG, and both files fragment. in.mu is held.
func (s *Store) reserveGapLocked(in *Inode, lblk, pblk, n uint64) {
	if s.holeWorthKeepingLocked(in, lblk, n, 0) && s.alloc.TakeExact(pblk, n, in.attr.Stream) {
		s.keepPreallocLocked(in, prealloc{lblk: lblk, pblk: pblk, n: n})
	}
}

// dropPreallocLocked gives in's windows back to the allocator. in.mu is held.
func (s *Store) dropPreallocLocked(in *Inode) {
	in.preMu.Lock()
	defer in.preMu.Unlock()
	s.dropWindows(in)
}

// dropWindows gives in's windows back. in.preMu is held.
func (s *Store) dropWindows(in *Inode) uint64 {
	var n uint64
	for _, w := range in.pre {
		// The blocks were never mapped or recorded: they go back at once.
		s.preBlocks.Add(-int64(w.n))
		_ = s.alloc.Free(w.pblk, w.n)
		n += w.n
	}
	in.pre = nil
	s.noteWindows(in)
	return n
}

// noteWindows keeps the set of inodes with windows (preOwners) right after
// in's changed. in.preMu is held.
func (s *Store) noteWindows(in *Inode) {
	if len(in.pre) > 0 {
		if _, ok := s.preOwners.Load(in); !ok {
			s.preOwners.Store(in, struct{}{})
		}
		return
	}
	s.preOwners.Delete(in)
}

// trimAllPrealloc gives every file's windows back (an allocation found no
// room) and returns how many blocks came back.
func (s *Store) trimAllPrealloc() uint64 {
	var n uint64
	s.preOwners.Range(func(k, _ any) bool {
		in := k.(*Inode)
		in.preMu.Lock()
		n += s.dropWindows(in)
		in.preMu.Unlock()
		return true
	})
	return n
}

// TrimPrealloc gives back in's preallocation (a writer closed the file).
func (s *Store) TrimPrealloc(in *Inode) {
	in.mu.Lock()
	defer in.mu.Unlock()
	s.dropPreallocLocked(in)
}

// PreallocBlocks returns how many blocks in holds in preallocation windows.
func (s *Store) PreallocBlocks(in *Inode) uint64 {
	in.preMu.Lock()
	defer in.preMu.Unlock()
	var n uint64
	for _, w := range in.pre {
		n += w.n
	}
	return n
}

// Below this much free space (and a tenth of the device) opens for writing
// go write-through: see RoomForWriteback.
const minWritebackRoom = 512 << 20

// RoomForWriteback reports whether a file opened now may use the kernel's
// writeback cache. Data written through the page cache is allocated only
// at writeback, so ENOSPC reaches the application at fsync or close, not
// at write(2); with little space left, opens go write-through instead so
// write(2) gets ENOSPC, as CephFS switches to synchronous writes when its
// cluster is nearly full.
func (s *Store) RoomForWriteback() bool {
	free := s.room()
	if free <= s.metaReserve {
		return false
	}
	room := free - s.metaReserve
	return room*s.bs >= minWritebackRoom && room >= s.sb.TotalBlocks/10
}
