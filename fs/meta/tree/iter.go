package tree

import "bytes"

// cursor walks the leaves with a root-to-leaf stack. The caller holds the
// tree's lock (either mode) for the cursor's whole life.
type cursor struct {
	t     *Tree
	stack []frame // stack[len-1] is the leaf; its i is the entry index
}

// descendFrom pushes frames from node n (already loaded) down to a leaf,
// taking the first (last if rightmost) child at each level.
func (cu *cursor) descendFrom(n *node, rightmost bool) error {
	for {
		i := 0
		if rightmost {
			i = n.count() - 1
		}
		cu.push(frame{n, i})
		if n.leaf() {
			return nil
		}
		var err error
		if n, err = cu.t.load(n.kid(i), n.level-1); err != nil {
			return err
		}
	}
}

// seek positions at the leaf where key is or would be (entry index:
// first entry >= key). ok is false for an empty tree.
func (cu *cursor) seek(key []byte) (bool, error) {
	cu.stack = cu.stack[:0]
	if cu.t.root == 0 {
		return false, nil
	}
	n, err := cu.t.load(cu.t.root, -1)
	if err != nil {
		return false, err
	}
	for !n.leaf() {
		i := n.upperBound(key)
		cu.push(frame{n, i})
		if n, err = cu.t.load(n.kid(i), n.level-1); err != nil {
			return false, err
		}
	}
	cu.push(frame{n, n.lowerBound(key)})
	return true, nil
}

// push adds f to the stack by reslicing within its capacity: an append
// through cu would move the caller's stack buffer to the heap on every
// lookup. Taller trees than the buffer holds take a new one.
func (cu *cursor) push(f frame) {
	n := len(cu.stack)
	if n == cap(cu.stack) {
		s := make([]frame, n, 2*n+1)
		copy(s, cu.stack)
		cu.stack = s
	}
	cu.stack = cu.stack[:n+1]
	cu.stack[n] = f
}

// valid says the cursor is on an entry.
func (cu *cursor) valid() bool {
	if len(cu.stack) == 0 {
		return false
	}
	f := cu.stack[len(cu.stack)-1]
	return f.i >= 0 && f.i < f.n.nkeys()
}

func (cu *cursor) entry() (k, v []byte) {
	f := cu.stack[len(cu.stack)-1]
	return f.n.key(f.i), f.n.val(f.i)
}

// settleForward moves to the next entry at or after the position, crossing
// leaves (empty stack when past the end).
func (cu *cursor) settleForward() error {
	for len(cu.stack) > 0 && !cu.valid() {
		cu.stack = cu.stack[:len(cu.stack)-1]
		for len(cu.stack) > 0 {
			top := &cu.stack[len(cu.stack)-1]
			top.i++
			if top.i < top.n.nkids() {
				n, err := cu.t.load(top.n.kid(top.i), top.n.level-1)
				if err != nil {
					return err
				}
				if err := cu.descendFrom(n, false); err != nil {
					return err
				}
				break
			}
			cu.stack = cu.stack[:len(cu.stack)-1]
		}
	}
	return nil
}

// settleBackward is settleForward's mirror (entries at or before).
func (cu *cursor) settleBackward() error {
	for len(cu.stack) > 0 && !cu.valid() {
		cu.stack = cu.stack[:len(cu.stack)-1]
		for len(cu.stack) > 0 {
			top := &cu.stack[len(cu.stack)-1]
			top.i--
			if top.i >= 0 {
				n, err := cu.t.load(top.n.kid(top.i), top.n.level-1)
				if err != nil {
					return err
				}
				if err := cu.descendFrom(n, true); err != nil {
					return err
				}
				break
			}
			cu.stack = cu.stack[:len(cu.stack)-1]
		}
	}
	return nil
}

func (cu *cursor) next() error {
	cu.stack[len(cu.stack)-1].i++
	return cu.settleForward()
}

// ascend calls fn for entries >= from in order until fn returns false.
func (t *Tree) ascend(from []byte, fn func(k, v []byte) bool) error {
	cu := cursor{t: t, stack: make([]frame, 0, 8)}
	if ok, err := cu.seek(from); !ok || err != nil {
		return err
	}
	return cu.walk(fn)
}

// walk calls fn for the entries from the cursor's position on, in order,
// until fn returns false.
func (cu *cursor) walk(fn func(k, v []byte) bool) error {
	if err := cu.settleForward(); err != nil {
		return err
	}
	for cu.valid() {
		if !fn(cu.entry()) {
			return nil
		}
		if err := cu.next(); err != nil {
			return err
		}
	}
	return nil
}

