package tree

import (
	"bytes"
	"fmt"
)

// checkLoad returns node blk for Check and Blocks: pinned nodes from memory
// (re-validated through an encode/decode round trip), all others read from
// the device, bypassing the cache so a full walk neither trusts nor floods it.
func (t *Tree) checkLoad(blk uint64, want int) (*node, error) {
	n := t.dirty[blk]
	if n == nil {
		n = t.inflight[blk]
	}
	if n == nil {
		return t.read(blk, want)
	}
	if n.size > t.cfg.NodeSize {
		return nil, fmt.Errorf("%w: block %d (owner %d): in-memory node of %d bytes overflows", ErrCorrupt, blk, t.cfg.Owner, n.size)
	}
	if n.size != n.computeSize() {
		return nil, fmt.Errorf("%w: block %d (owner %d): in-memory size %d, entries need %d", ErrCorrupt, blk, t.cfg.Owner, n.size, n.computeSize())
	}
	buf := make([]byte, t.cfg.NodeSize)
	encode(n, &t.cfg, buf)
	return decode(buf, blk, &t.cfg, want)
}

// Check walks the whole tree and reports every structural problem it finds
// (checksums, magic, owner, uuid, self block, key order within and across
// nodes, separators against children, levels, empty nodes, blocks reached
// twice), calling visit (if not nil) for each node block it reaches, also
// unreadable ones (level -1 if unknown), so fsck can account for them.
// visit runs under the shared lock and must not call the tree.
func (t *Tree) Check(visit func(blk uint64, level int)) []error {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.root == 0 {
		return nil
	}
	var errs []error
	seen := make(map[uint64]bool)
	// lo/hi bound the keys of the subtree: lo <= k < hi (nil = unbounded).
	var walk func(blk uint64, want int, lo, hi []byte, isRoot bool)
	walk = func(blk uint64, want int, lo, hi []byte, isRoot bool) {
		if seen[blk] {
			errs = append(errs, fmt.Errorf("%w: block %d (owner %d) is referenced twice", ErrCorrupt, blk, t.cfg.Owner))
			return
		}
		seen[blk] = true
		n, err := t.checkLoad(blk, want)
		if err != nil {
			if visit != nil {
				visit(blk, want)
			}
			errs = append(errs, err)
			return
		}
		if visit != nil {
			visit(blk, n.level)
		}
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("%w: block %d (owner %d, level %d): %s", ErrCorrupt, blk, t.cfg.Owner, n.level, fmt.Sprintf(format, args...)))
		}
		if n.leaf() && n.nkeys() == 0 {
			bad("empty leaf")
		}
		if !n.leaf() && isRoot && n.nkids() < 2 {
			bad("internal root with %d child", n.nkids())
		}
		// Decoding checked order within the node; check the bounds.
		below, above := n.outside(lo, hi)
		if below {
			bad("key %q below the parent's separator %q", n.key(0), lo)
		}
		if above {
			bad("key %q not below the parent's separator %q", n.key(n.nkeys()-1), hi)
		}
		if n.leaf() {
			return
		}
		for i := range n.nkids() {
			clo, chi := n.childRange(i, lo, hi)
			walk(n.kid(i), n.level-1, clo, chi, false)
		}
	}
	walk(t.root, -1, nil, nil, true)
	return errs
}

// Blocks calls fn for every node block of the tree, parents before
// children (for fsck and space accounting). It stops at the first node it
// cannot read.
func (t *Tree) Blocks(fn func(blk uint64)) error {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.root == 0 {
		return nil
	}
	var walk func(blk uint64, want int) error
	walk = func(blk uint64, want int) error {
		n, err := t.checkLoad(blk, want)
		if err != nil {
			return err
		}
		fn(blk)
		for i := range n.nkids() {
			if err := walk(n.kid(i), n.level-1); err != nil {
				return err
			}
		}
		return nil
	}
	return walk(t.root, -1)
}

// OpenDamaged opens the tree at root without reading the root first, for
// Salvage and Check of a tree whose root may not verify. Other methods
// report the damage as they meet it.
func OpenDamaged(p Pager, c *Cache, cfg Config, root uint64) (*Tree, error) {
	t, err := Open(p, c, cfg, 0)
	if err != nil {
		return nil, err
	}
	t.root = root
	return t, nil
}

// Salvage calls fn, in key order, for every entry reachable from the root
// through nodes that pass every check (checksum, magic, owner, uuid, self
// block, level, key order, and the key range the parent's separators
// give), and skips each subtree under a node that fails one, returning an
// error per skipped subtree that names the key range lost. visit (if not
// nil) hears of every block reached, also those that fail. Only child
// pointers of valid nodes are followed: a stale copy of a node that
// copy-on-write left in free space is never read unless a valid node of
// this tree points at it. Both run under the shared lock and must not call
// the tree.
func (t *Tree) Salvage(fn func(k, v []byte), visit func(blk uint64)) (lost []error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.root == 0 {
		return nil
	}
	seen := make(map[uint64]bool)
	var walk func(blk uint64, want int, lo, hi []byte)
	walk = func(blk uint64, want int, lo, hi []byte) {
		drop := func(why error) {
			lost = append(lost, fmt.Errorf("keys from %s to %s lost: %w", showKey(lo, "the first"), showKey(hi, "the last"), why))
		}
		if seen[blk] {
			drop(fmt.Errorf("%w: block %d (owner %d) is referenced twice", ErrCorrupt, blk, t.cfg.Owner))
			return
		}
		seen[blk] = true
		if visit != nil {
			visit(blk)
		}
		n, err := t.checkLoad(blk, want)
		if err != nil {
			drop(err)
			return
		}
		if below, above := n.outside(lo, hi); below || above {
			drop(fmt.Errorf("%w: block %d (owner %d, level %d): keys outside the parent's range", ErrCorrupt, blk, t.cfg.Owner, n.level))
			return
		}
		if n.leaf() {
			for i := range n.nkeys() {
				fn(n.key(i), n.val(i))
			}
			return
		}
		for i := range n.nkids() {
			clo, chi := n.childRange(i, lo, hi)
			walk(n.kid(i), n.level-1, clo, chi)
		}
	}
	walk(t.root, -1, nil, nil)
	return lost
}

// outside reports whether the node's first key is below lo (or, in an
// internal node, equal to it: its first key must be a real separator
// above lo) and whether its last key is not below hi (nil: unbounded).
func (n *node) outside(lo, hi []byte) (below, above bool) {
	nk := n.nkeys()
	if nk == 0 {
		return false, false
	}
	first, last := n.key(0), n.key(nk-1)
	below = lo != nil && (bytes.Compare(first, lo) < 0 || (!n.leaf() && bytes.Equal(first, lo)))
	above = hi != nil && bytes.Compare(last, hi) >= 0
	return below, above
}

// childRange is the key range [lo, hi) of child i of internal node n whose
// own range is [lo, hi).
func (n *node) childRange(i int, lo, hi []byte) ([]byte, []byte) {
	if i > 0 {
		lo = n.key(i - 1)
	}
	if i < n.nkeys() {
		hi = n.key(i)
	}
	return lo, hi
}

// showKey prints a key bound briefly: hex, cut after 24 bytes; none for nil.
func showKey(k []byte, none string) string {
	if k == nil {
		return none
	}
	if len(k) > 24 {
		return fmt.Sprintf("% x…", k[:24])
	}
	return fmt.Sprintf("% x", k)
}
