package tree

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// Pager gives a tree its blocks. Block numbers are absolute device blocks.
// Its methods are called with the tree's lock held and must not call back
// into the tree.
type Pager interface {
	// Read fills buf (len == node size) with block blk's contents.
	Read(blk uint64, buf []byte) error
	// Alloc returns a fresh block for a new node version (near hint when
	// possible; hint 0 = no hint). It may fail (e.g. ENOSPC wrapped); the
	// tree then returns the error and stays consistent.
	Alloc(hint uint64) (uint64, error)
	// Free says blk is no longer referenced by this tree's in-memory version.
	// The pager defers reuse until a checkpoint not referencing it is
	// durable; the tree just reports.
	Free(blk uint64)
}

// Config of one tree.
type Config struct {
	NodeSize int      // bytes per node == filesystem block size (4096..65536, power of two)
	Owner    uint64   // written into every node header and checked on read
	UUID     [16]byte // filesystem uuid, written into and checked in every node header
}

// BlockWrite is one node image to write at block Blk.
type BlockWrite struct {
	Blk  uint64
	Data []byte
}

// ErrTxDone is returned by a Tx used after its Update returned.
var ErrTxDone = errors.New("tree: transaction finished")

// Tree is one copy-on-write B+tree.
//
// Locking: mu is a leaf lock for callers. Nothing in the tree calls out while
// holding it except Pager and Cache methods, and Pager methods must not call
// the tree. Get, Seek, SeekLE, Ascend, Check, Blocks, Root and Dirty take it
// shared; Put, Delete, Update, Snapshot and Written take it exclusively.
type Tree struct {
	p   Pager
	c   *Cache
	cfg Config
	// Derived from cfg, immutable.
	maxEntry int
	minFill  int // entry bytes below which a non-root node is rebalanced

	mu sync.RWMutex // guards the fields below
	// root is the current root block, 0 for an empty tree.
	root uint64
	// dirty holds nodes allocated since the last Snapshot: pinned, changed in place.
	dirty map[uint64]*node
	// inflight holds nodes encoded by Snapshot and not yet reported Written:
	// clean (a change copies them) but pinned, because the device may not
	// have them yet. Readers only read these maps, under the shared lock.
	inflight map[uint64]*node
	// images holds the block image Snapshot encoded for each inflight node;
	// Written turns it into the compact node it caches.
	images map[uint64][]byte
	// spare holds blocks allocated ahead of an operation and not yet used
	// (see reserve); Snapshot hands them back through Pager.Free.
	spare []uint64
	// tx is the one transaction Update hands out under the write lock (a
	// fresh one per Update escaped to the heap on every write).
	tx Tx
}

// Open returns the tree whose root is at block root; root 0 means an empty
// tree (the first Put allocates a root leaf). A non-zero root is read and
// validated now. c may be nil (no caching).
func Open(p Pager, c *Cache, cfg Config, root uint64) (*Tree, error) {
	if p == nil {
		return nil, fmt.Errorf("tree: open owner %d: nil pager: %w", cfg.Owner, ErrInvalid)
	}
	if cfg.NodeSize < minNodeSize || cfg.NodeSize > maxNodeSize || cfg.NodeSize&(cfg.NodeSize-1) != 0 {
		return nil, fmt.Errorf("tree: open owner %d: node size %d: %w", cfg.Owner, cfg.NodeSize, ErrInvalid)
	}
	t := &Tree{
		p:        p,
		c:        c,
		cfg:      cfg,
		maxEntry: MaxEntry(cfg.NodeSize),
		minFill:  (cfg.NodeSize - hdrSize) / 4,
		root:     root,
		dirty:    make(map[uint64]*node),
		inflight: make(map[uint64]*node),
		images:   make(map[uint64][]byte),
	}
	if root != 0 {
		if _, err := t.load(root, -1); err != nil {
			return nil, fmt.Errorf("tree: open owner %d: %w", cfg.Owner, err)
		}
	}
	return t, nil
}

// Root is the current root block (it changes as nodes are copied); 0 if empty.
func (t *Tree) Root() uint64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.root
}

// Dirty is the number of dirty nodes (what the next Snapshot will write).
func (t *Tree) Dirty() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.dirty)
}

