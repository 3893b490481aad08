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
		if nk := n.nkeys(); nk > 0 {
			first, last := n.key(0), n.key(nk-1)
			if lo != nil && (bytes.Compare(first, lo) < 0 || (!n.leaf() && bytes.Equal(first, lo))) {
				bad("key %q below the parent's separator %q", first, lo)
			}
			if hi != nil && bytes.Compare(last, hi) >= 0 {
				bad("key %q not below the parent's separator %q", last, hi)
			}
		}
		if n.leaf() {
			return
		}
		for i := range n.nkids() {
			clo, chi := lo, hi
			if i > 0 {
				clo = n.key(i - 1)
			}
			if i < n.nkeys() {
				chi = n.key(i)
			}
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
