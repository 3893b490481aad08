// Package alloc is the block allocator: the device is cut into allocation
// groups (AGs), each with its own lock and free-space index, and a placement
// policy steers each file's data to an AG set by inode and write stream, so
// concurrent writers and distinct streams do not interleave their blocks.
package alloc

import (
	"errors"
	"fmt"
	"math/bits"
	"sync/atomic"
	"syscall"

	"github.com/dgraph-io/ristretto/v2"
)

var (
	// ErrNoSpace means no free block is left anywhere on the device. It
	// matches syscall.ENOSPC under errors.Is, so FUSE replies can use it.
	ErrNoSpace error = fmt.Errorf("alloc: no free space: %w", syscall.ENOSPC)
	// ErrCorrupt means an extent conflicts with the free-space map: a
	// MarkUsed of blocks already in use or a Free of blocks already free.
	ErrCorrupt = errors.New("alloc: free space map conflict")
	// ErrInvalid means a bad argument or geometry.
	ErrInvalid = errors.New("alloc: invalid argument")
	// ErrBusy means the blocks are held out of free space by Trim.
	ErrBusy = errors.New("alloc: blocks busy (being trimmed)")
)

// Geometry is the device's AG layout.
type Geometry struct {
	AGCount     uint32
	AGBlocks    uint64 // blocks per AG; AG i covers [i*AGBlocks, (i+1)*AGBlocks) ∩ [0,TotalBlocks)
	TotalBlocks uint64
}

// Options tune the allocator.
type Options struct {
	Policy         Policy
	HWStreams      uint32 // backend hardware streams (0 = none -> software streams)
	PlacementCache bool   // ristretto per-inode placement cache
}

// Request asks for blocks for one file.
type Request struct {
	Ino    uint64 // owning inode (its AG and agino drive placement)
	Stream uint32 // file's stream id, 0 = none
	Goal   uint64 // block right after the file's previous extent; 0 = none. Tried first (extend in place).
	Len    uint64 // blocks wanted (>0)
}

// Placement cache sizing: one entry per recently written inode. The hint
// only shortens the path, so a modest, bounded cache is enough.
const (
	cacheEntries  = 1 << 16
	cacheCounters = 10 * cacheEntries // ristretto wants ~10x entries
)

// Allocator hands out blocks of one device. All methods are safe for
// concurrent use except Close, which must come after every other call.
type Allocator struct {
	geo        Geometry
	opts       Options
	maxStreams uint32
	ags        []*ag // immutable after New; each AG locks itself

	// cache maps inode -> block after its last allocation that did not
	// extend the caller's goal. nil when the placement cache is off. It is
	// a hint only: ristretto admits entries asynchronously and may drop
	// them. The value is a pointer so that moving an inode's hint is an
	// atomic store into its entry: ristretto's Set on an existing key
	// takes a cache-wide lock (its expiration map), so Set runs only when
	// the inode has no entry. Per-stream block counts live in the AGs
	// (ag.streamBlocks), so the allocation path holds no allocator-wide
	// lock. Its hit and miss counters are per AG too (ag.cacheHits).
	cache *ristretto.Cache[uint64, *atomic.Uint64]
}

// New makes an allocator where every block is free; the caller then marks
// used what metadata and files own (MarkUsed) before first Alloc.
func New(geo Geometry, opts Options) (*Allocator, error) {
	if err := geo.validate(); err != nil {
		return nil, err
	}
	if opts.Policy < PolicyInode || opts.Policy > PolicyStreams {
		return nil, fmt.Errorf("%w: unknown policy %d", ErrInvalid, int(opts.Policy))
	}
	a := &Allocator{
		geo:        geo,
		opts:       opts,
		maxStreams: maxStreams(opts.HWStreams, geo.AGCount),
		ags:        make([]*ag, geo.AGCount),
	}
	for i := range a.ags {
		start := uint64(i) * geo.AGBlocks
		size := min(geo.AGBlocks, geo.TotalBlocks-start)
		a.ags[i] = newAG(uint32(i), start, size)
	}
	if opts.PlacementCache {
		c, err := ristretto.NewCache(&ristretto.Config[uint64, *atomic.Uint64]{
			NumCounters:        cacheCounters,
			MaxCost:            cacheEntries,
			BufferItems:        64,
			IgnoreInternalCost: true, // cost 1 per inode: MaxCost counts entries
		})
		if err != nil {
			return nil, fmt.Errorf("alloc: placement cache: %w", err)
		}
		a.cache = c
	}
	return a, nil
}

