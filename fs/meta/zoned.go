package meta

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/streamfs/streamfs/alloc"
	"github.com/streamfs/streamfs/alloc/zone"
	"github.com/streamfs/streamfs/backend"
	"github.com/streamfs/streamfs/fs/format"
)

// The zoned layout (format: "Zoned layout"). Metadata stays where it is on
// any device, in the conventional zones, with the AG allocator; file data
// goes only to sequential zones, through package zone's allocator:
//
//   - every data write is out of place: whole blocks appended to an open
//     zone of the file's stream (Zone Append: writers to one zone need no
//     order between them), then mapped over whatever the range held, in
//     one transaction whose commit frees the old blocks; a partial edge
//     block takes the rest of its bytes from the old block first;
//   - freed blocks are garbage until their zone is reset; the zones' live
//     counts are not stored: mount rebuilds them from the extents;
//   - the reclaimer copies a victim zone's live blocks into the reclaim
//     zone of their stream, remaps them in transactions, commits, and only
//     then resets the zone (a replay must never map blocks into a reset
//     zone). A crash before the commit leaves the old mapping and the copies
//     as garbage; after it, a zone with no live block, which reclaim resets
//     later;
//   - no locations are held for later: fallocate's preallocation is refused
//     (EOPNOTSUPP, as XFS refuses it on zoned devices), and speculative
//     preallocation is off.
//
// Waiting for space. A writer that finds no free zone while full zones
// hold garbage must wait for reclaim, and reclaim must lock the files
// whose blocks it moves. So a writer never waits holding its inode lock:
// the allocator answers *zone.WouldWait, the writer drops the lock, waits
// for the allocator's wake channel and goes on (Write keeps what it wrote;
// Setattr and Fallocate start again, which changed nothing yet).

// zoneData is a mounted zoned filesystem's data space.
type zoneData struct {
	dev backend.Zoned
	a   *zone.Allocator
	// appendBlocks bounds one append: zoneAppendMax, or less where the
	// device's zone append limit is lower (QEMU's ZNS: 512 KiB).
	appendBlocks uint64
	// loaded: the allocator holds the device's state (Load ran, read-write
	// mount). Before that frees are not counted: Load counts the extents.
	loaded atomic.Bool
	// passMu is held for a reclaim pass (outside every inode lock), so
	// that a check can see the zones quiet.
	passMu sync.Mutex

	resets, victims, passes, reclaimFail atomic.Uint64
	// failed is closed while reclaim cannot make room (its last pass
	// failed, or the filesystem shut down), failErr saying why; a pass
	// that succeeds installs a new one. Writers waiting for room give up
	// on it: they would wait for a pass that may never succeed (a dead
	// device).
	failMu   sync.Mutex // leaf; guards failed, failErr
	failed   chan struct{}
	failErr  error
	statMu   sync.Mutex // leaf; guards byStream
	byStream map[uint32]*zoneStreamStats
}

// zoneStreamStats counts, for one stream, the data blocks written by
// writes (whole blocks: a partial block costs one) and by reclaim.
type zoneStreamStats struct {
	written, reclaimed atomic.Uint64
}

// setReclaimErr records the outcome of a reclaim pass (nil: it
// succeeded), waking the writers waiting for room when it failed.
func (z *zoneData) setReclaimErr(err error) {
	z.failMu.Lock()
	defer z.failMu.Unlock()
	switch {
	case err == nil && z.failErr != nil:
		z.failed, z.failErr = make(chan struct{}), nil
	case err != nil && z.failErr == nil:
		close(z.failed)
		z.failErr = err
	case err != nil:
		z.failErr = err
	}
}

// reclaimFailed returns the channel closed while reclaim cannot make room.
func (z *zoneData) reclaimFailed() <-chan struct{} {
	z.failMu.Lock()
	defer z.failMu.Unlock()
	return z.failed
}

func (z *zoneData) reclaimErr() error {
	z.failMu.Lock()
	defer z.failMu.Unlock()
	return z.failErr
}

func (z *zoneData) stream(id uint32) *zoneStreamStats {
	z.statMu.Lock()
	defer z.statMu.Unlock()
	st := z.byStream[id]
	if st == nil {
		st = new(zoneStreamStats)
		z.byStream[id] = st
	}
	return st
}