// load returns the node at blk, which must have level want (any if want < 0).
// Safe under the shared lock: two readers may both miss and decode the same
// block; both copies are valid and immutable.
func (t *Tree) load(blk uint64, want int) (*node, error) {
	n := t.dirty[blk]
	if n == nil {
		n = t.inflight[blk]
	}
	if n == nil {
		var ok bool
		if n, ok = t.c.get(blk); ok && n.owner != t.cfg.Owner {
			n = nil // another tree's stale entry: read the device
		}
	}
	if n != nil {
		if want >= 0 && n.level != want {
			return nil, fmt.Errorf("%w: block %d (owner %d): level %d, want %d", ErrCorrupt, blk, t.cfg.Owner, n.level, want)
		}
		return n, nil
	}
	n, err := t.read(blk, want)
	if err != nil {
		return nil, err
	}
	t.c.set(n, n.memCost(t.cfg.NodeSize))
	return n, nil
}

// read reads and validates blk from the device, bypassing the cache.
func (t *Tree) read(blk uint64, want int) (*node, error) {
	buf := make([]byte, t.cfg.NodeSize)
	if err := t.p.Read(blk, buf); err != nil {
		return nil, fmt.Errorf("tree: read node %d (owner %d): %w", blk, t.cfg.Owner, err)
	}
	return decode(buf, blk, &t.cfg, want)
}

// checkEntry rejects entries that would break the node-size guarantees.
func (t *Tree) checkEntry(key, val []byte) error {
	if len(key)+len(val) > t.maxEntry {
		return fmt.Errorf("tree: entry of %d+%d bytes exceeds %d: %w", len(key), len(val), t.maxEntry, ErrInvalid)
	}
	return nil
}

// Get returns a copy of key's value.
func (t *Tree) Get(key []byte) (val []byte, ok bool, err error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.get(key)
}

func (t *Tree) get(key []byte) ([]byte, bool, error) {
	if t.root == 0 {
		return nil, false, nil
	}
	n, err := t.load(t.root, -1)
	if err != nil {
		return nil, false, err
	}
	for !n.leaf() {
		if n, err = t.load(n.kid(n.upperBound(key)), n.level-1); err != nil {
			return nil, false, err
		}
	}
	i := n.lowerBound(key)
	if i < n.nkeys() && bytes.Equal(n.key(i), key) {
		return bytes.Clone(n.val(i)), true, nil
	}
	return nil, false, nil
}

// frame is one step of a root-to-leaf path: the node and the child (internal)
// or entry (leaf) index taken.
type frame struct {
	n *node
	i int
}

// descend returns the path to the leaf where key is or would be, and whether
// it is there (path's last frame then indexes it).
// path is appended to (callers pass a small array of their own: a
// descent per change should not allocate).
func (t *Tree) descend(path []frame, key []byte) ([]frame, bool, error) {
	n, err := t.load(t.root, -1)
	if err != nil {
		return nil, false, err
	}
	for !n.leaf() {
		i := n.upperBound(key)
		path = append(path, frame{n, i})
		if n, err = t.load(n.kid(i), n.level-1); err != nil {
			return nil, false, err
		}
	}
	i := n.lowerBound(key)
	path = append(path, frame{n, i})
	return path, i < n.nkeys() && bytes.Equal(n.key(i), key), nil
}

// reserve makes sure at least need spare blocks are allocated, so that the
// operation that follows cannot fail half-way. On failure the blocks already
// obtained stay spare (no node changed).
func (t *Tree) reserve(need int, hint uint64) error {
	for len(t.spare) < need {
		b, err := t.p.Alloc(hint)
		if err != nil {
			return fmt.Errorf("tree: allocate node (owner %d): %w", t.cfg.Owner, err)
		}
		t.c.Invalidate(b)
		t.spare = append(t.spare, b)
	}
	return nil
}

// reserveOps reserves blocks for ops Put/Delete calls. Each needs at most a
// copy of every path node, a split (or, for Delete, a sibling copy) per
// level and a new root; each may also add a level.
func (t *Tree) reserveOps(ops int) error {
	if ops <= 0 {
		return nil
	}
	height := 0
	if t.root != 0 {
		r, err := t.load(t.root, -1)
		if err != nil {
			return err
		}
		height = r.level + 1
	}
	need := 0
	for i := range ops {
		need += 2*(height+i) + 1
	}
	return t.reserve(need, t.root)
}

// take returns a reserved block.
func (t *Tree) take() uint64 {
	b := t.spare[len(t.spare)-1]
	t.spare = t.spare[:len(t.spare)-1]
	return b
}

