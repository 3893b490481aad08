package zone

import (
	"fmt"

	"github.com/streamfs/streamfs/alloc/victim"
	"github.com/streamfs/streamfs/backend"
)

// noteErr counts a device error no caller could be given.
func (a *Allocator) noteErr(err error) {
	if err != nil {
		a.finishErrs.Add(1)
		a.lastErr.Store(&err)
	}
}

// Info describes one zone.
type Info struct {
	Index    int    `json:"index"`
	Start    uint64 `json:"start"` // first block
	Cond     Cond   `json:"cond"`
	Alloc    uint64 `json:"alloc"`    // allocation pointer, blocks from Start
	InFlight uint64 `json:"inflight"` // handed out, write not Done
	Live     uint64 `json:"live"`
	Garbage  uint64 `json:"garbage"` // dead blocks, plus capacity a finish gave up
	Class    uint32 `json:"class"`   // stream class that filled it
}

// infoLocked describes z. Caller holds z.mu.
func (a *Allocator) infoLocked(z *zone) Info {
	return Info{Index: z.idx, Start: z.start, Cond: z.cond, Alloc: z.alloc, InFlight: z.inflight,
		Live: z.live, Garbage: z.alloc + z.lost - z.live, Class: z.class}
}

// Zones describes every sequential zone, each read under its own lock.
func (a *Allocator) Zones() []Info {
	out := make([]Info, len(a.zones))
	for i, z := range a.zones {
		z.mu.Lock()
		out[i] = a.infoLocked(z)
		z.mu.Unlock()
	}
	return out
}

// Victim picks a full zone holding garbage by the configured rule, marks
// it reclaiming (no other Victim call returns it) and describes it. The
// reclaimer copies its live blocks (AllocReclaim), commits the new
// mapping, frees the old blocks (Free) and then calls Reset; or Unpick if
// it gives up. ok is false when no zone holds garbage.
func (a *Allocator) Victim() (Info, bool) {
	now := a.fillSeq.Load()
	for {
		var cs []victim.Candidate
		for i, z := range a.zones {
			z.mu.Lock()
			if z.cond == CondReclaimable {
				cs = append(cs, victim.Candidate{ID: i, Live: z.live, Capacity: a.geo.CapBlocks, Age: now - z.filled + 1})
			}
			z.mu.Unlock()
		}
		k := victim.Pick(a.opts.Victim, cs)
		if k < 0 {
			return Info{}, false
		}
		z := a.zones[cs[k].ID]
		z.mu.Lock()
		if z.cond == CondReclaimable {
			z.cond = CondReclaiming
			info := a.infoLocked(z)
			z.mu.Unlock()
			return info, true
		}
		z.mu.Unlock() // taken meanwhile: choose again
	}
}

// LowWater is the free zone count at or below which reclaim is wanted.
func (a *Allocator) LowWater() int { return a.opts.LowWater }