// openZones makes the zone allocator of a zoned filesystem (with every
// zone free: loadZones gives it the device's state).
func (s *Store) openZones() error {
	if !s.sb.Zoned() {
		return nil
	}
	zdev, ok := s.dev.(backend.Zoned)
	if !ok {
		return fmt.Errorf("the filesystem is zoned but the device (%s) is not: %w", s.dev.Kind(), format.ErrCorrupt)
	}
	geo, err := zone.FromDevice(zdev.Geometry(), int64(s.bs))
	if err != nil {
		return fmt.Errorf("zoned device: %w", err)
	}
	if uint64(geo.First)*geo.ZoneBlocks != s.sb.DataStart || geo.ZoneBlocks != s.sb.ZoneBlocks ||
		geo.CapBlocks != s.sb.ZoneCap || uint64(geo.Zones-geo.First) != s.sb.DataZones {
		return fmt.Errorf("device zones (%d zones of %d blocks, %d writable, sequential from zone %d) differ from the filesystem's (%d of %d, %d, from block %d): %w",
			geo.Zones, geo.ZoneBlocks, geo.CapBlocks, geo.First, s.sb.DataZones, s.sb.ZoneBlocks, s.sb.ZoneCap, s.sb.DataStart, format.ErrCorrupt)
	}
	_, streams := alloc.SoftwareStreams(s.sb.AGCount)
	a, err := zone.New(geo, zdev, zone.Options{Streams: streams, Cache: s.opts.PlacementCache, BlockSize: int64(s.bs)})
	if err != nil {
		return fmt.Errorf("zone allocator: %w", err)
	}
	limit := int64(zoneAppendMax)
	if m := zdev.Geometry().MaxAppend; m > 0 {
		limit = min(limit, m)
	}
	if limit < int64(s.bs) {
		a.Close()
		return fmt.Errorf("zoned device: zone append limit of %d bytes is below the block size %d", limit, s.bs)
	}
	s.zones = &zoneData{dev: zdev, a: a, appendBlocks: uint64(limit) / s.bs, byStream: make(map[uint32]*zoneStreamStats), failed: make(chan struct{})}
	return nil
}

// loadZones gives the zone allocator the device's zones and the live
// extents, and starts the reclaimer (read-write mounts).
func (s *Store) loadZones() error {
	z := s.zones
	if z == nil || z.loaded.Load() {
		return nil
	}
	report, err := z.dev.ReportZones(0, 0)
	if err != nil {
		return fmt.Errorf("zone report: %w", err)
	}
	var live []zone.Extent
	err = s.eachDataExtent(func(_ uint64, x Extent) bool {
		live = append(live, zone.Extent{Start: x.PBlk, Len: x.Len})
		return true
	})
	if err != nil {
		return err
	}
	if err := z.a.Load(report, live); err != nil {
		return fmt.Errorf("zones: %w", err)
	}
	z.loaded.Store(true)
	s.stopWG.Add(1)
	go s.reclaimer()
	return nil
}

// eachDataExtent calls fn for every extent in the trees, in no particular
// order, until fn returns false.
func (s *Store) eachDataExtent(fn func(ino uint64, x Extent) bool) error {
	for _, t := range s.trees {
		var derr error
		more := true
		err := t.Ascend([]byte{format.KeyInoSpc}, func(k, v []byte) bool {
			if len(k) == 0 || k[0] != format.KeyInoSpc {
				return false
			}
			ino, kind, _, err := format.InoKey(k)
			if err != nil || kind != format.KindExtent {
				return err == nil
			}
			lblk, n, pblk, flags, stream, err := format.DecodeExtent(k, v)
			if err != nil {
				derr = err
				return false
			}
			more = fn(ino, Extent{LBlk: lblk, Len: n, PBlk: pblk, Flags: flags, Stream: stream})
			return more
		})
		if err == nil {
			err = derr
		}
		if err != nil {
			return fmt.Errorf("reading extents: %w", treeErr(err))
		}
		if !more {
			return nil
		}
	}
	return nil
}

// zoneFree turns blocks a commit unmapped into garbage.
func (s *Store) zoneFree(e alloc.Extent) {
	if !s.zones.loaded.Load() {
		return
	}
	if err := s.zones.a.Free(e.Start, e.Len); err != nil {
		s.log.Error("freeing zone blocks failed: zone allocator and metadata disagree", zapErr(err))
	}
}

// zoneAppendMax bounds one append: a pooled buffer's worth. A device with
// a lower zone append limit lowers it (zoneData.appendBlocks).
const zoneAppendMax = 1 << 20

