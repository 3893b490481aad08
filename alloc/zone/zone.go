// Package zone is the block allocator for the sequential zones of a zoned
// device (ZNS, host-managed SMR): file data goes only to open zones through
// an allocation pointer, freed blocks become garbage in their zone until the
// zone is reset, and streams decide which data shares a zone. See
// docs/ZONED.md ("The allocator on zones", "Seed 2", "Zone reclaim").
//
// The caller (the filesystem) writes what Alloc hands out, in order per
// zone, and reports each write's completion with Done; it frees blocks with
// Free only after the commit that unmaps them; a reclaimer picks victims
// (Victim), copies their live blocks through AllocReclaim, commits, and
// then calls Reset. Metadata lives in conventional space and is not this
// package's business.
package zone

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/streamfs/streamfs/alloc/victim"
	"github.com/streamfs/streamfs/backend"
)

var (
	// ErrNoSpace: no free zone, no room in any open zone and no garbage
	// that reclaim could turn back into a free zone. Matches ENOSPC.
	ErrNoSpace error = fmt.Errorf("zone alloc: no space: %w", syscall.ENOSPC)
	// ErrInvalid: a bad argument or geometry.
	ErrInvalid = errors.New("zone alloc: invalid argument")
	// ErrCorrupt: an extent conflicts with the zone state (freed twice,
	// beyond the allocation pointer, live blocks in a zone being reset).
	ErrCorrupt = errors.New("zone alloc: zone state conflict")
)

// Cond is a zone's condition as the allocator sees it (not the device's:
// an open zone here may be implicitly open or closed on the device).
type Cond uint8

const (
	CondFree        Cond = iota // empty, in the free pool
	CondOpen                    // owned by a slot, or retired with writes in flight
	CondFull                    // allocation pointer at capacity (or finished), every block live
	CondReclaimable             // full, with garbage: a reclaim victim candidate
	CondReclaiming              // picked by Victim, waiting for Reset
	CondOffline                 // not usable (device read-only/offline, failed finish)
)

func (c Cond) String() string {
	switch c {
	case CondFree:
		return "free"
	case CondOpen:
		return "open"
	case CondFull:
		return "full"
	case CondReclaimable:
		return "reclaimable"
	case CondReclaiming:
		return "reclaiming"
	case CondOffline:
		return "offline"
	}
	return fmt.Sprintf("Cond(%d)", uint8(c))
}

// Geometry is the device's zone layout in filesystem blocks. Zone i covers
// blocks [i·ZoneBlocks, i·ZoneBlocks+CapBlocks); zones below First are
// conventional (metadata) and never handed out.
type Geometry struct {
	ZoneBlocks uint64
	CapBlocks  uint64
	Zones      int // all zones, conventional ones included
	First      int // first sequential zone
	MaxOpen    int // 0 = no limit
	MaxActive  int // 0 = no limit
}

// FromDevice converts a device's zone geometry to blocks of blockSize
// bytes; zone size and capacity must be whole blocks.
func FromDevice(g backend.ZoneGeometry, blockSize int64) (Geometry, error) {
	if blockSize <= 0 || g.ZoneSize%blockSize != 0 || g.ZoneCap%blockSize != 0 {
		return Geometry{}, fmt.Errorf("%w: zone size %d / capacity %d not whole %d-byte blocks", ErrInvalid, g.ZoneSize, g.ZoneCap, blockSize)
	}
	return Geometry{
		ZoneBlocks: uint64(g.ZoneSize / blockSize),
		CapBlocks:  uint64(g.ZoneCap / blockSize),
		Zones:      g.Zones,
		First:      g.Conventional,
		MaxOpen:    g.MaxOpen,
		MaxActive:  g.MaxActive,
	}, nil
}

func (g Geometry) validate() error {
	if g.ZoneBlocks == 0 || g.CapBlocks == 0 || g.CapBlocks > g.ZoneBlocks || g.First < 0 || g.First >= g.Zones ||
		g.MaxOpen < 0 || g.MaxActive < 0 || g.CapBlocks > 1<<32 || g.Zones > 1<<31 {
		return fmt.Errorf("%w: zone geometry %+v", ErrInvalid, g)
	}
	return nil
}

// limit is the number of zones the allocator may hold open or active at
// once: the smaller nonzero device limit, 0 for none.
func (g Geometry) limit() int {
	switch {
	case g.MaxOpen == 0:
		return g.MaxActive
	case g.MaxActive == 0:
		return g.MaxOpen
	}
	return min(g.MaxOpen, g.MaxActive)
}

// Device is what the allocator asks of the zoned device: finish (to give
// back the active resource of a zone it stops writing early) and reset.
// backend.Zoned has it.
type Device interface {
	ZoneMgmt(op backend.ZoneOp, off int64) error
}