// release drops blk from this tree's version and reports it to the pager.
func (t *Tree) release(blk uint64) {
	delete(t.dirty, blk)
	delete(t.inflight, blk)
	delete(t.images, blk)
	t.c.Invalidate(blk)
	t.p.Free(blk)
}

func (t *Tree) isDirty(n *node) bool { return t.dirty[n.blk] == n }

// cleanCount is how many nodes of path a change must copy first.
func (t *Tree) cleanCount(path []frame) int {
	k := 0
	for _, f := range path {
		if !t.isDirty(f.n) {
			k++
		}
	}
	return k
}

// cowPath makes every node of path dirty, top-down, so each parent is dirty
// before its child pointer changes. Needs cleanCount(path) reserved blocks.
func (t *Tree) cowPath(path []frame) {
	for d := range path {
		n := path[d].n
		if t.isDirty(n) {
			continue
		}
		c := n.clone(t.take())
		t.release(n.blk)
		t.dirty[c.blk] = c
		path[d].n = c
		if d == 0 {
			t.root = c.blk
		} else {
			path[d-1].n.kids[path[d-1].i] = c.blk
		}
	}
}

// Put inserts or replaces key's value.
func (t *Tree) Put(key, val []byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.put(key, val)
}

func (t *Tree) put(key, val []byte) error {
	if err := t.checkEntry(key, val); err != nil {
		return err
	}
	if t.root == 0 {
		k, v := newEntry(key, val)
		if err := t.reserve(1, 0); err != nil {
			return err
		}
		n := &node{blk: t.take(), owner: t.cfg.Owner, keys: [][]byte{k}, vals: [][]byte{v}}
		n.size = n.computeSize()
		t.dirty[n.blk] = n
		t.root = n.blk
		return nil
	}
	var pathBuf [8]frame
	path, found, err := t.descend(pathBuf[:0], key)
	if err != nil {
		return err
	}
	leaf := path[len(path)-1].n
	i := path[len(path)-1].i
	var k, v []byte
	var newSize int
	if found {
		if bytes.Equal(leaf.val(i), val) {
			return nil // nothing to change, nothing to copy
		}
		newSize = leaf.size - len(leaf.val(i)) + len(val)
	} else {
		k, v = newEntry(key, val)
		newSize = leaf.size + leafEntryHdr + len(k) + len(v)
	}
	// Blocks needed: copies of clean path nodes, plus one per level that may
	// split (a parent may split if a maximal separator would overflow it),
	// plus a new root if the root may split.
	need := t.cleanCount(path)
	if newSize > t.cfg.NodeSize {
		need++
		d := len(path) - 2
		for ; d >= 0; d-- {
			if path[d].n.size+innerEntryHdr+t.maxEntry <= t.cfg.NodeSize {
				break
			}
			need++
		}
		if d < 0 {
			need++
		}
	}
	if err := t.reserve(need, leaf.blk); err != nil {
		return err
	}
	t.cowPath(path)
	leaf = path[len(path)-1].n
	if found {
		if cur := leaf.vals[i]; owned(cur) && len(cur) == len(val) {
			copy(cur, val)
		} else {
			leaf.keys[i], leaf.vals[i] = newEntry(leaf.keys[i], val)
		}
	} else {
		leaf.keys = insertAt(leaf.keys, i, k)
		leaf.vals = insertAt(leaf.vals, i, v)
	}
	leaf.size = newSize
	// Ascending inserts (new inode numbers, a growing file's extents) are
	// detected per leaf and split it at the insertion point, so an
	// append-only key range fills its leaves instead of leaving each one
	// half empty (InnoDB's insert-direction heuristic).
	seqAt := -1
	if !found {
		if leaf.lastIns > 0 && i == leaf.lastIns {
			seqAt = i
		}
		leaf.lastIns = i + 1
	}
	for d := len(path) - 1; d >= 0 && path[d].n.size > t.cfg.NodeSize; d-- {
		n := path[d].n
		right, sep := t.split(n, seqAt)
		seqAt = -1 // internal nodes split in the middle
		if d == 0 {
			r := &node{blk: t.take(), owner: t.cfg.Owner, level: n.level + 1,
				keys: [][]byte{sep}, kids: []uint64{n.blk, right.blk}}
			r.size = r.computeSize()
			t.dirty[r.blk] = r
			t.root = r.blk
			break
		}
		p, pi := path[d-1].n, path[d-1].i
		p.keys = insertAt(p.keys, pi, sep)
		p.kids = insertAt(p.kids, pi+1, right.blk)
		p.size += innerEntryHdr + len(sep)
	}
	return nil
}