// ascendLE is ascend starting at the last entry <= key (at the first
// entry if none is): a predecessor lookup and a walk with one descent.
func (t *Tree) ascendLE(key []byte, fn func(k, v []byte) bool) error {
	cu := cursor{t: t, stack: make([]frame, 0, 8)}
	if ok, err := cu.seek(key); !ok || err != nil {
		return err
	}
	// seek stops at the first entry >= key: step back unless it is key.
	top := &cu.stack[len(cu.stack)-1]
	if !(top.i < top.n.nkeys() && bytes.Equal(top.n.key(top.i), key)) {
		top.i--
	}
	if err := cu.settleBackward(); err != nil {
		return err
	}
	if !cu.valid() {
		if _, err := cu.seek(key); err != nil {
			return err
		}
	}
	return cu.walk(fn)
}

// seekGE returns copies of the first entry with key >= from.
func (t *Tree) seekGE(from []byte) (k, v []byte, ok bool, err error) {
	cu := cursor{t: t, stack: make([]frame, 0, 8)}
	if ok, err := cu.seek(from); !ok || err != nil {
		return nil, nil, false, err
	}
	if err := cu.settleForward(); err != nil || !cu.valid() {
		return nil, nil, false, err
	}
	k, v = cu.entry()
	return bytes.Clone(k), bytes.Clone(v), true, nil
}

// seekLE returns copies of the last entry with key <= key.
func (t *Tree) seekLE(key []byte) (k, v []byte, ok bool, err error) {
	k, v, ok, err = t.lastLE(key)
	if !ok {
		return nil, nil, false, err
	}
	return bytes.Clone(k), bytes.Clone(v), true, nil
}

// lastLE returns the last entry with key <= key, not copied: valid until
// the tree changes (a change copies a clean node, but rewrites the entries
// a dirty leaf owns in place: see newEntry).
func (t *Tree) lastLE(key []byte) (k, v []byte, ok bool, err error) {
	cu := cursor{t: t, stack: make([]frame, 0, 8)}
	if ok, err := cu.seek(key); !ok || err != nil {
		return nil, nil, false, err
	}
	// seek stops at the first entry >= key: step back unless it is key.
	top := &cu.stack[len(cu.stack)-1]
	if !(top.i < top.n.nkeys() && bytes.Equal(top.n.key(top.i), key)) {
		top.i--
	}
	if err := cu.settleBackward(); err != nil || !cu.valid() {
		return nil, nil, false, err
	}
	k, v = cu.entry()
	return k, v, true, nil
}

// around returns, not copied (see lastLE), the last entry with key <= key
// and the first entry with key > key, with one descent in the common case.
func (t *Tree) around(key []byte) (le, next Entry, err error) {
	cu := cursor{t: t, stack: make([]frame, 0, 8)}
	if ok, err := cu.seek(key); !ok || err != nil {
		return Entry{}, Entry{}, err
	}
	top := &cu.stack[len(cu.stack)-1]
	switch {
	case top.i < top.n.nkeys() && bytes.Equal(top.n.key(top.i), key):
		le = Entry{Key: top.n.key(top.i), Val: top.n.val(top.i), OK: true}
		top.i++
	case top.i > 0:
		le = Entry{Key: top.n.key(top.i - 1), Val: top.n.val(top.i - 1), OK: true}
	default:
		// The predecessor is in an earlier leaf.
		if le.Key, le.Val, le.OK, err = t.lastLE(key); err != nil {
			return Entry{}, Entry{}, err
		}
	}
	if err := cu.settleForward(); err != nil {
		return Entry{}, Entry{}, err
	}
	if cu.valid() {
		next.Key, next.Val = cu.entry()
		next.OK = true
	}
	return le, next, nil
}

// Entry is a key and its value as Tx.Around returns them; OK is false when
// there is no such entry.
type Entry struct {
	Key, Val []byte
	OK       bool
}

// Ascend calls fn for each entry with key >= from in key order until fn
// returns false. fn must not call back into the tree (it runs under the
// shared lock; a writer waiting behind it would deadlock a nested call).
// k and v are only valid during the call.
func (t *Tree) Ascend(from []byte, fn func(k, v []byte) bool) error {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.ascend(from, fn)
}

// AscendLE is Ascend from the last entry with key <= key (from the first
// entry if there is none): the predecessor and what follows it in one
// descent, e.g. the extent that may contain a block and its successors.
func (t *Tree) AscendLE(key []byte, fn func(k, v []byte) bool) error {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.ascendLE(key, fn)
}