func (g Geometry) validate() error {
	if g.AGCount == 0 || g.AGBlocks == 0 || g.TotalBlocks == 0 {
		return fmt.Errorf("%w: geometry %+v has a zero field", ErrInvalid, g)
	}
	hi, lo := bits.Mul64(uint64(g.AGCount), g.AGBlocks)
	if hi == 0 && lo < g.TotalBlocks {
		return fmt.Errorf("%w: %d AGs of %d blocks do not cover %d blocks", ErrInvalid, g.AGCount, g.AGBlocks, g.TotalBlocks)
	}
	// Every AG must own at least one block, or AG arithmetic on block
	// numbers would disagree with the AG count.
	if hi, lo := bits.Mul64(uint64(g.AGCount-1), g.AGBlocks); hi != 0 || lo >= g.TotalBlocks {
		return fmt.Errorf("%w: last of %d AGs of %d blocks is empty with %d blocks", ErrInvalid, g.AGCount, g.AGBlocks, g.TotalBlocks)
	}
	return nil
}

// Geometry returns the layout the allocator was built with.
func (a *Allocator) Geometry() Geometry { return a.geo }

// Policy returns the placement policy in use.
func (a *Allocator) Policy() Policy { return a.opts.Policy }

// Close releases the placement cache.
func (a *Allocator) Close() {
	if a.cache != nil {
		a.cache.Close()
	}
}

// ReplaceFree makes a's free space that of fresh, an allocator of the same
// geometry built privately (from the metadata's free-space records): a
// mounted filesystem's allocator is shared, so it is refilled AG by AG
// under each AG's lock rather than replaced. The caller makes sure nothing
// allocates or frees meanwhile; fresh must not be used afterwards except
// for Close. Counters (allocations, streams, lock waits) stay.
func (a *Allocator) ReplaceFree(fresh *Allocator) error {
	if a.geo != fresh.geo {
		return fmt.Errorf("%w: geometry %+v, replacement %+v", ErrInvalid, a.geo, fresh.geo)
	}
	for i, g := range a.ags {
		n := fresh.ags[i]
		g.lock()
		if g.held.len() > 0 {
			g.unlock()
			return fmt.Errorf("AG %d: %w", i, ErrBusy)
		}
		g.bno, g.cnt = n.bno, n.cnt
		g.free.Store(n.free.Load())
		g.unlock()
	}
	return nil
}

// piece is the part of a block range inside one AG.
type piece struct {
	g          *ag
	start, len uint64
}

// split cuts [start, start+n) at AG boundaries, in ascending AG order,
// appending to ps (a caller's stack buffer: most ranges sit in one AG).
func (a *Allocator) split(ps []piece, start, n uint64) ([]piece, error) {
	if n == 0 {
		return nil, fmt.Errorf("%w: empty extent at block %d", ErrCorrupt, start)
	}
	if start >= a.geo.TotalBlocks || n > a.geo.TotalBlocks-start {
		return nil, fmt.Errorf("%w: extent %d+%d beyond the device's %d blocks", ErrCorrupt, start, n, a.geo.TotalBlocks)
	}
	for n > 0 {
		g := a.ags[start/a.geo.AGBlocks]
		l := min(n, g.start+g.size-start)
		ps = append(ps, piece{g: g, start: start, len: l})
		start, n = start+l, n-l
	}
	return ps, nil
}

// update checks every piece of a range under all its AG locks (ascending
// index, the documented order) and applies it only if all pass, so an
// error changes nothing.
func (a *Allocator) update(start, n uint64, check func(*ag, uint64, uint64) error, apply func(*ag, uint64, uint64)) error {
	var buf [2]piece
	ps, err := a.split(buf[:0], start, n)
	if err != nil {
		return err
	}
	for _, p := range ps {
		p.g.lock()
	}
	defer func() {
		for _, p := range ps {
			p.g.unlock()
		}
	}()
	for _, p := range ps {
		if err := check(p.g, p.start, p.len); err != nil {
			return err
		}
	}
	for _, p := range ps {
		apply(p.g, p.start, p.len)
	}
	return nil
}