// zoneWriteLocked writes p at off out of place (see the top of the file).
// It returns the bytes written and mapped, and *zone.WouldWait (wrapped)
// when the allocator has no room until reclaim makes some. in.mu is held.
func (s *Store) zoneWriteLocked(in *Inode, p []byte, off int64) (int, error) {
	bs := int64(s.bs)
	end := off + int64(len(p))
	lo, hi := uint64(off/bs), uint64((end+bs-1)/bs)
	mapped, err := s.mappedEnd(in)
	if err != nil {
		return 0, err
	}
	random := lo != mapped
	done := 0
	for lo < hi {
		resv, err := s.reserveMeta(opsMap, spaceGrow)
		if err != nil {
			return done, err
		}
		e, err := s.zoneAlloc(zone.Request{Ino: in.attr.Ino, Stream: in.attr.Stream,
			Len: min(hi-lo, s.zones.appendBlocks), Random: random, NoWait: true})
		if err != nil {
			s.unreserve(resv)
			if errors.Is(err, zone.ErrNoSpace) {
				s.logENOSPC()
				return done, syscall.ENOSPC
			}
			return done, err
		}
		chunkLo := max(int64(lo)*bs, off)
		chunkHi := min(int64(lo+e.Len)*bs, end)
		pblk, err := s.zoneAppend(in, e, lo, p[chunkLo-off:chunkHi-off], chunkLo)
		if err != nil {
			s.unreserve(resv)
			return done, err
		}
		x := Extent{LBlk: lo, Len: e.Len, PBlk: pblk, Stream: in.attr.Stream}
		if err := s.mapLocked(in, x, resv); err != nil {
			// Never mapped: garbage at once.
			s.zoneFree(alloc.Extent{Start: pblk, Len: e.Len})
			return done, err
		}
		s.zones.stream(in.attr.Stream).written.Add(e.Len)
		done += int(chunkHi - chunkLo)
		lo += e.Len
	}
	return done, nil
}

// zoneAlloc allocates for a write. Short of room it first commits the
// journal: blocks the open transaction frees become garbage only at the
// commit (and then reclaimable), as the AG allocator's retry after a
// commit gets freed blocks back. Always, not only with frees pending: a
// commit another writer started may hold them, and Sync waits for it.
func (s *Store) zoneAlloc(r zone.Request) (zone.Extent, error) {
	e, err := s.zones.a.Alloc(context.Background(), r)
	var ww *zone.WouldWait
	if errors.Is(err, zone.ErrNoSpace) || errors.As(err, &ww) {
		if serr := s.j.Sync(); serr != nil {
			return zone.Extent{}, serr
		}
		e, err = s.zones.a.Alloc(context.Background(), r)
	}
	return e, err
}

// zoneAppend appends file blocks [lblk, lblk+e.Len) of in, holding data at
// byte offset at, to e's zone and returns the device block they landed
// at. Bytes of the edge blocks outside data come from the blocks mapped
// there now (zeros for holes). It reports e's completion to the allocator.
func (s *Store) zoneAppend(in *Inode, e zone.Extent, lblk uint64, data []byte, at int64) (uint64, error) {
	buf, err := s.zoneBuf(in, lblk, e.Len, data, at)
	if err != nil {
		_ = s.zones.a.Done(e, err)
		return 0, err
	}
	zoneStart := s.zoneStartOf(e.Start)
	got, werr := s.zones.dev.Append(buf, int64(zoneStart*s.bs), s.devStream(in.attr.Stream))
	putBuf(buf)
	if derr := s.zones.a.Done(e, werr); derr != nil {
		s.log.Error("zone allocator refused a completion", zapErr(derr))
	}
	if werr != nil {
		return 0, s.dataError(in, werr)
	}
	pblk := uint64(got) / s.bs
	if uint64(got)%s.bs != 0 || !s.sb.InDataArea(pblk, e.Len) {
		return 0, s.dataError(in, fmt.Errorf("zone append landed at byte %d, not a block of zone %d: %w", got, zoneStart, format.ErrCorrupt))
	}
	return pblk, nil
}