// Options tune the allocator. Zero values take the defaults given.
type Options struct {
	// Streams is how many write streams the filesystem would offer (the
	// device's, or software streams); New lowers it to what the open and
	// active limits leave room for (Streams reports the result).
	Streams uint32
	// StreamSlots is the open zones per stream (default 1).
	StreamSlots int
	// GenericSlots is the open zones of files without a stream (default 2,
	// the generic AG set's size).
	GenericSlots int
	// Reserve is the free zones only reclaim may take (default 2): a
	// reclaim pass copies one victim, at most one zone's worth, so it
	// always finds room and gives a zone back.
	Reserve int
	// LowWater is the free zone count at or below which reclaim is wanted
	// (default Reserve+1: one zone for writers beyond the reserve while a
	// pass runs). Reclaim stops once free zones are above it, so a free
	// zone kept beyond that is device space no victim can hold as garbage:
	// its cost in copies grows with the zone size, so keep it low.
	LowWater int
	// Cache turns on seed 2's inode-to-zone cache with room for about
	// CacheEntries inodes (default 65536).
	Cache        bool
	CacheEntries int64
	// Victim is the reclaim victim rule.
	Victim victim.Policy
	// BlockSize converts blocks to device offsets for Device (bytes).
	BlockSize int64
}

// Extent is a run of blocks in one zone.
type Extent struct{ Start, Len uint64 }

// Request asks for blocks for one file.
type Request struct {
	Ino    uint64 // owning inode (its AG and agino pick the slot)
	Stream uint32 // the file's stream, 0 = none
	Len    uint64 // blocks wanted (>0); Alloc returns 1..Len
	// Random: the write does not extend the file's previous extent, so
	// seed 2's cache is asked first.
	Random bool
	// NoWait: return *WouldWait instead of waiting.
	NoWait bool
}

// zone is one sequential zone.
type zone struct {
	idx   int
	start uint64 // first block
	// slot owning the zone for allocation, -1 none; written under the
	// slot's and the zone's locks, read atomically by the cache path to
	// find which slot lock to take.
	slot atomic.Int32

	// mu guards the fields below. Lock order: slot.mu, then zone.mu
	// (ascending zone index when several), then pool.mu.
	mu       sync.Mutex
	cond     Cond
	alloc    uint64 // blocks handed out from start (allocation pointer)
	inflight uint64 // handed out, write not yet Done
	live     uint64 // blocks written or in flight and not freed
	retired  bool   // no slot allocates here any more (full, broken, or left)
	broken   bool   // a write failed: the device pointer is behind alloc
	active   bool   // holds one of the pool's active resources
	class    uint32 // stream class of the slot that filled it
	filled   uint64 // fill sequence, the age cost-benefit uses
	lost     uint64 // capacity given up by a finish before the allocation pointer reached it
	// gen changes whenever the zone stops taking writes (retire) and at
	// reset: seed 2's cache entries of an older generation are stale.
	gen atomic.Uint32
}

// room returns what the zone can still hand out. Caller holds z.mu.
func (z *zone) room(cap uint64) uint64 {
	if z.cond != CondOpen || z.retired || z.broken {
		return 0
	}
	return cap - z.alloc
}

// slot is one open-zone slot: a stream's, a generic one or a reclaim one.
type slot struct {
	idx     int
	class   uint32 // 0 generic, 1..streams
	reclaim bool
	mu      sync.Mutex // guards zone; taken before any zone.mu
	zone    *zone      // nil until the slot first allocates
	cache   struct{ hits, misses, stale atomic.Uint64 }
}

// pool is the free zones and the device resources. Its lock is taken once
// per zone opened, filled or reset, never per block.
type pool struct {
	mu     sync.Mutex // after slot.mu and zone.mu
	free   []int      // free zone indexes (stack)
	active int        // zones open for writing or with writes in flight
	// wake is closed (and replaced) when a zone is returned to the pool or
	// an active resource is released: waiting writers retry.
	wake chan struct{}
}

// Allocator hands out blocks of a zoned device's sequential zones. All
// methods are safe for concurrent use.
type Allocator struct {
	geo  Geometry
	opts Options
	dev  Device

	streams uint32  // usable streams, after the limits
	zones   []*zone // sequential zones, index i-geo.First
	slots   []*slot // stream slots, then generic, then reclaim (per class)
	nStream int     // stream slots
	nGen    int     // generic slots
	pool    pool
	cache   *cache // nil when off

	garbage atomic.Uint64 // freed, failed and finished-away blocks not yet reset
	// retiredGarbage is the part of garbage in retired zones (no slot
	// writes them): what reclaim can get back. Writers wait for reclaim
	// only when it is nonzero.
	retiredGarbage atomic.Uint64
	finishErrs     atomic.Uint64
	lastErr        atomic.Pointer[error]
	fillSeq        atomic.Uint64
	nfree          atomic.Int64 // len(pool.free), read without the pool lock
	reclaimC       chan struct{}
	waits          atomic.Uint64 // writers that waited for reclaim or a drain
	used           atomic.Bool   // Alloc ran: Load is no longer allowed
}

