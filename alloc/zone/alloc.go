package zone

import (
	"context"
	"errors"
	"fmt"

	"github.com/streamfs/streamfs/alloc"
	"github.com/streamfs/streamfs/backend"
)

// errWait: no zone can be opened now, but one will come back (a reset
// after reclaim, or a zone draining its writes in flight).
var errWait = errors.New("zone alloc: wait")

// WouldWait is Alloc's error, for a Request with NoWait, where it would
// have waited: Wake is closed when retrying may succeed. A caller holding
// locks the reclaimer needs (a file's lock: reclaim moves that file's
// blocks) drops them and waits on Wake instead of inside Alloc.
type WouldWait struct{ Wake <-chan struct{} }

func (e *WouldWait) Error() string {
	return "zone alloc: no free zone now; reclaim or a draining zone will make room"
}

// class maps a stream id onto the stream classes the slots serve: ids
// above Streams wrap (as alloc.DeviceStream does), 0 or no streams is the
// generic class 0.
func (a *Allocator) class(stream uint32) uint32 {
	if stream == 0 || a.streams == 0 {
		return 0
	}
	return alloc.DeviceStream(stream, a.streams)
}

// slotSet returns the slots the placement rule gives a file, target first:
// a stream's set by the seed's partition (alloc.StreamAGSet over the
// stream slots instead of AGs), or the generic set (alloc.GenericAGSet's
// rule over the generic slots), with agino fanning files out inside it.
func (a *Allocator) slotSet(ino uint64, class uint32, buf []*slot) []*slot {
	agino := alloc.InoAGino(ino)
	if class != 0 {
		first, size := alloc.StreamAGSet(class, a.streams, uint32(a.nStream))
		k := agino % size
		for j := range size {
			buf = append(buf, a.slots[first+(k+j)%size])
		}
		return buf
	}
	g := uint32(a.nGen)
	base := alloc.InoAG(ino) % g
	size := min(2, g)
	k := agino % size
	for j := range size {
		buf = append(buf, a.slots[a.nStream+int((base+(k+j)%size)%g)])
	}
	return buf
}

// reclaimSlot returns the reclaim slot of a class.
func (a *Allocator) reclaimSlot(class uint32) *slot {
	return a.slots[a.nStream+a.nGen+int(class)]
}

// Alloc returns 1..r.Len blocks in one zone for a file's write. The caller
// writes them in allocation order per zone (or by zone append) and calls
// Done for the extent once the write completed or failed.
//
// Waiting: when no free zone is left beyond the reclaim reserve and full
// zones hold garbage, or the open/active limit is taken by zones still
// draining their writes in flight, Alloc waits until Reset returns a zone
// or a drain completes, or ctx ends (its error is returned, wrapped). It
// signals ReclaimWanted before waiting. A caller must therefore not hold
// extents it has not yet written (and called Done for) while it calls
// Alloc with a context that cannot end. Alloc fails with ErrNoSpace only
// when there is no free zone beyond the reserve, no room in any open zone
// and no reclaimable garbage.
func (a *Allocator) Alloc(ctx context.Context, r Request) (Extent, error) {
	if r.Len == 0 {
		return Extent{}, fmt.Errorf("%w: allocation of 0 blocks", ErrInvalid)
	}
	a.markUsed()
	class := a.class(r.Stream)
	var buf [4]*slot
	set := a.slotSet(r.Ino, class, buf[:0])
	var entry *cacheEntry
	if r.Random && a.cache != nil {
		var e Extent
		var ok bool
		if e, entry, ok = a.allocCached(r.Ino, class, r.Len, set[0]); ok {
			return e, nil
		}
	}
	e, z, err := a.allocFrom(ctx, set, r.Len, false, r.Random, r.NoWait)
	if err != nil {
		return Extent{}, err
	}
	if r.Random && a.cache != nil {
		a.cache.learn(r.Ino, entry, z)
	}
	return e, nil
}