// zoneBuf builds whole blocks [lblk, lblk+n) holding data at byte offset
// at; a partial first or last block is read-modify-written from what is
// mapped there. Give it back with putBuf.
func (s *Store) zoneBuf(in *Inode, lblk, n uint64, data []byte, at int64) ([]byte, error) {
	bs := int64(s.bs)
	buf := s.blockBuf(lblk, n, data, at)
	head := at - int64(lblk)*bs
	tail := int64(lblk+n)*bs - (at + int64(len(data)))
	fill := func(b uint64) error {
		var segBuf [1]segment
		segs, err := s.segments(in, b, 1, segBuf[:0])
		if err != nil || len(segs) != 1 || !segs[0].mapped || segs[0].ext.Unwritten() {
			return err
		}
		blk := make([]byte, bs)
		if err := s.dev.ReadAt(blk, int64(segs[0].ext.PBlk+(b-segs[0].lblk))*bs); err != nil {
			return fmt.Errorf("reading inode %d block %d to rewrite it: %w", in.attr.Ino, b, err)
		}
		o := int64(b-lblk) * bs
		if b == lblk && head > 0 {
			copy(buf[o:o+head], blk[:head])
		}
		if b == lblk+n-1 && tail > 0 {
			copy(buf[o+bs-tail:o+bs], blk[bs-tail:])
		}
		return nil
	}
	var err error
	if head > 0 {
		err = fill(lblk)
	}
	if err == nil && tail > 0 && (n > 1 || head == 0) {
		err = fill(lblk + n - 1)
	}
	if err != nil {
		putBuf(buf)
		return nil, err
	}
	return buf, nil
}

// zoneZeroLocked writes zeros over bytes [lo, hi), out of place. in.mu is
// held.
func (s *Store) zoneZeroLocked(in *Inode, lo, hi int64) error {
	n, err := s.zoneWriteLocked(in, make([]byte, hi-lo), lo)
	if err == nil && n != int(hi-lo) {
		err = syscall.EIO
	}
	return err
}

// zoneRetry runs op (which takes in.mu itself) again as long as it ends
// in *zone.WouldWait, waiting for room in between with no lock held.
func (s *Store) zoneRetry(op func() error) error {
	for {
		retry, err := s.zoneWait(op())
		if !retry {
			return err
		}
	}
}

// zoneWait waits for room when err is *zone.WouldWait and reports whether
// it did. Otherwise it returns the error to give up with: err, or why
// reclaim cannot make room (unmount ends the wait with err).
func (s *Store) zoneWait(err error) (bool, error) {
	var ww *zone.WouldWait
	if !errors.As(err, &ww) {
		return false, err
	}
	select {
	case <-ww.Wake:
		return true, nil
	case <-s.stop:
		return false, err
	case <-s.zones.reclaimFailed():
		return false, fmt.Errorf("no room in the zones: reclaim failed: %w", s.zones.reclaimErr())
	}
}

// reclaimer runs reclaim passes while free zones are low, woken by the
// allocator (a writer waits, or a zone was taken below the low
// watermark) and once a second.
func (s *Store) reclaimer() {
	defer s.stopWG.Done()
	z := s.zones
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	// Reclaim's own waits (a reclaim zone draining) end at unmount.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.stop:
		case <-ctx.Done():
		}
		cancel()
	}()
	for {
		select {
		case <-s.stop:
			return
		case <-z.a.ReclaimWanted():
		case <-tick.C:
		}
		for z.a.NeedReclaim() {
			if err := s.writable(); err != nil {
				z.setReclaimErr(err)
				break
			}
			did, err := s.reclaimOnce(ctx)
			z.setReclaimErr(err)
			if err != nil {
				z.reclaimFail.Add(1)
				s.log.Warn("zone reclaim failed; trying again later", zapErr(err))
				break
			}
			if !did {
				break
			}
			select {
			case <-s.stop:
				return
			default:
			}
		}
	}
}

// reclaimBatch is the most victims one reclaim pass takes: finding their
// live blocks costs a walk of every extent record (there is no reverse
// map), which a pass shares among its victims. Up to 4, and no more than a
// sixteenth of the zones: each extra victim is a worse one (more live
// blocks to copy) than the next pass would have found.
func (s *Store) reclaimBatch() int {
	return max(1, min(4, int(s.sb.DataZones/16)))
}