// MarkUsed removes [start, start+n) from free space (mount: metadata and
// existing file extents). It fails, changing nothing, unless every block
// is free: an overlap means two owners, i.e. corruption.
func (a *Allocator) MarkUsed(start, n uint64) error {
	if err := a.update(start, n, (*ag).checkFree, (*ag).take); err != nil {
		return fmt.Errorf("alloc: mark used %d+%d: %w", start, n, err)
	}
	return nil
}

// Free returns [start, start+n) to free space. It fails, changing
// nothing, if any block is already free (double free).
func (a *Allocator) Free(start, n uint64) error {
	if err := a.update(start, n, (*ag).checkUsed, (*ag).give); err != nil {
		return fmt.Errorf("alloc: free %d+%d: %w", start, n, err)
	}
	return nil
}

// Alloc returns one extent of 1..Len blocks: goal first (exact extend),
// then placement-cache hint, then best fit in the AG chosen by the policy,
// then the other AGs of the set, then any AG. ErrNoSpace when nothing is free.
func (a *Allocator) Alloc(r Request) (Extent, error) {
	if r.Len == 0 {
		return Extent{}, fmt.Errorf("%w: allocation of 0 blocks", ErrInvalid)
	}
	var (
		e  Extent
		ok bool
	)
	// A goal or hint on the first block of an AG would follow the file
	// out of its AG (set) into the next one: XFS's adjacency check refuses
	// that too.
	sameAG := func(b uint64) bool { return b != 0 && b%a.geo.AGBlocks != 0 }
	if sameAG(r.Goal) {
		if e, ok = a.allocAt(r.Goal, r.Len, r.Stream); ok {
			// An append that extended the file in place: the caller
			// passes this extent's end as its next goal, so a hint would
			// only repeat it (a hint equal to the goal is skipped below).
			// Not updating the cache keeps ristretto's Set, and the locks
			// it takes, off the common sequential path.
			return e, nil
		}
	}
	var entry *atomic.Uint64
	if a.cache != nil {
		// Counted in the inode's AG: no counter shared by all writers.
		home := a.ags[InoAG(r.Ino)%a.geo.AGCount]
		var found bool
		if entry, found = a.cache.Get(r.Ino); !found {
			home.cacheMisses.Add(1)
		} else if hint := entry.Load(); hint != r.Goal {
			home.cacheHits.Add(1)
			if sameAG(hint) {
				e, ok = a.allocAt(hint, r.Len, r.Stream)
			}
		}
	}
	if !ok {
		e, ok = a.allocPolicy(r)
	}
	if !ok {
		return Extent{}, ErrNoSpace
	}
	if a.cache != nil {
		a.setHint(r.Ino, entry, e.end())
	}
	return e, nil
}

// AllocMeta returns one block for a metadata node of AG agno: the highest
// free block of that AG (see allocTop), else of the next AG that has one.
// Counted as stream 0. ErrNoSpace when nothing is free.
func (a *Allocator) AllocMeta(agno uint32) (uint64, error) {
	n := a.geo.AGCount
	for i := range n {
		if b, ok := a.ags[(agno+i)%n].allocTop(0); ok {
			return b, nil
		}
	}
	return 0, ErrNoSpace
}

// TakeExact takes exactly [start, start+n) for stream when all of it is
// free and inside one AG, and reports whether it did; otherwise nothing
// changes.
func (a *Allocator) TakeExact(start, n uint64, stream uint32) bool {
	if n == 0 || start >= a.geo.TotalBlocks || start/a.geo.AGBlocks != (start+n-1)/a.geo.AGBlocks {
		return false
	}
	return a.ags[start/a.geo.AGBlocks].takeExact(start, n, stream)
}

// setHint records b as the inode's placement hint: in place when the inode
// has an entry (an atomic store, no cache lock), else by adding one, which
// ristretto's admission may drop; the next Alloc then just falls back.
func (a *Allocator) setHint(ino uint64, entry *atomic.Uint64, b uint64) {
	if entry != nil {
		entry.Store(b)
		return
	}
	entry = new(atomic.Uint64)
	entry.Store(b)
	a.cache.Set(ino, entry, 1)
}