// Entries a dirty leaf owns. A change copies a clean node, whose key and
// value bytes the copy shares with it (and with the cache, a checkpoint
// being encoded, separators above); they are never written. An entry the
// dirty leaf allocated itself, though, is referred to by that leaf alone,
// and replacing it by one of the same sizes rewrites its bytes in place
// instead of allocating: an append's extent and the free-space record in
// front of it change on every write. Such an entry's key and value share
// one allocation with one byte of spare capacity after the value: that is
// the mark (owned). clone drops it from every entry it copies, and a split
// from the entry whose key becomes the separator.

// newEntry copies key and val into one marked allocation.
func newEntry(key, val []byte) (k, v []byte) {
	kl, vl := len(key), len(val)
	kv := make([]byte, kl+vl+1)
	copy(kv, key)
	copy(kv[kl:], val)
	return kv[:kl:kl], kv[kl : kl+vl : kl+vl+1]
}

// owned says v is the value of an entry its dirty leaf allocated (newEntry).
func owned(v []byte) bool { return cap(v) == len(v)+1 }

// disown drops v's mark: its entry's bytes are shared from now on.
func disown(v []byte) []byte { return v[:len(v):len(v)] }

// splitPoint picks the entry index m (1 <= m < count) where n's entries are
// cut so both halves hold about half the bytes; each half then fits a node.
func (n *node) splitPoint() int {
	total := n.size - hdrSize
	cnt := n.count()
	acc, m := 0, 0
	for m < cnt-1 {
		acc += n.entrySize(m)
		m++
		if 2*acc >= total {
			break
		}
	}
	return max(m, 1)
}

// split moves the upper half of dirty node n into a new dirty node (from a
// reserved block) and returns it with the separator for the parent.
func (t *Tree) split(n *node, seqAt int) (*node, []byte) {
	m := n.splitPoint()
	if n.leaf() && seqAt > m && seqAt < n.count() {
		// The new entry and what follows it (at most half the node, since
		// seqAt is past the middle) start the right node; the left keeps
		// what was there before, which fitted.
		m = seqAt
	}
	r := &node{blk: t.take(), owner: t.cfg.Owner, level: n.level}
	var sep []byte
	if n.leaf() {
		r.keys = slices.Clone(n.keys[m:])
		r.vals = slices.Clone(n.vals[m:])
		clear(n.keys[m:])
		clear(n.vals[m:])
		n.keys, n.vals = n.keys[:m], n.vals[:m]
		sep = r.keys[0]
		r.vals[0] = disown(r.vals[0]) // its key bytes are the separator's now
		if n.lastIns > m {
			r.lastIns, n.lastIns = n.lastIns-m, 0
		}
	} else {
		// Children [0,m) stay; separator m-1 moves up; children [m,..) move.
		sep = n.keys[m-1]
		r.kids = slices.Clone(n.kids[m:])
		r.keys = slices.Clone(n.keys[m:])
		clear(n.keys[m-1:])
		n.kids, n.keys = n.kids[:m], n.keys[:m-1]
	}
	n.size, r.size = n.computeSize(), r.computeSize()
	t.dirty[r.blk] = r
	return r, sep
}