// AllocReclaim returns blocks in the reclaim zone of stream's class for a
// reclaim copy. It may take the reserve; it waits only for a draining zone
// to release an active resource.
func (a *Allocator) AllocReclaim(ctx context.Context, stream uint32, n uint64) (Extent, error) {
	if n == 0 {
		return Extent{}, fmt.Errorf("%w: allocation of 0 blocks", ErrInvalid)
	}
	a.markUsed()
	e, _, err := a.allocFrom(ctx, []*slot{a.reclaimSlot(a.class(stream))}, n, true, false, false)
	return e, err
}

// allocFrom allocates from the first slot of set that has or can open a
// zone, waiting as Alloc documents. spread lets a contended target slot
// give way to the next of its set.
func (a *Allocator) allocFrom(ctx context.Context, set []*slot, n uint64, reclaim, spread, noWait bool) (Extent, *zone, error) {
	for {
		s := lockSlot(set, spread)
		e, z, wake, err := a.allocSlot(s, n, reclaim)
		if !errors.Is(err, errWait) {
			if !errors.Is(err, ErrNoSpace) {
				return e, z, err
			}
			if e, z, ok := a.spill(n, reclaim); ok {
				return e, z, nil
			}
			return Extent{}, nil, err
		}
		a.wantReclaim()
		a.waits.Add(1)
		if noWait {
			return Extent{}, nil, &WouldWait{Wake: wake}
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return Extent{}, nil, fmt.Errorf("zone alloc: waiting for a free zone: %w", ctx.Err())
		}
	}
}

// lockSlot locks the target slot (set[0]); with spread, a busy target
// gives way to the first free one of the set.
func lockSlot(set []*slot, spread bool) *slot {
	if spread && len(set) > 1 {
		for _, s := range set {
			if s.mu.TryLock() {
				return s
			}
		}
	}
	set[0].mu.Lock()
	return set[0]
}

// allocSlot allocates from s's open zone, opening a new one when it has
// none or no room. It unlocks s. On errWait, wake is closed when retrying
// may succeed.
func (a *Allocator) allocSlot(s *slot, n uint64, reclaim bool) (Extent, *zone, <-chan struct{}, error) {
	defer s.mu.Unlock()
	var ferr error
	if z := s.zone; z != nil {
		z.mu.Lock()
		if z.room(a.geo.CapBlocks) > 0 {
			e := a.takeLocked(s, z, n)
			z.mu.Unlock()
			return e, z, nil, nil
		}
		// Broken or left: no room. Its active resource goes back when
		// its writes drain.
		ferr = a.retireLocked(z)
		z.mu.Unlock()
		s.zone = nil
	}
	z, wake, err := a.takeFree(reclaim)
	if err != nil {
		return Extent{}, nil, wake, errors.Join(err, ferr)
	}
	z.mu.Lock()
	z.cond, z.active = CondOpen, true
	z.class = s.class
	z.slot.Store(int32(s.idx))
	s.zone = z
	e := a.takeLocked(s, z, n)
	z.mu.Unlock()
	// The new extent is good: a failed finish of the old zone (now
	// offline) is counted for Stats rather than failing this write.
	a.noteErr(ferr)
	return e, z, nil, nil
}

// takeLocked hands out up to n blocks at z's allocation pointer and
// retires z when that fills it. Caller holds s.mu and z.mu; z has room.
func (a *Allocator) takeLocked(s *slot, z *zone, n uint64) Extent {
	l := min(n, a.geo.CapBlocks-z.alloc)
	e := Extent{Start: z.start + z.alloc, Len: l}
	z.alloc += l
	z.inflight += l
	z.live += l
	if z.alloc == a.geo.CapBlocks {
		// Full at the allocation pointer: the slot takes a new zone next
		// time; this one completes when its last write is Done.
		_ = a.retireLocked(z) // no finish needed: inflight > 0 here
		s.zone = nil
	}
	return e
}