// reclaimOnce reclaims up to reclaimBatch victim zones (more than one only
// while free zones stay low and their live blocks fit one zone): copies
// their live blocks, commits the new mapping, resets them. did is false
// when no zone holds garbage.
func (s *Store) reclaimOnce(ctx context.Context) (did bool, err error) {
	z := s.zones
	z.passMu.Lock()
	defer z.passMu.Unlock()
	v, ok := z.a.Victim()
	if !ok && s.j.PendingFreeBlocks() > 0 {
		// Garbage waiting for a commit becomes reclaimable with it.
		if err := s.j.Sync(); err != nil {
			return false, err
		}
		v, ok = z.a.Victim()
	}
	if !ok {
		return false, nil
	}
	// More victims only while their copies together fit in one zone: a
	// pass resets nothing before its commit, so all its copies must find
	// room in the reclaim reserve (two zones), as one victim's always do.
	victims, live := []zone.Info{v}, v.Live
	for len(victims) < s.reclaimBatch() && z.a.Space().FreeZones+len(victims) <= z.a.LowWater() {
		v, ok := z.a.Victim()
		if !ok {
			break
		}
		if live+v.Live > s.sb.ZoneCap {
			if err := z.a.Unpick(v.Index); err != nil {
				return false, err
			}
			break
		}
		victims, live = append(victims, v), live+v.Live
	}
	z.victims.Add(uint64(len(victims)))
	z.passes.Add(1)
	defer func() {
		for _, v := range victims {
			if err != nil && v.Index >= 0 {
				if uerr := z.a.Unpick(v.Index); uerr != nil {
					err = errors.Join(err, uerr)
				}
			}
		}
	}()
	victimOf := func(b uint64) int {
		for i, v := range victims {
			if b >= v.Start && b < v.Start+s.sb.ZoneCap {
				return i
			}
		}
		return -1
	}
	type piece struct{ ino, lblk, n uint64 }
	var pieces []piece
	err = s.eachDataExtent(func(ino uint64, x Extent) bool {
		for b := x.PBlk; b < x.PBlk+x.Len; {
			end := min(x.PBlk+x.Len, s.zoneStartOf(b)+s.sb.ZoneBlocks)
			if victimOf(b) >= 0 {
				pieces = append(pieces, piece{ino, x.LBlk + (b - x.PBlk), end - b})
			}
			b = end
		}
		return true
	})
	if err != nil {
		return false, err
	}
	for _, p := range pieces {
		if err := s.zoneMove(ctx, p.ino, p.lblk, p.n, victimOf); err != nil {
			return false, fmt.Errorf("reclaiming zones: inode %d: %w", p.ino, err)
		}
	}
	// The commit frees the victims' blocks (Release); only a durable
	// commit lets a zone be reset.
	if err := s.j.Sync(); err != nil {
		return false, fmt.Errorf("reclaiming zones: commit: %w", err)
	}
	var errs []error
	for i, v := range victims {
		if err := z.a.Reset(v.Index); err != nil {
			errs = append(errs, err) // left picked: Unpick below
			continue
		}
		victims[i].Index = -1
		z.resets.Add(1)
	}
	return true, errors.Join(errs...)
}