// rekey replaces the entry under old, which must exist, by key -> val.
// When key keeps old's place among the leaf's entries (the common case:
// a free-space record whose start moves up as its front is used), the
// entry is rewritten in place with one descent and no rebalancing;
// otherwise it is a Delete and a Put.
func (t *Tree) rekey(old, key, val []byte) error {
	if err := t.checkEntry(key, val); err != nil {
		return err
	}
	if t.root == 0 {
		return fmt.Errorf("tree: rekey: key % x not found: %w", old, ErrInvalid)
	}
	var pathBuf [8]frame
	path, found, err := t.descend(pathBuf[:0], old)
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("tree: rekey: key % x not found: %w", old, ErrInvalid)
	}
	leaf, i := path[len(path)-1].n, path[len(path)-1].i
	c := bytes.Compare(key, old)
	inPlace := c == 0
	if c > 0 {
		// key must sort before the next entry: in the leaf, or else the
		// separator bounding the leaf from above (none: the last leaf).
		inPlace = true
		if i+1 < leaf.nkeys() {
			inPlace = bytes.Compare(key, leaf.key(i+1)) < 0
		} else if ub := pathUpper(path); ub != nil {
			inPlace = bytes.Compare(key, ub) < 0
		}
	} else if c < 0 {
		// The mirror image: after the entry before, or at or after the
		// separator that bounds the leaf from below.
		if i > 0 {
			inPlace = bytes.Compare(key, leaf.key(i-1)) > 0
		} else if lb := pathLower(path); lb != nil {
			inPlace = bytes.Compare(key, lb) >= 0
		}
	}
	newSize := leaf.size - len(old) - len(leaf.val(i)) + len(key) + len(val)
	if !inPlace || newSize > t.cfg.NodeSize {
		if _, err := t.del(old); err != nil {
			return err
		}
		return t.put(key, val)
	}
	if err := t.reserve(t.cleanCount(path), leaf.blk); err != nil {
		return err
	}
	t.cowPath(path)
	leaf = path[len(path)-1].n
	// old may be leaf.keys[i] itself: not read after this.
	if cur := leaf.vals[i]; owned(cur) && len(cur) == len(val) && len(leaf.keys[i]) == len(key) {
		copy(leaf.keys[i], key)
		copy(cur, val)
	} else {
		leaf.keys[i], leaf.vals[i] = newEntry(key, val)
	}
	leaf.size = newSize
	return nil
}

// pathUpper returns the separator above which keys leave the subtree of
// path's leaf (nil: none, the rightmost leaf). Child i of an internal node
// holds keys k with key(i-1) <= k < key(i).
func pathUpper(path []frame) []byte {
	for d := len(path) - 2; d >= 0; d-- {
		if f := path[d]; f.i < f.n.nkeys() {
			return f.n.key(f.i)
		}
	}
	return nil
}

// pathLower returns the smallest key path's leaf may hold (nil: none, the
// leftmost leaf).
func pathLower(path []frame) []byte {
	for d := len(path) - 2; d >= 0; d-- {
		if f := path[d]; f.i > 0 {
			return f.n.key(f.i - 1)
		}
	}
	return nil
}

// Delete removes key; existed says whether it was there.
func (t *Tree) Delete(key []byte) (existed bool, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.del(key)
}

func (t *Tree) del(key []byte) (bool, error) {
	if t.root == 0 {
		return false, nil
	}
	var pathBuf [8]frame
	path, found, err := t.descend(pathBuf[:0], key)
	if err != nil || !found {
		return false, err
	}
	// Load, before changing anything, the sibling each node that may
	// underflow would be rebalanced with, so rebalancing reads nothing.
	// A node loses at most one entry, or a separator shrinks, per level.
	sibs := make([]frame, len(path))
	for d := len(path) - 1; d >= 1; d-- {
		n := path[d].n
		loss := innerEntryHdr + t.maxEntry
		if n.leaf() {
			loss = n.entrySize(path[d].i)
		}
		if n.size-hdrSize-loss >= t.minFill {
			break // no underflow here, so none above
		}
		p, ci := path[d-1].n, path[d-1].i
		if p.nkids() < 2 {
			continue
		}
		si := ci - 1
		if ci == 0 {
			si = 1
		}
		s, err := t.load(p.kid(si), n.level)
		if err != nil {
			return false, err
		}
		sibs[d] = frame{s, si}
	}
	if err := t.reserve(t.cleanCount(path), path[len(path)-1].n.blk); err != nil {
		return false, err
	}
	t.cowPath(path)
	leaf := path[len(path)-1].n
	i := path[len(path)-1].i
	leaf.size -= leaf.entrySize(i)
	leaf.keys = removeAt(leaf.keys, i)
	leaf.vals = removeAt(leaf.vals, i)

	for d := len(path) - 1; d >= 1; d-- {
		n := path[d].n
		p, ci := path[d-1].n, path[d-1].i
		if n.count() == 0 {
			t.removeChild(p, ci)
			t.release(n.blk)
			continue
		}
		if n.size-hdrSize >= t.minFill || sibs[d].n == nil {
			break
		}
		if !t.rebalance(p, ci, n, sibs[d].n, sibs[d].i) {
			break
		}
	}
	t.collapseRoot(path, sibs)
	return true, nil
}