// retireLocked stops allocation from z (its slot drops it) and completes
// it when no write is in flight. Caller holds z.mu and z's slot lock.
func (a *Allocator) retireLocked(z *zone) error {
	if z.retired {
		return nil
	}
	z.retired = true
	z.slot.Store(-1)
	z.gen.Add(1) // seed 2's entries for z are stale from now on
	a.retiredGarbage.Add(z.alloc - z.live)
	if z.inflight == 0 {
		return a.completeLocked(z)
	}
	return nil
}

// completeLocked turns a retired zone with nothing in flight into a full
// one: finished on the device when it was left early (giving its active
// resource back), and out of the active count. Caller holds z.mu.
func (a *Allocator) completeLocked(z *zone) error {
	if z.alloc < a.geo.CapBlocks {
		if err := a.dev.ZoneMgmt(backend.ZoneOpFinish, a.off(z.start)); err != nil {
			// The device's view of the zone is unknown: never use it
			// again (mount rebuilds from the zone report). Its active
			// resource stays counted, as the device may still hold it.
			z.cond = CondOffline
			dead := z.alloc - z.live
			a.garbage.Add(-dead)
			a.retiredGarbage.Add(-dead)
			return fmt.Errorf("zone alloc: finish zone %d: %w", z.idx, err)
		}
		lost := a.geo.CapBlocks - z.alloc
		z.lost = lost
		a.garbage.Add(lost)
		a.retiredGarbage.Add(lost)
	}
	z.cond = CondFull
	if z.live < a.geo.CapBlocks {
		z.cond = CondReclaimable
	}
	z.filled = a.fillSeq.Add(1)
	z.active = false
	a.pool.mu.Lock()
	a.pool.active--
	a.wakeLocked()
	a.pool.mu.Unlock()
	return nil
}

// wakeLocked wakes every waiting writer. Caller holds pool.mu.
func (a *Allocator) wakeLocked() {
	close(a.pool.wake)
	a.pool.wake = make(chan struct{})
}

// takeFree pops a free zone for a slot, keeping the reserve for reclaim
// and the open/active limit. It returns errWait with the channel to wait
// on when a zone will come back (reclaimable garbage, or a zone draining),
// ErrNoSpace when none will.
func (a *Allocator) takeFree(reclaim bool) (*zone, <-chan struct{}, error) {
	a.pool.mu.Lock()
	defer a.pool.mu.Unlock()
	keep := a.opts.Reserve
	if reclaim {
		keep = 0
	}
	if len(a.pool.free) <= keep {
		if !reclaim && a.retiredGarbage.Load() > 0 {
			return nil, a.pool.wake, errWait
		}
		// Active zones draining will turn into garbage-holding full
		// zones only if they hold garbage, which retiredGarbage counts.
		return nil, nil, ErrNoSpace
	}
	if lim := a.geo.limit(); lim > 0 && a.pool.active >= lim {
		return nil, a.pool.wake, errWait
	}
	i := a.pool.free[len(a.pool.free)-1]
	a.pool.free = a.pool.free[:len(a.pool.free)-1]
	a.pool.active++
	if nf := a.nfree.Add(-1); nf <= int64(a.opts.LowWater) {
		a.wantReclaim()
	}
	return a.zones[i], nil, nil
}

// spill takes room in any open zone, whatever its slot's stream, the last
// space before ErrNoSpace: writer slots first for a writer, reclaim slots
// first for reclaim.
func (a *Allocator) spill(n uint64, reclaim bool) (Extent, *zone, bool) {
	k := 0
	if reclaim {
		k = a.nStream + a.nGen
	}
	for i := range a.slots {
		s := a.slots[(k+i)%len(a.slots)]
		s.mu.Lock()
		if z := s.zone; z != nil {
			z.mu.Lock()
			if z.room(a.geo.CapBlocks) > 0 {
				e := a.takeLocked(s, z, n)
				z.mu.Unlock()
				s.mu.Unlock()
				return e, z, true
			}
			z.mu.Unlock()
		}
		s.mu.Unlock()
	}
	return Extent{}, nil, false
}

// wantReclaim signals ReclaimWanted without blocking.
func (a *Allocator) wantReclaim() {
	select {
	case a.reclaimC <- struct{}{}:
	default:
	}
}