// Unpick returns a victim the reclaimer gave up on to the candidates.
func (a *Allocator) Unpick(index int) error {
	z, err := a.zoneIndex(index)
	if err != nil {
		return err
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.cond != CondReclaiming {
		return fmt.Errorf("%w: unpick zone %d, which is %v", ErrCorrupt, index, z.cond)
	}
	z.cond = CondReclaimable
	return nil
}

func (a *Allocator) zoneIndex(index int) (*zone, error) {
	i := index - a.geo.First
	if i < 0 || i >= len(a.zones) {
		return nil, fmt.Errorf("%w: zone %d is not a sequential zone", ErrInvalid, index)
	}
	return a.zones[i], nil
}

// Reset resets zone index on the device and returns it to the free pool,
// waking waiting writers. Call it only once the commit that freed its last
// live blocks is durable (a replay must never map blocks into a reset
// zone). It fails, changing nothing, unless the zone is full (or
// reclaiming) with no live block.
func (a *Allocator) Reset(index int) error {
	z, err := a.zoneIndex(index)
	if err != nil {
		return err
	}
	z.mu.Lock()
	if (z.cond != CondFull && z.cond != CondReclaimable && z.cond != CondReclaiming) || z.live != 0 {
		err := fmt.Errorf("%w: reset zone %d: %v with %d live blocks", ErrCorrupt, index, z.cond, z.live)
		z.mu.Unlock()
		return err
	}
	if err := a.dev.ZoneMgmt(backend.ZoneOpReset, a.off(z.start)); err != nil {
		z.mu.Unlock()
		return fmt.Errorf("zone alloc: reset zone %d: %w", index, err)
	}
	dead := z.alloc + z.lost
	a.garbage.Add(-dead)
	a.retiredGarbage.Add(-dead)
	z.cond, z.alloc, z.live, z.lost, z.inflight = CondFree, 0, 0, 0, 0
	z.retired, z.broken, z.class = false, false, 0
	z.gen.Add(1)
	z.mu.Unlock()
	a.pool.mu.Lock()
	a.pool.free = append(a.pool.free, index-a.geo.First)
	a.nfree.Add(1)
	a.wakeLocked()
	a.pool.mu.Unlock()
	return nil
}

// Load replaces the all-free state of New with the device's zone report
// and the live extents the filesystem maps (mount: from the extent trees).
// Empty zones become free; full ones full; zones written part-way
// (open or closed on the device, the state a crash or unmount leaves) are
// finished, giving their rest up as garbage, so that every active
// resource is back for the slots; read-only and offline zones are never
// used. It must run before the first Alloc.
func (a *Allocator) Load(report []backend.Zone, live []Extent) error {
	if a.used.Load() {
		return fmt.Errorf("%w: load after allocation", ErrInvalid)
	}
	bs := a.opts.BlockSize
	seen := make([]bool, len(a.zones))
	alloc := make([]uint64, len(a.zones))
	conds := make([]backend.ZoneCond, len(a.zones))
	for _, r := range report {
		if r.Type == backend.ZoneConventional {
			continue
		}
		if r.Start%bs != 0 || r.WP < r.Start || r.WP-r.Start > a.off(a.geo.CapBlocks) || r.Cap != a.off(a.geo.CapBlocks) {
			return fmt.Errorf("%w: zone report %+v does not fit the geometry", ErrInvalid, r)
		}
		z, err := a.zoneOf(uint64(r.Start / bs))
		if err != nil || z.start != uint64(r.Start/bs) {
			return fmt.Errorf("%w: zone report %+v names no sequential zone start", ErrInvalid, r)
		}
		i := z.idx - a.geo.First
		seen[i], conds[i] = true, r.Cond
		// A whole-block filesystem never leaves a partial block; round
		// up so nothing past the write pointer is ever handed out.
		alloc[i] = uint64((r.WP - r.Start + bs - 1) / bs)
		if r.Cond == backend.ZoneFull {
			alloc[i] = a.geo.CapBlocks
		}
	}
	for i, ok := range seen {
		if !ok {
			return fmt.Errorf("%w: zone report lacks zone %d", ErrInvalid, a.geo.First+i)
		}
	}
	counts := make([]uint64, len(a.zones))
	for _, e := range live {
		for b, left := e.Start, e.Len; left > 0; {
			z, err := a.zoneOf(b)
			if err != nil {
				return fmt.Errorf("zone alloc: load extent %d+%d: %w", e.Start, e.Len, err)
			}
			i := z.idx - a.geo.First
			l := min(left, z.start+a.geo.ZoneBlocks-b)
			if b+l > z.start+alloc[i] {
				return fmt.Errorf("%w: extent %d+%d lies past zone %d's write pointer", ErrCorrupt, e.Start, e.Len, z.idx)
			}
			counts[i] += l
			b, left = b+l, left-l
		}
	}
	for i, z := range a.zones {
		if counts[i] > alloc[i] {
			return fmt.Errorf("%w: zone %d: %d live blocks in %d written (extents overlap)", ErrCorrupt, z.idx, counts[i], alloc[i])
		}
	}
	var free []int
	var garbage uint64
	for i, z := range a.zones {
		z.mu.Lock()
		z.alloc, z.live, z.lost, z.inflight = alloc[i], counts[i], 0, 0
		z.retired, z.broken, z.active = true, false, false
		switch c := conds[i]; {
		case c == backend.ZoneReadOnly || c == backend.ZoneOffline:
			z.cond = CondOffline
		case c == backend.ZoneEmpty:
			z.cond, z.retired = CondFree, false
			free = append(free, i)
		default:
			if z.alloc < a.geo.CapBlocks {
				if err := a.dev.ZoneMgmt(backend.ZoneOpFinish, a.off(z.start)); err != nil {
					z.mu.Unlock()
					return fmt.Errorf("zone alloc: load: finish zone %d: %w", z.idx, err)
				}
				z.lost = a.geo.CapBlocks - z.alloc
			}
			z.cond = CondFull
			if z.live < a.geo.CapBlocks {
				z.cond = CondReclaimable
			}
			z.filled = a.fillSeq.Add(1)
			garbage += z.alloc + z.lost - z.live
		}
		z.mu.Unlock()
	}
	a.garbage.Store(garbage)
	a.retiredGarbage.Store(garbage)
	a.pool.mu.Lock()
	a.pool.free = a.pool.free[:0]
	for i := len(free) - 1; i >= 0; i-- {
		a.pool.free = append(a.pool.free, free[i])
	}
	a.nfree.Store(int64(len(free)))
	a.pool.active = 0
	a.pool.mu.Unlock()
	return nil
}

// Space is the statfs view of the sequential zones, in blocks.
type Space struct {
	FreeZones   int    `json:"free_zones"`  // reserve included
	FreeBlocks  uint64 `json:"free_blocks"` // capacity of the free zones
	OpenRoom    uint64 `json:"open_room"`   // left in open zones
	Garbage     uint64 `json:"garbage"`     // dead blocks not yet reset
	Reclaimable uint64 `json:"reclaimable"` // the part of Garbage in zones no slot writes
	Live        uint64 `json:"live"`
	Reserve     uint64 `json:"reserve"` // the reclaim reserve's capacity
	// Avail is what statfs reports as free: free zones, room in open
	// zones and garbage, minus the reserve.
	Avail uint64 `json:"avail"`
	Total uint64 `json:"total"` // capacity of every usable sequential zone
}

// Space returns the statfs numbers. Each zone is read under its lock; the
// whole is not one instant.
func (a *Allocator) Space() Space {
	var s Space
	for _, z := range a.zones {
		z.mu.Lock()
		switch z.cond {
		case CondFree:
			s.FreeZones++
		case CondOffline:
			z.mu.Unlock()
			continue
		}
		s.OpenRoom += z.room(a.geo.CapBlocks)
		s.Live += z.live
		g := z.alloc + z.lost - z.live
		s.Garbage += g
		if z.retired {
			s.Reclaimable += g
		}
		s.Total += a.geo.CapBlocks
		z.mu.Unlock()
	}
	s.FreeBlocks = uint64(s.FreeZones) * a.geo.CapBlocks
	s.Reserve = uint64(a.opts.Reserve) * a.geo.CapBlocks
	if sum := s.FreeBlocks + s.OpenRoom + s.Garbage; sum > s.Reserve {
		s.Avail = sum - s.Reserve
	}
	return s
}

// Stats are the allocator's counters.
type Stats struct {
	Streams      uint32 `json:"streams"`
	Slots        int    `json:"slots"`
	Active       int    `json:"active"`
	CacheHits    uint64 `json:"cache_hits"`   // random writes placed in the inode's last zone
	CacheMisses  uint64 `json:"cache_misses"` // inode had no entry (never admitted or evicted)
	CacheStale   uint64 `json:"cache_stale"`  // entry's zone filled, left or was reset
	Waits        uint64 `json:"waits"`        // writers that waited for a free zone
	FinishErrors uint64 `json:"finish_errors"`
}

// Stats returns the counters.
func (a *Allocator) Stats() Stats {
	a.pool.mu.Lock()
	active := a.pool.active
	a.pool.mu.Unlock()
	s := Stats{Streams: a.streams, Slots: len(a.slots), Active: active, Waits: a.waits.Load(), FinishErrors: a.finishErrs.Load()}
	for _, sl := range a.slots {
		s.CacheHits += sl.cache.hits.Load()
		s.CacheMisses += sl.cache.misses.Load()
		s.CacheStale += sl.cache.stale.Load()
	}
	return s
}

// Check verifies the allocator's own invariants: per zone, allocation
// pointer within capacity, live and in-flight within it, free zones
// empty and in the pool; the garbage and active counters match the zones.
// Run it quiescent (no call in progress) for exact counters.
func (a *Allocator) Check() error {
	var garbage, retired uint64
	active := 0
	inPool := make(map[int]bool)
	a.pool.mu.Lock()
	for _, i := range a.pool.free {
		if inPool[i] {
			a.pool.mu.Unlock()
			return fmt.Errorf("%w: zone %d twice in the free pool", ErrCorrupt, a.geo.First+i)
		}
		inPool[i] = true
	}
	poolActive := a.pool.active
	a.pool.mu.Unlock()
	for i, z := range a.zones {
		z.mu.Lock()
		info := a.infoLocked(z)
		bad := (z.cond != CondOffline && z.active != (z.cond == CondOpen)) || z.alloc > a.geo.CapBlocks || z.live > z.alloc || z.inflight > z.alloc || z.alloc+z.lost > a.geo.CapBlocks ||
			(z.cond == CondFree) != inPool[i] || (z.cond == CondFree && (z.alloc != 0 || z.live != 0))
		if z.active {
			active++
		}
		if z.cond != CondFree && z.cond != CondOffline {
			garbage += info.Garbage
			if z.retired {
				retired += info.Garbage
			}
		}
		z.mu.Unlock()
		if bad {
			return fmt.Errorf("%w: zone state %+v (in pool %v)", ErrCorrupt, info, inPool[i])
		}
	}
	if garbage != a.garbage.Load() || retired != a.retiredGarbage.Load() || active != poolActive {
		return fmt.Errorf("%w: counters garbage %d/%d, retired %d/%d, active %d/%d (counted/kept)",
			ErrCorrupt, garbage, a.garbage.Load(), retired, a.retiredGarbage.Load(), active, poolActive)
	}
	return nil
}