// Seek returns (copies of) the first entry with key >= from.
func (t *Tree) Seek(from []byte) (k, v []byte, ok bool, err error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.seekGE(from)
}

// SeekLE returns (copies of) the last entry with key <= key: the
// predecessor, e.g. the extent that may contain a block.
func (t *Tree) SeekLE(key []byte) (k, v []byte, ok bool, err error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.seekLE(key)
}

// Update runs fn under the tree's write lock, so the reads and writes it
// makes through tx are atomic with respect to other tree operations. Changes
// made before fn returns an error are kept (there is no rollback; call
// tx.Reserve first so a block shortage cannot stop fn half-way); fn must
// not call the Tree's own methods (deadlock) nor keep tx.
func (t *Tree) Update(fn func(tx *Tx) error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.tx.t = t
	defer func() { t.tx.t = nil }()
	return fn(&t.tx)
}

// Tx is the tree as seen inside Update: same semantics as Tree's methods,
// without locking.
type Tx struct {
	t *Tree // nil once Update returned
}

// Get is Tree.Get inside Update.
func (tx *Tx) Get(key []byte) ([]byte, bool, error) {
	if tx.t == nil {
		return nil, false, ErrTxDone
	}
	return tx.t.get(key)
}

// Put is Tree.Put inside Update.
func (tx *Tx) Put(key, val []byte) error {
	if tx.t == nil {
		return ErrTxDone
	}
	return tx.t.put(key, val)
}

// Delete is Tree.Delete inside Update.
func (tx *Tx) Delete(key []byte) (bool, error) {
	if tx.t == nil {
		return false, ErrTxDone
	}
	return tx.t.del(key)
}

// AscendLE is Tree.AscendLE inside Update; fn must not change the tree.
func (tx *Tx) AscendLE(key []byte, fn func(k, v []byte) bool) error {
	if tx.t == nil {
		return ErrTxDone
	}
	return tx.t.ascendLE(key, fn)
}

// Rekey replaces the entry under old, which must exist, by key -> val: a
// Delete and a Put, in place when key keeps old's position. Reserve counts
// it as two operations.
func (tx *Tx) Rekey(old, key, val []byte) error {
	if tx.t == nil {
		return ErrTxDone
	}
	return tx.t.rekey(old, key, val)
}

// Ascend is Tree.Ascend inside Update; fn must not change the tree.
func (tx *Tx) Ascend(from []byte, fn func(k, v []byte) bool) error {
	if tx.t == nil {
		return ErrTxDone
	}
	return tx.t.ascend(from, fn)
}

// Reserve allocates, ahead of time, enough blocks that the next ops calls
// of Put and Delete in this transaction cannot fail for lack of a block:
// after it succeeds, a read-modify-write such as merging two free extents
// (Delete, then Put) is all-or-nothing even on a nearly full device. Unused
// blocks are handed back through Pager.Free at the next Snapshot. On error
// nothing changed.
func (tx *Tx) Reserve(ops int) error {
	if tx.t == nil {
		return ErrTxDone
	}
	return tx.t.reserveOps(ops)
}

// Seek returns (copies of) the first entry with key >= from.
func (tx *Tx) Seek(from []byte) (k, v []byte, ok bool, err error) {
	if tx.t == nil {
		return nil, nil, false, ErrTxDone
	}
	return tx.t.seekGE(from)
}

// SeekLE returns (copies of) the last entry with key <= key.
func (tx *Tx) SeekLE(key []byte) (k, v []byte, ok bool, err error) {
	if tx.t == nil {
		return nil, nil, false, ErrTxDone
	}
	return tx.t.seekLE(key)
}

// LastLE is SeekLE without the copies: the slices must not be changed, and
// they are valid until the transaction's next change (which may rewrite an
// entry's bytes in place).
func (tx *Tx) LastLE(key []byte) (k, v []byte, ok bool, err error) {
	if tx.t == nil {
		return nil, nil, false, ErrTxDone
	}
	return tx.t.lastLE(key)
}

// Around returns the last entry with key <= key and the first with key >
// key (the predecessor or the entry itself, and the successor), not copied
// (as LastLE), with one descent where both are in one leaf: e.g. the
// extents on both sides of a block range.
func (tx *Tx) Around(key []byte) (le, next Entry, err error) {
	if tx.t == nil {
		return Entry{}, Entry{}, ErrTxDone
	}
	return tx.t.around(key)
}