// removeChild drops child ci of p, whose key range is empty, with the
// separator below it (above it for the first child): the neighbour whose
// range grows covers nothing new.
func (t *Tree) removeChild(p *node, ci int) {
	t.removeKid(p, ci, max(ci-1, 0))
}

// removeKid drops child ci and separator ki from p.
func (t *Tree) removeKid(p *node, ci, ki int) {
	if len(p.keys) > 0 {
		p.size -= len(p.keys[ki])
		p.keys = removeAt(p.keys, ki)
	}
	p.size -= innerEntryHdr
	p.kids = removeAt(p.kids, ci)
}

// rebalance fixes underfull dirty child c (index ci of dirty parent p) with
// its sibling s (index si): merge when both fit one node, else share the
// entries evenly. It reports whether p changed. Merging needs no new block
// (s's entries move into c); sharing needs s dirty, and is skipped when no
// block can be had or the new separator would overflow p, leaving a valid,
// merely underfull, tree.
func (t *Tree) rebalance(p *node, ci int, c, s *node, si int) bool {
	l, r, ki := c, s, ci
	if si < ci {
		l, r, ki = s, c, si
	}
	sep := p.keys[ki]
	joined := l.join(r, sep)
	if joined.size <= t.cfg.NodeSize {
		// The separator between the two goes; c keeps the outer bounds.
		c.keys, c.vals, c.kids, c.size = joined.keys, joined.vals, joined.kids, joined.size
		t.removeKid(p, si, ki)
		t.release(s.blk)
		return true
	}
	m := joined.splitPoint()
	var newSep []byte
	if joined.leaf() {
		newSep = joined.keys[m]
	} else {
		newSep = joined.keys[m-1]
	}
	if p.size-len(sep)+len(newSep) > t.cfg.NodeSize {
		return false
	}
	if !t.isDirty(s) {
		if len(t.spare) == 0 && t.reserve(1, s.blk) != nil {
			return false
		}
		s2 := s.clone(t.take())
		t.release(s.blk)
		t.dirty[s2.blk] = s2
		p.kids[si] = s2.blk
		if l == s {
			l = s2
		} else {
			r = s2
		}
	}
	if joined.leaf() {
		l.keys, r.keys = joined.keys[:m:m], slices.Clone(joined.keys[m:])
		l.vals, r.vals = joined.vals[:m:m], slices.Clone(joined.vals[m:])
	} else {
		l.kids, r.kids = joined.kids[:m:m], slices.Clone(joined.kids[m:])
		l.keys, r.keys = joined.keys[:m-1:m-1], slices.Clone(joined.keys[m:])
	}
	l.size, r.size = l.computeSize(), r.computeSize()
	p.keys[ki] = newSep
	p.size += len(newSep) - len(sep)
	return true
}

// join returns a detached node (open form) holding l's entries then r's
// (sep between the children of internal nodes). l and r are not changed and
// may be in either form.
func (l *node) join(r *node, sep []byte) *node {
	lc, rc := l.clone(0), r.clone(0)
	j := &node{level: l.level, owner: l.owner}
	j.keys = make([][]byte, 0, len(lc.keys)+len(rc.keys)+1)
	j.keys = append(j.keys, lc.keys...)
	if l.leaf() {
		j.keys = append(j.keys, rc.keys...)
		j.vals = append(append(make([][]byte, 0, len(lc.vals)+len(rc.vals)+1), lc.vals...), rc.vals...)
		j.size = l.size + r.size - hdrSize
	} else {
		j.keys = append(append(j.keys, sep), rc.keys...)
		j.kids = append(append(make([]uint64, 0, len(lc.kids)+len(rc.kids)+1), lc.kids...), rc.kids...)
		j.size = l.size + r.size - hdrSize + len(sep)
	}
	return j
}

// collapseRoot frees an empty root leaf and replaces a root with a single
// child by that child, repeatedly.
func (t *Tree) collapseRoot(path, sibs []frame) {
	root := path[0].n
	for {
		if root.count() == 0 {
			// An empty leaf, or an internal root whose last child went
			// (possible only below a single-child root left earlier).
			t.release(root.blk)
			t.root = 0
			return
		}
		if root.leaf() || root.nkids() != 1 {
			return
		}
		kid := root.kid(0)
		var next *node
		for d := range path {
			if path[d].n.blk == kid {
				next = path[d].n
			} else if sibs[d].n != nil && sibs[d].n.blk == kid {
				next = sibs[d].n
			}
		}
		if next == nil {
			// Not at hand: the single-child root stays, a valid tree.
			return
		}
		t.release(root.blk)
		t.root = kid
		root = next
	}
}