// allocAt extends exactly at block b, within the AG that holds b only.
func (a *Allocator) allocAt(b, n uint64, stream uint32) (Extent, bool) {
	if b >= a.geo.TotalBlocks {
		return Extent{}, false
	}
	return a.ags[b/a.geo.AGBlocks].allocAt(b, n, stream)
}

// allocPolicy tries the policy's AG set starting at the target AG, then
// every other AG round robin from the one after the set: the set is a
// preference, not a wall, so one stream can fill the device.
func (a *Allocator) allocPolicy(r Request) (Extent, bool) {
	nags := a.geo.AGCount
	first, size := a.AGSet(r.Ino, r.Stream)
	k := InoAGino(r.Ino) % size
	for i := range size {
		agi := (uint64(first) + uint64((k+i)%size)) % uint64(nags)
		if e, ok := a.ags[agi].allocBest(r.Len, r.Stream); ok {
			return e, true
		}
	}
	startAG := (uint64(first) + uint64(size)) % uint64(nags)
	for i := range uint64(nags) {
		agi := (startAG + i) % uint64(nags)
		if (agi+uint64(nags)-uint64(first))%uint64(nags) < uint64(size) {
			continue // in the set: tried above
		}
		if e, ok := a.ags[agi].allocBest(r.Len, r.Stream); ok {
			return e, true
		}
	}
	return Extent{}, false
}

// FreeBlocks returns the number of free blocks (excluding those Trim holds).
func (a *Allocator) FreeBlocks() uint64 {
	var n uint64
	for _, g := range a.ags {
		n += g.free.Load()
	}
	return n
}

// DeviceStream maps a file's stream id onto a device that offers max
// streams (placement handles): ids above max wrap as ((id-1) mod max)+1, so
// an image moved to a drive with fewer handles still writes, with streams
// sharing handles. Stream 0 and devices without streams pass id through.
func DeviceStream(id, max uint32) uint32 {
	if id == 0 || max == 0 || id <= max {
		return id
	}
	return (id-1)%max + 1
}

// Check verifies the free-space index of every AG: both indexes agree,
// extents are inside their AG, sorted, non-overlapping and merged, and
// the free counters match.
func (a *Allocator) Check() error {
	for _, g := range a.ags {
		g.lock()
		err := g.check()
		g.unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// AGStats describes one allocation group.
type AGStats struct {
	Index     uint64 `json:"index"`
	Start     uint64 `json:"start"`
	Size      uint64 `json:"size"`
	Free      uint64 `json:"free"`
	Allocs    uint64 `json:"allocs"`
	LockWaits uint64 `json:"lock_waits"`
}

// Stats is a snapshot of allocator counters.
type Stats struct {
	AGs          []AGStats         `json:"ags"`
	CacheHits    uint64            `json:"cache_hits"`    // placement-cache lookups that found a hint
	CacheMisses  uint64            `json:"cache_misses"`  // lookups that found none (never admitted or evicted)
	StreamBlocks map[uint32]uint64 `json:"stream_blocks"` // blocks ever allocated per stream id (0 = none)
	Policy       string            `json:"policy"`
	MaxStreams   uint32            `json:"max_streams"`
}

// Stats returns a snapshot of the counters; each value is read atomically,
// the set as a whole is not a single instant.
func (a *Allocator) Stats() Stats {
	s := Stats{
		AGs:          make([]AGStats, len(a.ags)),
		StreamBlocks: make(map[uint32]uint64),
		Policy:       a.opts.Policy.String(),
		MaxStreams:   a.maxStreams,
	}
	for i, g := range a.ags {
		s.AGs[i] = AGStats{
			Index:     uint64(g.index),
			Start:     g.start,
			Size:      g.size,
			Free:      g.free.Load(),
			Allocs:    g.allocs.Load(),
			LockWaits: g.lockWaits.Load(),
		}
		s.CacheHits += g.cacheHits.Load()
		s.CacheMisses += g.cacheMisses.Load()
	}
	for _, g := range a.ags {
		// Plain Lock, not g.lock: a stats reader is not the allocation
		// contention LockWaits counts.
		g.mu.Lock()
		for k, v := range g.streamBlocks {
			s.StreamBlocks[k] += v
		}
		g.mu.Unlock()
	}
	return s
}
