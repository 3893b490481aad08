package meta

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/streamfs/streamfs/alloc"
	"github.com/streamfs/streamfs/alloc/zone"
	"github.com/streamfs/streamfs/fs/format"
)

// MaxFileSize bounds file sizes (block numbers stay far from overflow).
const MaxFileSize = 1 << 50

// xattrCaps is removed on every write, as file_remove_privs does; with
// FUSE_HANDLE_KILLPRIV_V2 the kernel leaves that to us.
const xattrCaps = "security.capability"

// Read reads into p at off and returns the byte count (short at EOF).
func (s *Store) Read(in *Inode, p []byte, off int64) (int, error) {
	in.mu.RLock()
	defer in.mu.RUnlock()
	if off < 0 {
		return 0, syscall.EINVAL
	}
	size := int64(in.attr.Size)
	if off >= size {
		return 0, nil
	}
	if int64(len(p)) > size-off {
		p = p[:size-off]
	}
	bs := int64(s.bs)
	first := uint64(off / bs)
	last := uint64((off + int64(len(p)) - 1) / bs)
	var segBuf [4]segment
	segs, err := s.segments(in, first, last-first+1, segBuf[:0])
	if err != nil {
		return 0, err
	}
	// Holes and preallocated pieces read as zeros; only they are cleared.
	for _, seg := range segs {
		lo := max(int64(seg.lblk)*bs, off)
		hi := min(int64(seg.lblk+seg.n)*bs, off+int64(len(p)))
		if !seg.mapped || seg.ext.Unwritten() {
			clear(p[lo-off : hi-off])
			continue
		}
		dev := int64(seg.ext.PBlk)*bs + (lo - int64(seg.lblk)*bs)
		if rerr := s.dev.ReadAt(p[lo-off:hi-off], dev); rerr != nil {
			err = fmt.Errorf("reading inode %d at %d: %w", in.attr.Ino, lo, rerr)
			break
		}
	}
	if err != nil {
		s.stats.dataErrors.Add(1)
		return 0, err
	}
	return len(p), nil
}

// WriteOpts carries who writes.
type WriteOpts struct {
	KillSUID bool // caller lacks CAP_FSETID: clear setuid/setgid
	// Writeback marks data the kernel's page cache writes back (FUSE
	// writeback cache). The kernel owns mtime and ctime then: it stamped
	// them at write(2) time and sends them with SETATTR, possibly before
	// this data arrives, so a late write must not overwrite them.
	Writeback bool
}