// zoneMove copies the blocks of file blocks [lblk, lblk+n) of ino that
// still lie in a victim zone (victimOf >= 0) to reclaim zones and maps the
// copies. Pieces a write moved meanwhile are left: their victim blocks are
// already garbage.
func (s *Store) zoneMove(ctx context.Context, ino, lblk, n uint64, victimOf func(uint64) int) error {
	in, err := s.loadInode(ino)
	if err != nil || in == nil {
		return err
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.freed {
		return nil
	}
	exts, err := s.visit(in, lblk, n, nil)
	if err != nil {
		return err
	}
	for _, x := range exts {
		for b := x.PBlk; b < (x.PBlk + x.Len); {
			end := min((x.PBlk + x.Len), s.zoneStartOf(b)+s.sb.ZoneBlocks)
			if victimOf(b) >= 0 {
				if err := s.zoneMovePiece(ctx, in, x, b, end); err != nil {
					return err
				}
			}
			b = end
		}
	}
	return nil
}

// zoneMovePiece copies device blocks [a, b) of in's extent x to reclaim
// zones and maps the copies. in.mu is held.
func (s *Store) zoneMovePiece(ctx context.Context, in *Inode, x Extent, a, b uint64) error {
	fblk := x.LBlk + (a - x.PBlk)
	for a < b {
		e, err := s.zones.a.AllocReclaim(ctx, x.Stream, min(b-a, s.zones.appendBlocks))
		if err != nil {
			return err
		}
		resv, err := s.reserveMeta(opsMap, spacePool)
		if err != nil {
			_ = s.zones.a.Done(e, err)
			return err
		}
		buf := s.blockBuf(0, e.Len, nil, 0)
		pblk, err := s.zoneCopy(buf, a, e, x.Stream)
		putBuf(buf)
		if err != nil {
			s.unreserve(resv)
			return err
		}
		y := Extent{LBlk: fblk, Len: e.Len, PBlk: pblk, Flags: x.Flags, Stream: x.Stream}
		if err := s.mapLocked(in, y, resv); err != nil {
			s.zoneFree(alloc.Extent{Start: pblk, Len: e.Len})
			return err
		}
		s.zones.stream(x.Stream).reclaimed.Add(e.Len)
		a, fblk = a+e.Len, fblk+e.Len
	}
	return nil
}

// zoneStartOf is the first block of the sequential zone holding block b.
func (s *Store) zoneStartOf(b uint64) uint64 {
	return s.sb.DataStart + (b-s.sb.DataStart)/s.sb.ZoneBlocks*s.sb.ZoneBlocks
}

// zoneCopy reads e.Len blocks at device block from into buf and appends
// them to e's zone, reporting e's completion; it returns where they
// landed.
func (s *Store) zoneCopy(buf []byte, from uint64, e zone.Extent, stream uint32) (uint64, error) {
	err := s.dev.ReadAt(buf, int64(from*s.bs))
	var got int64
	if err == nil {
		got, err = s.zones.dev.Append(buf, int64(s.zoneStartOf(e.Start)*s.bs), s.devStream(stream))
	}
	if derr := s.zones.a.Done(e, err); derr != nil {
		s.log.Error("zone allocator refused a completion", zapErr(derr))
	}
	if err != nil {
		s.stats.dataErrors.Add(1)
		return 0, fmt.Errorf("copying blocks %d+%d: %w", from, e.Len, err)
	}
	pblk := uint64(got) / s.bs
	if uint64(got)%s.bs != 0 || !s.sb.InDataArea(pblk, e.Len) {
		return 0, fmt.Errorf("zone append landed at byte %d: %w", got, format.ErrCorrupt)
	}
	return pblk, nil
}

// ZoneCounters are the zoned layout's numbers for `streamfs stats`.
type ZoneCounters struct {
	Space zone.Space `json:"space"`
	Alloc zone.Stats `json:"alloc"`
	// Reclaim: passes, victims picked (a pass takes several when free
	// zones stay low), zones reset, passes that failed.
	Passes       uint64 `json:"reclaim_passes"`
	Victims      uint64 `json:"reclaim_victims"`
	Resets       uint64 `json:"reclaim_resets"`
	ReclaimFails uint64 `json:"reclaim_failures"`
	// Per stream: data bytes written by writes and copied by reclaim,
	// and the filesystem's write amplification (both / written).
	Streams map[uint32]ZoneStreamCounters `json:"streams"`
	// Totals over the streams.
	WrittenBytes   uint64  `json:"written_bytes"`
	ReclaimedBytes uint64  `json:"reclaimed_bytes"`
	WriteAmp       float64 `json:"write_amplification"`
}

// ZoneStreamCounters are one stream's zoned data counters.
type ZoneStreamCounters struct {
	WrittenBytes   uint64  `json:"written_bytes"`
	ReclaimedBytes uint64  `json:"reclaimed_bytes"`
	WriteAmp       float64 `json:"write_amplification"`
}

func writeAmp(written, reclaimed uint64) float64 {
	if written == 0 {
		return 0
	}
	return float64(written+reclaimed) / float64(written)
}

// ZoneCounters returns the zoned layout's counters; ok is false on a
// filesystem that is not zoned.
func (s *Store) ZoneCounters() (c ZoneCounters, ok bool) {
	z := s.zones
	if z == nil {
		return c, false
	}
	c = ZoneCounters{Space: z.a.Space(), Alloc: z.a.Stats(), Passes: z.passes.Load(), Victims: z.victims.Load(), Resets: z.resets.Load(),
		ReclaimFails: z.reclaimFail.Load(), Streams: map[uint32]ZoneStreamCounters{}}
	z.statMu.Lock()
	for id, st := range z.byStream {
		w, r := st.written.Load()*s.bs, st.reclaimed.Load()*s.bs
		c.Streams[id] = ZoneStreamCounters{WrittenBytes: w, ReclaimedBytes: r, WriteAmp: writeAmp(w, r)}
		c.WrittenBytes += w
		c.ReclaimedBytes += r
	}
	z.statMu.Unlock()
	c.WriteAmp = writeAmp(c.WrittenBytes, c.ReclaimedBytes)
	return c, true
}

// zoneStreams is the stream count a zoned filesystem offers: what the open
// and active limits leave room for.
func (s *Store) zoneStreams() (uint32, bool) {
	if s.zones == nil {
		return 0, false
	}
	return s.zones.a.Streams(), true
}