// Snapshot encodes every dirty node into its block image, marks them clean,
// and returns the root and the blocks to write, in block order. Until
// Written, the snapshotted nodes stay pinned in memory. Spare blocks
// reserved ahead of operations are handed back through Pager.Free, so the
// checkpoint accounts only for blocks it references. The tree keeps each
// Data slice as the node's cached image: the caller must not modify it.
// It is Freeze followed by Encode.
func (t *Tree) Snapshot() (root uint64, writes []BlockWrite) {
	root, f := t.Freeze()
	return root, f.Encode()
}

// DropSpare hands the blocks reserved ahead of operations and not used back
// through Pager.Free. A checkpoint calls it before it folds node
// allocations into the free-space records, so that every block the
// checkpoint counts as used is referenced by a tree.
func (t *Tree) DropSpare() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, b := range t.spare {
		t.p.Free(b)
	}
	t.spare = t.spare[:0]
}

// Frozen is the set of nodes one Freeze took from the dirty set.
type Frozen struct {
	t     *Tree
	nodes []*node
}

// Freeze marks every dirty node clean and pinned (as Snapshot does) without
// encoding it, so the caller's exclusive section costs a pointer move per
// node; Encode produces the block images afterwards, with no lock held by
// the caller. Frozen nodes are immutable: a later change copies them like
// any clean node.
func (t *Tree) Freeze() (root uint64, f *Frozen) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, b := range t.spare {
		t.p.Free(b)
	}
	t.spare = t.spare[:0]
	f = &Frozen{t: t, nodes: make([]*node, 0, len(t.dirty))}
	for blk, n := range t.dirty {
		t.inflight[blk] = n
		f.nodes = append(f.nodes, n)
	}
	clear(t.dirty)
	return t.root, f
}

// Encode returns the block images of the frozen nodes, in block order. It
// may run concurrently with tree operations (it only reads frozen nodes);
// it must complete before Written.
func (f *Frozen) Encode() []BlockWrite {
	t := f.t
	ns := t.cfg.NodeSize
	writes := make([]BlockWrite, 0, len(f.nodes))
	for _, n := range f.nodes {
		// One buffer per node: a cached node keeps its image alive, which
		// must not pin a whole checkpoint's buffer.
		d := make([]byte, ns)
		encode(n, &t.cfg, d)
		writes = append(writes, BlockWrite{Blk: n.blk, Data: d})
	}
	t.mu.Lock()
	for _, w := range writes {
		if t.inflight[w.Blk] != nil {
			t.images[w.Blk] = w.Data
		}
	}
	t.mu.Unlock()
	slices.SortFunc(writes, func(a, b BlockWrite) int { return cmp.Compare(a.Blk, b.Blk) })
	return writes
}

// Written says the writes of the Snapshots so far are durable: their nodes
// move to the cache (in compact form) and may be evicted. Tree operations
// may run between Snapshot and Written; they read the snapshotted nodes from
// memory and copy them on change like any clean node. If a checkpoint's
// writes fail, the device lacks those nodes: do not call Written (they stay
// pinned) and stop using the tree's on-device state.
func (t *Tree) Written() {
	t.mu.Lock()
	defer t.mu.Unlock()
	// Blocks written now may be reallocated ones: drain stale cache writes
	// of their previous lives before they become readable as clean nodes.
	t.c.settle()
	for blk, n := range t.inflight {
		if c, err := decode(t.images[blk], blk, &t.cfg, n.level); err == nil {
			n = c
		} // else: our own image does not decode (a bug); cache the open form.
		t.c.set(n, n.memCost(t.cfg.NodeSize))
	}
	clear(t.inflight)
	clear(t.images)
}

// Height is the number of levels (0 for an empty tree, 1 for a lone leaf):
// the bound a caller needs for how many nodes one Put or Delete may copy.
func (t *Tree) Height() (int, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.root == 0 {
		return 0, nil
	}
	r, err := t.load(t.root, -1)
	if err != nil {
		return 0, err
	}
	return r.level + 1, nil
}