// New returns an allocator for geometry geo on dev with every sequential
// zone free; Load replaces that with the device's state at mount.
func New(geo Geometry, dev Device, opts Options) (*Allocator, error) {
	if err := geo.validate(); err != nil {
		return nil, err
	}
	if dev == nil || opts.BlockSize <= 0 {
		return nil, fmt.Errorf("%w: need a device and a block size", ErrInvalid)
	}
	if opts.StreamSlots == 0 {
		opts.StreamSlots = 1
	}
	if opts.GenericSlots == 0 {
		opts.GenericSlots = 2
	}
	if opts.Reserve == 0 {
		opts.Reserve = 2
	}
	if opts.LowWater == 0 {
		opts.LowWater = opts.Reserve + 1
	}
	if opts.CacheEntries == 0 {
		opts.CacheEntries = 1 << 16
	}
	if opts.StreamSlots < 0 || opts.GenericSlots < 0 || opts.Reserve < 0 || opts.LowWater < opts.Reserve {
		return nil, fmt.Errorf("%w: options %+v", ErrInvalid, opts)
	}
	streams, err := fitStreams(geo.limit(), opts)
	if err != nil {
		return nil, err
	}
	nseq := geo.Zones - geo.First
	if nseq <= opts.Reserve {
		return nil, fmt.Errorf("%w: %d sequential zones leave nothing beside a reserve of %d", ErrInvalid, nseq, opts.Reserve)
	}
	a := &Allocator{
		geo: geo, opts: opts, dev: dev, streams: streams,
		zones:    make([]*zone, nseq),
		reclaimC: make(chan struct{}, 1),
	}
	a.pool.wake = make(chan struct{})
	for i := range a.zones {
		z := &zone{idx: geo.First + i, start: uint64(geo.First+i) * geo.ZoneBlocks}
		z.slot.Store(-1)
		a.zones[i] = z
	}
	for i := nseq - 1; i >= 0; i-- {
		a.pool.free = append(a.pool.free, i)
	}
	a.nfree.Store(int64(nseq))
	a.nStream = int(streams) * opts.StreamSlots
	a.nGen = opts.GenericSlots
	for s := range streams {
		for range opts.StreamSlots {
			a.slots = append(a.slots, &slot{class: s + 1})
		}
	}
	for range a.nGen {
		a.slots = append(a.slots, &slot{})
	}
	for c := range streams + 1 {
		a.slots = append(a.slots, &slot{class: c, reclaim: true})
	}
	for i, s := range a.slots {
		s.idx = i
	}
	if opts.Cache {
		if a.cache, err = newCache(opts.CacheEntries); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// fitStreams lowers the wanted streams until every slot fits the open and
// active limits: streams·StreamSlots + GenericSlots + one reclaim slot per
// stream and one for unstreamed data. Fewer streams than wanted is what
// GET_MAX then reports; no room even for zero streams is an error.
func fitStreams(limit int, o Options) (uint32, error) {
	need := func(s int) int { return s*o.StreamSlots + o.GenericSlots + s + 1 }
	if limit == 0 {
		return o.Streams, nil
	}
	if need(0) > limit {
		return 0, fmt.Errorf("%w: open/active limit %d below the %d generic and reclaim slots", ErrInvalid, limit, need(0))
	}
	s := int(o.Streams)
	for s > 0 && need(s) > limit {
		s--
	}
	return uint32(s), nil
}

// Streams returns how many write streams the geometry gives (GET_MAX).
func (a *Allocator) Streams() uint32 { return a.streams }

// Geometry returns the layout the allocator was built with.
func (a *Allocator) Geometry() Geometry { return a.geo }

// Close releases the cache.
func (a *Allocator) Close() {
	if a.cache != nil {
		a.cache.close()
	}
}

// zoneOf returns the sequential zone holding block b.
func (a *Allocator) zoneOf(b uint64) (*zone, error) {
	i := b / a.geo.ZoneBlocks
	if i < uint64(a.geo.First) || i >= uint64(a.geo.Zones) {
		return nil, fmt.Errorf("%w: block %d is not in a sequential zone", ErrCorrupt, b)
	}
	return a.zones[int(i)-a.geo.First], nil
}

// off returns block b's device offset.
func (a *Allocator) off(b uint64) int64 { return int64(b) * a.opts.BlockSize }

// End returns the block after the extent.
func (e Extent) End() uint64 { return e.Start + e.Len }