// ReclaimWanted receives a value when free zones reach the low watermark
// or a writer waits for a free zone: the reclaimer's trigger. Signals
// coalesce (the channel holds one).
func (a *Allocator) ReclaimWanted() <-chan struct{} { return a.reclaimC }

// NeedReclaim reports whether free zones are at or below the low
// watermark while full zones hold garbage.
func (a *Allocator) NeedReclaim() bool {
	return a.nfree.Load() <= int64(a.opts.LowWater) && a.retiredGarbage.Load() > 0
}

// Done reports the completion of a write of e (an extent Alloc or
// AllocReclaim returned, whole). A failed write (err != nil) leaves the
// device's write pointer behind the allocation pointer: the zone takes no
// more allocations, e's blocks become garbage (the caller must not map
// them), and the zone is finished once its other writes drain. Done
// returns an error for an extent that is not in flight, or when a finish
// fails.
func (a *Allocator) Done(e Extent, err error) error {
	z, zerr := a.zoneOf(e.Start)
	if zerr != nil {
		return zerr
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	if e.Len == 0 || z.cond != CondOpen || e.Start+e.Len > z.start+z.alloc || e.Len > z.inflight {
		return fmt.Errorf("%w: done %d+%d not in flight in zone %d (%v, %d allocated, %d in flight)", ErrCorrupt, e.Start, e.Len, z.idx, z.cond, z.alloc, z.inflight)
	}
	if err != nil && e.Len > z.live {
		return fmt.Errorf("%w: failed write %d+%d beyond zone %d's %d live blocks", ErrCorrupt, e.Start, e.Len, z.idx, z.live)
	}
	z.inflight -= e.Len
	if err != nil {
		z.broken = true
		z.gen.Add(1)
		z.live -= e.Len
		a.garbage.Add(e.Len)
		if z.retired {
			a.retiredGarbage.Add(e.Len)
		}
	}
	if z.retired && z.inflight == 0 {
		return a.completeLocked(z)
	}
	return nil
}

// Free turns blocks into garbage: call it for blocks a commit unmapped,
// after that commit. The blocks are not reused before their zone's reset.
// It fails, changing nothing, when a piece is not live in an allocated
// part of a sequential zone.
func (a *Allocator) Free(start, n uint64) error {
	if n == 0 {
		return fmt.Errorf("%w: free of 0 blocks at %d", ErrInvalid, start)
	}
	type piece struct {
		z    *zone
		s, l uint64
	}
	var buf [2]piece
	ps := buf[:0]
	for b, left := start, n; left > 0; {
		z, err := a.zoneOf(b)
		if err != nil {
			return fmt.Errorf("zone alloc: free %d+%d: %w", start, n, err)
		}
		l := min(left, z.start+a.geo.ZoneBlocks-b)
		ps = append(ps, piece{z, b, l})
		b, left = b+l, left-l
	}
	for _, p := range ps { // ascending zone index: the documented order
		p.z.mu.Lock()
	}
	defer func() {
		for _, p := range ps {
			p.z.mu.Unlock()
		}
	}()
	for _, p := range ps {
		z := p.z
		if z.cond == CondFree || p.s+p.l > z.start+z.alloc || p.l > z.live {
			return fmt.Errorf("%w: free %d+%d: zone %d is %v with %d allocated, %d live", ErrCorrupt, start, n, z.idx, z.cond, z.alloc, z.live)
		}
	}
	for _, p := range ps {
		z := p.z
		z.live -= p.l
		if z.cond == CondOffline {
			continue // out of use: its blocks are counted nowhere
		}
		a.garbage.Add(p.l)
		if z.retired {
			a.retiredGarbage.Add(p.l)
		}
		if z.cond == CondFull {
			z.cond = CondReclaimable
		}
	}
	return nil
}

// markUsed records that allocation began (Load is refused from then on);
// the load first keeps the common case a read of a shared line, not a
// write every allocator would bounce.
func (a *Allocator) markUsed() {
	if !a.used.Load() {
		a.used.Store(true)
	}
}
