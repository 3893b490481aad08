package tree

import (
	"fmt"

	"github.com/dgraph-io/ristretto/v2"
)

// Cache holds clean decoded nodes of every tree of a mount, bounded in bytes
// (each node costs its node size). Keys are absolute block numbers, unique
// device-wide, so trees share it without coordination. Safe for concurrent use.
type Cache struct {
	rc *ristretto.Cache[uint64, *node]
}

// NewCache returns a cache holding about maxBytes of nodes.
func NewCache(maxBytes int64) (*Cache, error) {
	if maxBytes < minNodeSize {
		return nil, fmt.Errorf("tree: cache of %d bytes: %w", maxBytes, ErrInvalid)
	}
	// ristretto wants ~10 counters per item it may hold; size for the
	// smallest node so small nodes do not starve the admission policy.
	counters := max(10*(maxBytes/minNodeSize), 1000)
	rc, err := ristretto.NewCache(&ristretto.Config[uint64, *node]{
		NumCounters:        counters,
		MaxCost:            maxBytes,
		BufferItems:        64,
		Metrics:            true,
		IgnoreInternalCost: true, // cost is the node size, nothing else
	})
	if err != nil {
		return nil, fmt.Errorf("tree: cache: %w", err)
	}
	return &Cache{rc: rc}, nil
}

// Close stops the cache's goroutines. Trees using it keep working uncached.
func (c *Cache) Close() {
	if c != nil {
		c.rc.Close()
	}
}

// Invalidate forgets any cached node for blk (it was reallocated).
//
// It does not wait for ristretto's buffered writes (waiting cost ~20 µs per
// allocation on a loaded machine). A stale entry could still appear: a Set
// of blk's old node queued before the free is applied asynchronously. That
// is harmless until blk is readable as a clean node again, which only
// happens after the tree's Written, and Written first drains the buffer
// (see settle): every Set queued before the free is then applied, and so is
// the Del queued after it.
func (c *Cache) Invalidate(blk uint64) {
	if c != nil {
		c.rc.Del(blk)
	}
}

// settle applies every buffered Set and Del (a barrier, see Invalidate).
func (c *Cache) settle() {
	if c != nil {
		c.rc.Wait()
	}
}

// Metrics reports ristretto's hit and miss counters.
func (c *Cache) Metrics() (hits, misses uint64) {
	if c == nil || c.rc.Metrics == nil {
		return 0, 0
	}
	return c.rc.Metrics.Hits(), c.rc.Metrics.Misses()
}

func (c *Cache) get(blk uint64) (*node, bool) {
	if c == nil {
		return nil, false
	}
	return c.rc.Get(blk)
}

// memCost is what a cached node really holds in memory, so that the cache
// bound is a memory bound: the compact form's image, offsets and key
// prefixes plus the node itself; an open-form node (a fallback) is charged
// twice the node size.
func (n *node) memCost(nodeSize int) int {
	if n.raw == nil {
		return 2 * nodeSize
	}
	return len(n.raw) + 2*len(n.offs) + 8*len(n.pfx) + 256
}

func (c *Cache) set(n *node, cost int) {
	if c != nil {
		c.rc.Set(n.blk, n, int64(cost))
	}
}
