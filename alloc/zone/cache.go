package zone

import (
	"fmt"
	"sync/atomic"

	"github.com/dgraph-io/ristretto/v2"
)

// cacheEntry holds one inode's last zone and that zone's generation,
// packed (zone index << 32 | generation) so that moving the hint is one
// atomic store with no cache lock: ristretto's Set on an existing key takes
// a cache-wide lock, so Set runs only for an inode without an entry (the AG
// allocator's placement cache does the same).
type cacheEntry = atomic.Uint64

// cache is seed 2's inode → zone cache. ristretto rather than an MRU list
// as XFS uses: it is bounded by count with admission and eviction that take
// no global lock on Get, the AG allocator already depends on it, and an MRU
// list must lock its list head on every lookup to move the entry to the
// front. Entries are hints: a stale one (zone filled, left, failed or reset:
// its generation moved) is detected at use and replaced.
type cache struct {
	c *ristretto.Cache[uint64, *cacheEntry]
}

func newCache(entries int64) (*cache, error) {
	c, err := ristretto.NewCache(&ristretto.Config[uint64, *cacheEntry]{
		NumCounters:        10 * entries, // ristretto wants ~10x entries
		MaxCost:            entries,
		BufferItems:        64,
		IgnoreInternalCost: true, // cost 1 per inode: MaxCost counts entries
	})
	if err != nil {
		return nil, fmt.Errorf("zone alloc: inode cache: %w", err)
	}
	return &cache{c: c}, nil
}

func (c *cache) close() { c.c.Close() }

func pack(z *zone) uint64 { return uint64(z.idx)<<32 | uint64(z.gen.Load()) }

// learn records z as the inode's zone: in place when it has an entry, else
// by adding one (which ristretto's admission may drop).
func (c *cache) learn(ino uint64, entry *cacheEntry, z *zone) {
	if entry != nil {
		entry.Store(pack(z))
		return
	}
	entry = new(cacheEntry)
	entry.Store(pack(z))
	c.c.Set(ino, entry, 1)
}

// allocCached allocates in the zone the inode last wrote when that zone is
// still open in a writer slot of the same class, of the same generation,
// with room. It returns the inode's entry (nil when it has none) for the
// caller to update when it misses. Misses and stale entries are counted in
// the file's target slot, hits in the slot used: no counter shared by all
// writers.
func (a *Allocator) allocCached(ino uint64, class uint32, n uint64, target *slot) (Extent, *cacheEntry, bool) {
	c := &target.cache
	entry, found := a.cache.c.Get(ino)
	if !found {
		c.misses.Add(1)
		return Extent{}, nil, false
	}
	v := entry.Load()
	zi, gen := int(v>>32)-a.geo.First, uint32(v)
	if zi < 0 || zi >= len(a.zones) {
		c.stale.Add(1)
		return Extent{}, entry, false
	}
	z := a.zones[zi]
	si := z.slot.Load()
	if si < 0 || a.slots[si].reclaim || a.slots[si].class != class {
		c.stale.Add(1)
		return Extent{}, entry, false
	}
	s := a.slots[si]
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.zone != z {
		c.stale.Add(1)
		return Extent{}, entry, false
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.gen.Load() != gen || z.room(a.geo.CapBlocks) == 0 {
		c.stale.Add(1)
		return Extent{}, entry, false
	}
	s.cache.hits.Add(1)
	return a.takeLocked(s, z, n), entry, true
}