// Write writes p at off, allocating holes. It returns the bytes written.
func (s *Store) Write(in *Inode, p []byte, off int64, o WriteOpts) (int, error) {
	if err := s.writable(); err != nil {
		return 0, err
	}
	if off < 0 || off+int64(len(p)) > MaxFileSize {
		return 0, syscall.EFBIG
	}
	if len(p) == 0 {
		return 0, nil
	}
	if !in.IsReg() {
		return 0, syscall.EINVAL
	}
	if !s.roomForDirty() {
		return 0, syscall.ENOSPC
	}
	var n int
	var done bool
	var err error
	if s.zones == nil {
		n, done, err = s.overwrite(in, p, off)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.freed {
		return 0, syscall.ENOENT
	}
	for !done {
		if err := s.clearPastEOFLocked(in, in.attr.Size, uint64(off)+uint64(n)); err != nil {
			retry, werr := s.zoneWaitUnlocked(in, err)
			if in.freed {
				return 0, syscall.ENOENT
			}
			if retry {
				continue
			}
			return n, werr
		}
		m, werr := s.writeLocked(in, p[n:], off+int64(n))
		n, err, done = n+m, werr, true
		if werr != nil && n < len(p) {
			// On zones, out of room until reclaim makes some: the size
			// covers what landed, then the lock goes while we wait.
			if m > 0 {
				s.growSizeLocked(in, uint64(off)+uint64(n))
			}
			var retry bool
			retry, werr = s.zoneWaitUnlocked(in, werr)
			if done = !retry; done {
				err = werr
			}
			if in.freed {
				return 0, syscall.ENOENT
			}
		}
	}
	if err != nil && o.Writeback {
		// The kernel takes a writeback WRITE's error and ignores its
		// count: the pages are marked clean either way. Every open file
		// hears of the lost data at its next fsync (dataError already
		// counted an EIO).
		if !errors.Is(err, syscall.EIO) {
			in.wbGen.Add(1)
		}
	}
	if n > 0 {
		// Dropping a file capability changes the trees: its blocks are
		// reserved outside opLock. Without them it goes ahead anyway:
		// the capability must not outlive the write.
		var resv uint64
		if !in.noCaps {
			resv, _ = s.reserveMeta(opsInode+opsXattr, spacePool)
		}
		s.opLock.RLock()
		end := uint64(off) + uint64(n)
		if end > in.attr.Size {
			in.attr.Size = end
		}
		if !o.Writeback {
			t := now()
			in.attr.Mtime, in.attr.Ctime = t, t
		}
		s.killPrivLocked(in, o.KillSUID)
		s.markDirtyLocked(in)
		s.opLock.RUnlock()
		s.unreserve(resv)
		s.addStreamBytes(in.attr.Stream, uint64(n))
	}
	return n, err
}

// growSizeLocked extends the size to end. in.mu is held.
func (s *Store) growSizeLocked(in *Inode, end uint64) {
	s.opLock.RLock()
	if end > in.attr.Size {
		in.attr.Size = end
		s.markDirtyLocked(in)
	}
	s.opLock.RUnlock()
}

// zoneWaitUnlocked waits for room in the zones, with in.mu dropped, when
// err says so (zone.WouldWait); in.mu is held again on return. It
// returns zoneWait's answer.
func (s *Store) zoneWaitUnlocked(in *Inode, err error) (bool, error) {
	var ww *zone.WouldWait
	if s.zones == nil || !errors.As(err, &ww) {
		return false, err
	}
	in.mu.Unlock()
	defer in.mu.Lock()
	return s.zoneWait(err)
}

// overwrite writes p in place when it lies inside the file and entirely
// over written blocks: no metadata changes but the times, so the device I/O
// runs under the shared inode lock and writers to one file go in parallel
// (FOPEN_PARALLEL_DIRECT_WRITES). done is false when the write needs the
// full path (holes, preallocated blocks, growing the file).
func (s *Store) overwrite(in *Inode, p []byte, off int64) (n int, done bool, err error) {
	in.mu.RLock()
	defer in.mu.RUnlock()
	end := off + int64(len(p))
	if in.freed || uint64(end) > in.attr.Size {
		return 0, false, nil
	}
	bs := int64(s.bs)
	first := uint64(off / bs)
	var segBuf [4]segment
	segs, err := s.segments(in, first, uint64((end-1)/bs)-first+1, segBuf[:0])
	if err != nil {
		return 0, true, err
	}
	for _, seg := range segs {
		if !seg.mapped || seg.ext.Unwritten() {
			return 0, false, nil
		}
	}
	for _, seg := range segs {
		lo := max(int64(seg.lblk)*bs, off)
		hi := min(int64(seg.lblk+seg.n)*bs, end)
		if err := s.writeInPlace(in, seg, p[lo-off:hi-off], lo); err != nil {
			if lo > off {
				return int(lo - off), true, nil
			}
			return 0, true, err
		}
	}
	return len(p), true, nil
}

// killPrivLocked drops setuid/setgid and file capabilities after a write.
// in.mu and opLock (shared) are held.
func (s *Store) killPrivLocked(in *Inode, killSUID bool) {
	if killSUID && in.attr.Mode&(syscall.S_ISUID|syscall.S_ISGID) != 0 {
		in.attr.Mode &^= syscall.S_ISUID
		if in.attr.Mode&0o010 != 0 {
			in.attr.Mode &^= syscall.S_ISGID
		}
	}
	if in.noCaps {
		return
	}
	_, ok, err := s.getXattr(in, xattrCaps)
	if err != nil {
		return
	}
	if ok {
		tx := &txn{s: s}
		tx.xattrDel(in.attr.Ino, xattrCaps)
		tx.inode(&in.attr)
		_ = tx.commit()
	}
	// Either way the file has none now: later writes skip the lookup.
	in.noCaps = true
}

func (s *Store) addStreamBytes(stream uint32, n uint64) {
	if stream < uint32(len(s.stats.smallStreams)) {
		s.stats.smallStreams[stream].Add(n) // no map on the common path
		return
	}
	v, ok := s.stats.streamBytes.Load(stream)
	if !ok {
		v, _ = s.stats.streamBytes.LoadOrStore(stream, new(atomic.Uint64))
	}
	v.(*atomic.Uint64).Add(n)
}

// segment is a piece of a write: a mapped extent piece or a hole.
type segment struct {
	lblk, n uint64
	ext     Extent
	mapped  bool
}

// segments splits file blocks [first, first+n) into mapped pieces and holes,
// appended to out (a caller's buffer: reads and writes should not allocate
// for it). in.mu is held (shared or not).
func (s *Store) segments(in *Inode, first, n uint64, out []segment) ([]segment, error) {
	end, err := s.mappedEnd(in)
	if err != nil {
		return nil, err
	}
	if first >= end {
		// Past every extent (an append): one hole, no tree walk.
		return append(out, segment{lblk: first, n: n}), nil
	}
	var extBuf [4]Extent
	exts, err := s.visit(in, first, n, extBuf[:0])
	if err != nil {
		return nil, err
	}
	cur := first
	for _, e := range exts {
		if e.LBlk > cur {
			out = append(out, segment{lblk: cur, n: e.LBlk - cur})
		}
		out = append(out, segment{lblk: e.LBlk, n: e.Len, ext: e, mapped: true})
		cur = e.End()
	}
	if cur < first+n {
		out = append(out, segment{lblk: cur, n: first + n - cur})
	}
	return out, nil
}

// mappedEnd returns a file block at or after the end of in's last extent
// (see Inode.extEnd), looking it up once per loaded inode. in.mu is held
// (shared or not): extents only change under the exclusive lock, so
// concurrent lookups under the shared one store the same value.
func (s *Store) mappedEnd(in *Inode) (uint64, error) {
	if e := in.extEnd.Load(); e != 0 {
		return e - 1, nil
	}
	last, ok, err := extentBefore(s.treeFor(in.attr.Ino), in.attr.Ino, ^uint64(0))
	if err != nil {
		return 0, treeErr(err)
	}
	end := uint64(0)
	if ok {
		end = last.End()
	}
	in.extEnd.Store(end + 1)
	return end, nil
}

// visit returns the extent pieces of in intersecting [lblk, lblk+n),
// clipped, appended to out (a caller's buffer: a read or write of a few
// blocks should not allocate, so the walk goes through the concrete tree).
func (s *Store) visit(in *Inode, lblk, n uint64, out []Extent) ([]Extent, error) {
	ino := in.attr.Ino
	c := newExtentRange(ino, lblk, n)
	start := len(out)
	var derr error
	err := s.treeFor(ino).AscendLE(format.ExtentKey(ino, lblk), func(k, v []byte) bool {
		more, err := c.take(k, v, &out)
		derr = err
		return more
	})
	if err == nil {
		err = derr
	}
	if err != nil {
		return nil, treeErr(err)
	}
	exts := out[start:]
	if err := s.checkExtents(ino, exts); err != nil {
		return nil, err
	}
	for i := range exts {
		exts[i] = clip(exts[i], lblk, c.end)
	}
	return out, nil
}

// writeLocked does the data part of a write. in.mu is held.
func (s *Store) writeLocked(in *Inode, p []byte, off int64) (int, error) {
	if s.zones != nil {
		return s.zoneWriteLocked(in, p, off)
	}
	bs := int64(s.bs)
	end := off + int64(len(p))
	first := uint64(off / bs)
	last := uint64((end - 1) / bs)
	var segBuf [4]segment
	segs, err := s.segments(in, first, last-first+1, segBuf[:0])
	if err != nil {
		return 0, err
	}
	for _, seg := range segs {
		segLo := max(int64(seg.lblk)*bs, off)
		segHi := min(int64(seg.lblk+seg.n)*bs, end)
		data := p[segLo-off : segHi-off]
		var err error
		switch {
		case seg.mapped && !seg.ext.Unwritten():
			err = s.writeInPlace(in, seg, data, segLo)
		case seg.mapped:
			err = s.fillUnwritten(in, seg, data, segLo)
		default:
			var n int
			n, err = s.fillHole(in, seg, data, segLo)
			segLo += int64(n)
		}
		if err != nil {
			// The bytes that did land (and are mapped) count as
			// written, and the error goes with them: a caller that
			// looks only at the error (page-cache writeback) must not
			// take the rest as stored.
			return int(segLo - off), err
		}
	}
	return len(p), nil
}

// writeInPlace writes data, the file's bytes from offset lo, over a
// written extent piece.
func (s *Store) writeInPlace(in *Inode, seg segment, data []byte, lo int64) error {
	bs := int64(s.bs)
	dev := int64(seg.ext.PBlk)*bs + lo - int64(seg.lblk)*bs
	if err := s.dev.WriteAt(data, dev, s.devStream(in.attr.Stream)); err != nil {
		return s.dataError(in, err)
	}
	return nil
}

// dataError counts a failed data write so each open file sees it once.
func (s *Store) dataError(in *Inode, err error) error {
	s.stats.dataErrors.Add(1)
	in.wbGen.Add(1)
	s.log.Warn("data write failed", zapErr(err))
	return syscall.EIO
}

// bufPool recycles block buffers of up to maxPooled bytes: a fresh zeroed
// buffer per write was a tenth of the daemon's CPU in profiles.
const maxPooled = 1<<20 + 64<<10

var bufPool = sync.Pool{New: func() any { b := make([]byte, maxPooled); return &b }}

// blockBuf builds whole blocks [lblk, lblk+n) holding data at byte offset
// at, zero elsewhere: fresh blocks must never expose what was there before.
// Give it back with putBuf.
func (s *Store) blockBuf(lblk, n uint64, data []byte, at int64) []byte {
	size := n * s.bs
	var buf []byte
	if size <= maxPooled {
		buf = (*bufPool.Get().(*[]byte))[:size]
		head := at - int64(lblk*s.bs)
		clear(buf[:head])
		clear(buf[head+int64(len(data)):])
	} else {
		buf = make([]byte, size)
	}
	copy(buf[at-int64(lblk*s.bs):], data)
	return buf
}

func putBuf(b []byte) {
	if cap(b) == maxPooled {
		b = b[:maxPooled]
		bufPool.Put(&b)
	}
}

// writeBlocks writes whole blocks [lblk, lblk+n) of in at device block
// pblk: data at byte offset at, zeros around it. Data that covers the
// blocks exactly goes to the device as it is, without a copy.
func (s *Store) writeBlocks(in *Inode, lblk, n, pblk uint64, data []byte, at int64) error {
	buf := data
	if at != int64(lblk*s.bs) || uint64(len(data)) != n*s.bs {
		buf = s.blockBuf(lblk, n, data, at)
		defer putBuf(buf)
	}
	return s.dev.WriteAt(buf, int64(pblk*s.bs), s.devStream(in.attr.Stream))
}

// fillUnwritten writes into a preallocated extent piece and converts the
// written blocks.
func (s *Store) fillUnwritten(in *Inode, seg segment, data []byte, at int64) error {
	bs := int64(s.bs)
	lo := uint64(at / bs)
	hi := uint64((at + int64(len(data)) + bs - 1) / bs)
	pblk := seg.ext.PBlk + (lo - seg.lblk)
	// Writing into preallocated space never fails for room: the
	// conversion's node blocks come from the pool.
	resv, err := s.reserveMeta(opsMap, spacePool)
	if err != nil {
		return err
	}
	if err := s.writeBlocks(in, lo, hi-lo, pblk, data, at); err != nil {
		s.unreserve(resv)
		return s.dataError(in, err)
	}
	x := Extent{LBlk: lo, Len: hi - lo, PBlk: pblk, Stream: in.attr.Stream}
	return s.mapLocked(in, x, resv)
}

// fillHole allocates blocks for a hole piece, writes them and maps them. It
// returns how many bytes of data are written and mapped.
func (s *Store) fillHole(in *Inode, seg segment, data []byte, at int64) (int, error) {
	bs := int64(s.bs)
	lo := uint64(at / bs)
	hi := uint64((at + int64(len(data)) + bs - 1) / bs)
	done := 0
	for lo < hi {
		// The mapping's node blocks are reserved before the data's, so
		// data never takes what its own mapping needs.
		resv, err := s.reserveMeta(opsMap, spaceGrow)
		if err != nil {
			return done, err
		}
		x, err := s.allocLocked(in, lo, hi-lo, 0)
		if err != nil {
			s.unreserve(resv)
			return done, err
		}
		chunkLo := max(int64(lo)*bs, at)
		chunkHi := min(int64(lo+x.Len)*bs, at+int64(len(data)))
		if err := s.writeBlocks(in, lo, x.Len, x.PBlk, data[chunkLo-at:chunkHi-at], chunkLo); err != nil {
			// The blocks were never mapped: they can go back at once.
			_ = s.alloc.Free(x.PBlk, x.Len)
			s.unreserve(resv)
			return done, s.dataError(in, err)
		}
		if err := s.mapLocked(in, x, resv); err != nil {
			return done, err
		}
		done += int(chunkHi - chunkLo)
		lo += x.Len
	}
	return done, nil
}

// allocLocked allocates up to n blocks for file block lblk, next to the
// file's previous extent when possible. On ENOSPC it commits the journal
// (freed blocks become usable) and retries once, as ext4 and XFS do.
func (s *Store) allocLocked(in *Inode, lblk, n uint64, flags uint32) (Extent, error) {
	if flags == 0 {
		if x, ok := s.takePreallocLocked(in, lblk, n); ok {
			return x, nil
		}
	}
	if s.room() < s.metaReserve+n {
		// Before ENOSPC every file's speculative preallocation comes
		// back, as XFS trims all EOF blocks, and the open transaction's
		// frees are committed.
		s.trimAllPrealloc()
		// The reserve keeps room for the metadata and for operations
		// that free space.
		if serr := s.makeRoom(); serr != nil || s.room() < s.metaReserve+n {
			if s.room() <= s.metaReserve {
				s.logENOSPC()
				return Extent{}, syscall.ENOSPC
			}
			n = s.room() - s.metaReserve
		}
	}
	req := alloc.Request{Ino: in.attr.Ino, Stream: in.attr.Stream, Len: n}
	prev, ok, err := extentBefore(s.treeFor(in.attr.Ino), in.attr.Ino, lblk)
	if err != nil {
		return Extent{}, treeErr(err)
	}
	if ok && prev.End() <= lblk {
		req.Goal = prev.PBlk + prev.Len + (lblk - prev.End())
	}
	// An append (nothing mapped at or past lblk) preallocates: see
	// prealloc.go. A file's first write that is not at its start (async
	// writeback served out of order) also takes room for the blocks in
	// front of it, as a window.
	var lead uint64
	if flags == 0 && in.IsReg() {
		if last, lok, lerr := extentBefore(s.treeFor(in.attr.Ino), in.attr.Ino, ^uint64(0)); lerr == nil && (!lok || last.End() <= lblk) {
			req.Len = s.preallocSize(lblk, n)
			if !lok && lblk > 0 && s.holeWorthKeepingLocked(in, 0, lblk, req.Len) {
				lead = lblk
				req.Len += lead
			}
		}
	}
	e, err := s.alloc.Alloc(req)
	if errors.Is(err, alloc.ErrNoSpace) {
		if serr := s.j.Sync(); serr == nil {
			e, err = s.alloc.Alloc(req)
		}
	}
	if err != nil {
		if errors.Is(err, alloc.ErrNoSpace) {
			return Extent{}, syscall.ENOSPC
		}
		return Extent{}, fmt.Errorf("allocating for inode %d: %w", in.attr.Ino, err)
	}
	if lead > 0 && e.Len > lead {
		s.keepPreallocLocked(in, prealloc{lblk: 0, pblk: e.Start, n: lead})
		e.Start, e.Len = e.Start+lead, e.Len-lead
	}
	if e.Len > n {
		s.keepPreallocLocked(in, prealloc{lblk: lblk + n, pblk: e.Start + n, n: e.Len - n})
		e.Len = n
	}
	if req.Goal != 0 && e.Start == req.Goal && prev.End() < lblk && flags == 0 {
		s.reserveGapLocked(in, prev.End(), prev.PBlk+prev.Len, lblk-prev.End())
	}
	return Extent{LBlk: lblk, Len: e.Len, PBlk: e.Start, Flags: flags, Stream: in.attr.Stream}, nil
}

// mapLocked maps x in the file and journals it; blocks it replaces are
// freed after the commit. The block count changed: the attributes are
// journaled later with the size. resv is the mapping's reservation
// (reserveMeta), given back here. in.mu is held.
func (s *Store) mapLocked(in *Inode, x Extent, resv uint64) error {
	tx := s.begin()
	tx.resv = resv
	tx.mapExt(in.attr.Ino, x)
	s.markDirtyLocked(in)
	err := tx.commit()
	tx.end()
	// commit copied the records out and handed over freed: nothing refers
	// to tx any more.
	txnPool.Put(tx)
	return err
}

// punchLocked makes file blocks [lblk, lblk+n) a hole, a few extents per
// transaction, each with its own reservation from the pool, as XFS frees a
// large range in a chain of transactions: every step finds room on a full
// device and is consistent on its own (a crash between steps leaves part of
// the range punched; truncate and unlink punch only blocks past EOF or of
// an orphan, which mount frees). in.mu is held, opLock is not.
func (s *Store) punchLocked(in *Inode, lblk, n uint64) error {
	end := lblk + n
	if end < lblk {
		end = ^uint64(0)
	}
	for lblk < end {
		k, last, err := s.extentsFrom(in, lblk, end, freeInline)
		if err != nil || k == 0 {
			return err
		}
		stop := min(last.End(), end)
		tx, err := s.beginOp(opsPunch+k*opsPerFree, spacePool)
		if err != nil {
			return err
		}
		tx.punch(in.attr.Ino, lblk, stop-lblk)
		s.markDirtyLocked(in)
		err = tx.commit()
		tx.end()
		if err != nil {
			return err
		}
		lblk = stop
	}
	return nil
}

// zeroRange writes zeros over bytes [lo, hi) that are mapped and written
// (partial blocks at the edges of truncate, punch and zero-range).
func (s *Store) zeroRange(in *Inode, lo, hi int64) error {
	if hi <= lo {
		return nil
	}
	bs := int64(s.bs)
	first := uint64(lo / bs)
	last := uint64((hi - 1) / bs)
	exts, err := s.visit(in, first, last-first+1, nil)
	if err != nil {
		return err
	}
	for _, x := range exts {
		if x.Unwritten() {
			continue
		}
		a := max(int64(x.LBlk)*bs, lo)
		b := min(int64(x.End())*bs, hi)
		if s.zones != nil {
			if err := s.zoneZeroLocked(in, a, b); err != nil {
				return err
			}
			continue
		}
		dev := int64(x.PBlk)*bs + a - int64(x.LBlk)*bs
		if werr := s.dev.WriteAt(make([]byte, b-a), dev, s.devStream(in.attr.Stream)); werr != nil {
			return s.dataError(in, werr)
		}
	}
	return nil
}

// clearPastEOFLocked makes bytes [lo, hi) past EOF (lo is the size) read
// as zeros before the size grows over them, as XFS's xfs_zero_eof does. In
// normal operation they already are, but a crash can leave written data
// there: a commit can make a write's extents durable before the size that
// covers them (sizes are journaled lazily), and an in-place write past EOF
// can land without its size. The partial blocks at the edges are zeroed in
// place; written extents of the whole blocks between are punched
// (unwritten ones read as zeros anyway). in.mu is held.
func (s *Store) clearPastEOFLocked(in *Inode, lo, hi uint64) error {
	if hi <= lo {
		return nil
	}
	bs := s.bs
	first, last := (lo+bs-1)/bs, hi/bs // whole blocks [first, last)
	if first >= last {
		return s.zeroRange(in, int64(lo), int64(hi))
	}
	if err := s.zeroRange(in, int64(lo), int64(first*bs)); err != nil {
		return err
	}
	if err := s.zeroRange(in, int64(last*bs), int64(hi)); err != nil {
		return err
	}
	exts, err := s.visit(in, first, last-first, nil)
	if err != nil {
		return err
	}
	for _, x := range exts {
		if !x.Unwritten() {
			if err := s.punchLocked(in, x.LBlk, x.Len); err != nil {
				return err
			}
		}
	}
	return nil
}

// truncateLocked sets the size, freeing blocks past it. in.mu is held.
func (s *Store) truncateLocked(in *Inode, size uint64) error {
	if size > MaxFileSize {
		return syscall.EFBIG
	}
	bs := s.bs
	old := in.attr.Size
	s.dropPreallocLocked(in)
	if size < old {
		// Zero the tail of the last block so a later extension reads zeros.
		if err := s.zeroRange(in, int64(size), int64(min(old, (size+bs-1)/bs*bs))); err != nil {
			return err
		}
	}
	if err := s.clearPastEOFLocked(in, old, size); err != nil {
		return err
	}
	// The punch and the new size are journaled together: a crash must not
	// leave the old size over blocks that are already gone. With many
	// extents to free the size goes first and the blocks past it follow,
	// a few extents per transaction (as XFS truncates): blocks past EOF
	// are harmless if a crash comes between.
	keep := (size + bs - 1) / bs
	last, hasLast, err := extentBefore(s.treeFor(in.attr.Ino), in.attr.Ino, ^uint64(0))
	if err != nil {
		return treeErr(err)
	}
	// A truncate to the same size also frees blocks past EOF (KEEP_SIZE
	// preallocation), as on ext4 and XFS: RocksDB gives back the
	// preallocated tail of each table so at close.
	cut := size <= old && hasLast && last.End() > keep
	k := 0
	if cut {
		if k, _, err = s.extentsFrom(in, keep, ^uint64(0), freeInline+1); err != nil {
			return err
		}
	}
	tx, err := s.beginOp(opsInode+opsPunch+min(k, freeInline)*opsPerFree, spacePool)
	if err != nil {
		return err
	}
	if cut && k <= freeInline {
		tx.punch(in.attr.Ino, keep, last.End()-keep)
	}
	in.attr.Size = size
	t := now()
	in.attr.Mtime, in.attr.Ctime = t, t
	tx.inode(&in.attr)
	err = tx.commit()
	tx.end()
	if err == nil && cut && k > freeInline {
		err = s.punchLocked(in, keep, ^uint64(0)-keep)
	}
	return err
}

// Fallocate modes (linux/falloc.h).
const (
	FallocKeepSize  = 0x01
	FallocPunchHole = 0x02
	FallocZeroRange = 0x10
)

// Fallocate preallocates, punches or zeroes [off, off+length). On zones
// there is no preallocation (EOPNOTSUPP, as XFS on zoned devices): a
// sequential zone cannot keep a location for a later write.
func (s *Store) Fallocate(in *Inode, off, length int64, mode uint32) error {
	if s.zones != nil && mode&(FallocPunchHole|FallocZeroRange) == 0 {
		return syscall.EOPNOTSUPP
	}
	return s.zoneRetry(func() error { return s.fallocate(in, off, length, mode) })
}

func (s *Store) fallocate(in *Inode, off, length int64, mode uint32) error {
	if err := s.writable(); err != nil {
		return err
	}
	if off < 0 || length <= 0 {
		return syscall.EINVAL
	}
	if off+length > MaxFileSize {
		return syscall.EFBIG
	}
	if mode&^(FallocKeepSize|FallocPunchHole|FallocZeroRange) != 0 {
		return syscall.EOPNOTSUPP
	}
	if mode&FallocPunchHole != 0 && (mode&FallocKeepSize == 0 || mode&FallocZeroRange != 0) {
		return syscall.EINVAL
	}
	if !s.roomForDirty() {
		return syscall.ENOSPC
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.freed {
		return syscall.ENOENT
	}
	if !in.IsReg() {
		return syscall.ENODEV
	}
	// Preallocation windows would overlap what fallocate maps or punches.
	s.dropPreallocLocked(in)
	bs := int64(s.bs)
	end := off + length
	if mode&(FallocKeepSize|FallocPunchHole) == 0 {
		if err := s.clearPastEOFLocked(in, in.attr.Size, uint64(end)); err != nil {
			return err
		}
	}
	switch {
	case mode&FallocPunchHole != 0:
		size := int64(in.attr.Size)
		if off < size {
			if err := s.clearRange(in, off, min(end, size)); err != nil {
				return err
			}
		}
		// Whole blocks past EOF (KEEP_SIZE preallocation) are freed as
		// XFS frees them; there is nothing to zero there.
		lo, hi := (max(off, size)+bs-1)/bs, end/bs
		if hi > lo {
			if err := s.punchLocked(in, uint64(lo), uint64(hi-lo)); err != nil {
				return err
			}
		}
	case mode&FallocZeroRange != 0:
		if err := s.clearRange(in, off, end); err != nil {
			return err
		}
		if s.zones == nil {
			if err := s.preallocLocked(in, uint64(off/bs), uint64((end+bs-1)/bs)); err != nil {
				return err
			}
		}
	default:
		if err := s.preallocLocked(in, uint64(off/bs), uint64((end+bs-1)/bs)); err != nil {
			return err
		}
	}
	s.opLock.RLock()
	if mode&(FallocKeepSize|FallocPunchHole) == 0 && uint64(end) > in.attr.Size {
		in.attr.Size = uint64(end)
	}
	in.attr.Ctime = now()
	if mode&(FallocPunchHole|FallocZeroRange) != 0 {
		in.attr.Mtime = in.attr.Ctime
	}
	s.markDirtyLocked(in)
	s.opLock.RUnlock()
	return nil
}

// clearRange makes bytes [off, end) read as zeros: whole blocks inside are
// punched, partial edge blocks zeroed in place. in.mu is held.
func (s *Store) clearRange(in *Inode, off, end int64) error {
	bs := int64(s.bs)
	full0, full1 := (off+bs-1)/bs, end/bs
	if full1 <= full0 {
		return s.zeroRange(in, off, end)
	}
	if err := s.zeroRange(in, off, full0*bs); err != nil {
		return err
	}
	if err := s.zeroRange(in, full1*bs, end); err != nil {
		return err
	}
	return s.punchLocked(in, uint64(full0), uint64(full1-full0))
}

// preallocLocked maps every hole in file blocks [lo, hi) to unwritten
// extents. in.mu is held.
func (s *Store) preallocLocked(in *Inode, lo, hi uint64) error {
	var segBuf [4]segment
	segs, err := s.segments(in, lo, hi-lo, segBuf[:0])
	if err != nil {
		return err
	}
	for _, seg := range segs {
		if seg.mapped {
			continue
		}
		for b := seg.lblk; b < seg.lblk+seg.n; {
			resv, err := s.reserveMeta(opsMap, spaceGrow)
			if err != nil {
				return err
			}
			x, err := s.allocLocked(in, b, seg.lblk+seg.n-b, format.ExtUnwritten)
			if err != nil {
				s.unreserve(resv)
				return err
			}
			if err := s.mapLocked(in, x, resv); err != nil {
				return err
			}
			b += x.Len
		}
	}
	return nil
}

// Seek whence values for data and holes.
const (
	SeekData = 3
	SeekHole = 4
)

// Seek implements SEEK_DATA and SEEK_HOLE; unwritten extents are holes.
func (s *Store) Seek(in *Inode, off int64, whence int) (int64, error) {
	in.mu.RLock()
	defer in.mu.RUnlock()
	size := int64(in.attr.Size)
	if off < 0 {
		return 0, syscall.EINVAL
	}
	if off >= size {
		return 0, syscall.ENXIO
	}
	bs := int64(s.bs)
	blk := uint64(off / bs) // SEEK_HOLE: first block not known to be data
	found := false          // SEEK_DATA: data found at blk
	ino := in.attr.Ino
	t := s.treeFor(ino)
	start := blk
	if x, ok, err := extentBefore(t, ino, blk+1); err != nil {
		return 0, treeErr(err)
	} else if ok && x.End() > blk {
		start = x.LBlk
	}
	// Walk the extents from blk on, only as far as the answer needs.
	err := ascendExtents(t, ino, start, func(x Extent) bool {
		if x.End() <= blk {
			return true
		}
		if whence == SeekData {
			if x.Unwritten() {
				return true
			}
			blk, found = max(x.LBlk, blk), true
			return false
		}
		if x.Unwritten() || x.LBlk > blk {
			return false // the hole starts at blk
		}
		blk = x.End()
		return int64(blk)*bs < size
	})
	if err != nil {
		return 0, treeErr(err)
	}
	if whence == SeekData {
		if !found || int64(blk)*bs >= size {
			return 0, syscall.ENXIO
		}
		return max(int64(blk)*bs, off), nil
	}
	return min(max(int64(blk)*bs, off), size), nil
}
