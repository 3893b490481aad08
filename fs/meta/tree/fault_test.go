package tree

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestAllocFailure makes Alloc fail at every point of random operations on a
// clean tree (every change must copy nodes) and checks the tree is valid and
// unchanged after each failure.
func TestAllocFailure(t *testing.T) {
	h := newHarness(t, 4096, 1<<20)
	// Failing the very first Put of an empty tree.
	h.p.failIn = 1
	if err := h.tr.Put([]byte("a"), []byte("b")); !errors.Is(err, errNoSpace) {
		t.Fatalf("Put with failing Alloc: %v", err)
	}
	if h.tr.Root() != 0 {
		t.Fatal("failed first Put changed the root")
	}
	h.p.failIn = 0

	r := rand.New(rand.NewPCG(11, 12))
	m := model{}
	key := func() []byte { return fmt.Appendf(nil, "%05d-%s", r.IntN(4000), make([]byte, r.IntN(200))) }
	for range 6000 {
		k := key()
		v := randVal(r, 300)
		if err := h.tr.Put(k, v); err != nil {
			t.Fatal(err)
		}
		m[string(k)] = string(v)
	}
	h.checkpoint()
	failures := 0
	for op := range 3000 {
		if op%150 == 0 {
			h.checkpoint() // everything clean again: changes need blocks
		}
		rootBefore, dirtyBefore := h.tr.Root(), h.tr.Dirty()
		h.p.failIn = 1 + r.IntN(4)
		h.p.failAll = r.IntN(2) == 0
		k := key()
		var err error
		isPut := r.IntN(3) != 0
		v := randVal(r, 600)
		if isPut {
			err = h.tr.Put(k, v)
		} else {
			_, err = h.tr.Delete(k)
		}
		h.p.failIn, h.p.failAll = 0, false
		if err != nil {
			if !errors.Is(err, errNoSpace) {
				t.Fatalf("op %d: unexpected error %v", op, err)
			}
			failures++
			if h.tr.Root() != rootBefore || h.tr.Dirty() != dirtyBefore {
				t.Fatalf("op %d: failed op changed root %d->%d dirty %d->%d", op, rootBefore, h.tr.Root(), dirtyBefore, h.tr.Dirty())
			}
			if op%20 == 0 {
				compare(t, h.tr, m)
				h.checkLive()
			}
			continue
		}
		if isPut {
			m[string(k)] = string(v)
		} else {
			delete(m, string(k))
		}
	}
	if failures < 100 {
		t.Fatalf("only %d injected failures hit", failures)
	}
	compare(t, h.tr, m)
	h.checkLive()
	h.checkpoint()
	t.Logf("%d failed operations", failures)
}

// corruptFixture is a durable tree of a few levels on a fake device.
func corruptFixture(t *testing.T) (*harness, model) {
	h := newHarness(t, 4096, 1<<20)
	m := model{}
	for i := range 4000 {
		k := fmt.Appendf(nil, "key%06d", i)
		v := fmt.Appendf(nil, "value-%d-%040d", i, i)
		if err := h.tr.Put(k, v); err != nil {
			t.Fatal(err)
		}
		m[string(k)] = string(v)
	}
	h.checkpoint()
	return h, m
}

// leaves lists the durable tree's blocks by level.
func levels(t *testing.T, h *harness) map[int][]uint64 {
	out := map[int][]uint64{}
	tr, err := Open(h.p, nil, h.cfg, h.durable)
	if err != nil {
		t.Fatal(err)
	}
	if errs := tr.Check(func(b uint64, l int) { out[l] = append(out[l], b) }); len(errs) > 0 {
		t.Fatal(errs)
	}
	return out
}

// readAll reads every entry of a fresh, uncached tree, returning the first error.
func readAll(h *harness, cfg Config, m model) error {
	tr, err := Open(h.p, nil, cfg, h.durable)
	if err != nil {
		return err
	}
	for k := range m {
		if _, _, err := tr.Get([]byte(k)); err != nil {
			return err
		}
	}
	return tr.Ascend(nil, func(_, _ []byte) bool { return true })
}

func TestCorruption(t *testing.T) {
	h, m := corruptFixture(t)
	lv := levels(t, h)
	if len(lv[1]) == 0 || len(lv[0]) < 10 {
		t.Fatalf("fixture too small: %v", lv)
	}
	leaf := lv[0][len(lv[0])/2]
	orig := append([]byte(nil), h.p.dev[leaf]...)
	restore := func() { h.p.dev[leaf] = append([]byte(nil), orig...) }

	expectCorrupt := func(name string, cfg Config) {
		t.Helper()
		err := readAll(h, cfg, m)
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s: got %v, want ErrCorrupt", name, err)
		}
		tr, err := Open(h.p, nil, cfg, h.durable)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%s: Open: %v", name, err)
			}
			return
		}
		errs := tr.Check(nil)
		if len(errs) == 0 {
			t.Fatalf("%s: Check found nothing", name)
		}
		for _, e := range errs {
			if !errors.Is(e, ErrCorrupt) {
				t.Fatalf("%s: Check error %v does not wrap ErrCorrupt", name, e)
			}
		}
	}

	// A flipped bit anywhere in the block: header fields, entries, padding.
	for _, off := range []int{0, offVersion, offLevel, offCount, offUsed, offCRC, offOwner, offSelf, offUUID, 60, 64, 65, 70, 500, 2000, 4095} {
		h.p.dev[leaf][off] ^= 0x10
		expectCorrupt(fmt.Sprintf("flip at %d", off), h.cfg)
		restore()
	}
	// Corrupted but with a valid checksum: the parser must still catch it.
	for _, off := range []int{offCount, offUsed, offLevel, 64, 65, 66} {
		h.p.dev[leaf][off] ^= 0x40
		binary.LittleEndian.PutUint32(h.p.dev[leaf][offCRC:], nodeCRC(h.p.dev[leaf]))
		expectCorrupt(fmt.Sprintf("checksummed flip at %d", off), h.cfg)
		restore()
	}
	// Wrong owner and wrong uuid: every node is rejected, the root first.
	other := h.cfg
	other.Owner++
	expectCorrupt("wrong owner", other)
	other = h.cfg
	other.UUID[3]++
	expectCorrupt("wrong uuid", other)
	// Wrong self block: another leaf's valid image at this block.
	h.p.dev[leaf] = append([]byte(nil), h.p.dev[lv[0][0]]...)
	expectCorrupt("wrong self block", h.cfg)
	restore()
	if err := readAll(h, h.cfg, m); err != nil {
		t.Fatalf("restored: %v", err)
	}

	// Check reports every problem, not just the first, and visits the bad blocks.
	h.p.dev[lv[0][1]][100] ^= 1
	h.p.dev[lv[0][5]][100] ^= 1
	tr, err := Open(h.p, nil, h.cfg, h.durable)
	if err != nil {
		t.Fatal(err)
	}
	visited := 0
	if errs := tr.Check(func(uint64, int) { visited++ }); len(errs) != 2 {
		t.Fatalf("Check found %d problems, want 2: %v", len(errs), errs)
	}
	if visited != len(lv[0])+len(lv[1])+len(lv[2])+len(lv[3]) {
		t.Fatalf("Check visited %d blocks", visited)
	}
}

// TestCorruptStructure builds checksummed nodes whose contents disagree with
// their parent (key outside the separator range, wrong level, a block
// referenced twice): Check and reads report ErrCorrupt.
func TestCorruptStructure(t *testing.T) {
	h, m := corruptFixture(t)
	lv := levels(t, h)
	cfg := h.cfg
	rewrite := func(blk uint64, f func(n *node)) {
		d, err := decode(append([]byte(nil), h.p.dev[blk]...), blk, &cfg, -1)
		if err != nil {
			t.Fatal(err)
		}
		n := d.clone(blk) // open form, to edit
		f(n)
		n.size = n.computeSize()
		buf := make([]byte, cfg.NodeSize)
		encode(n, &cfg, buf)
		h.p.dev[blk] = buf
	}
	check := func(name string, wantRead bool) {
		t.Helper()
		tr, err := Open(h.p, nil, cfg, h.durable)
		if err != nil {
			t.Fatal(err)
		}
		errs := tr.Check(nil)
		if len(errs) == 0 || !errors.Is(errs[0], ErrCorrupt) {
			t.Fatalf("%s: Check: %v", name, errs)
		}
		if err := readAll(h, cfg, m); wantRead && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s: read: %v", name, err)
		}
	}
	save := func(blk uint64) func() {
		b := append([]byte(nil), h.p.dev[blk]...)
		return func() { h.p.dev[blk] = b }
	}

	// A leaf key that belongs in the next leaf (order across nodes).
	leaf := lv[0][3]
	undo := save(leaf)
	rewrite(leaf, func(n *node) { n.keys[len(n.keys)-1] = []byte("key999999") })
	check("key beyond separator", false)
	undo()

	// An internal node pointing twice at the same child.
	in := lv[1][0]
	undo = save(in)
	rewrite(in, func(n *node) { n.kids[1] = n.kids[0] })
	check("child referenced twice", false)
	undo()

	// A child of the wrong level: a leaf rewritten as an internal node.
	undo = save(leaf)
	rewrite(leaf, func(n *node) {
		n.level, n.kids, n.keys, n.vals = 1, []uint64{lv[0][0], lv[0][1]}, n.keys[:1], nil
	})
	check("child of wrong level", true)
	undo()
}

// TestCachePressure runs 200k entries through a 64 KiB cache (16 nodes).
func TestCachePressure(t *testing.T) {
	n := 200000
	if testing.Short() {
		n = 30000
	}
	h := newHarness(t, 4096, 64<<10)
	key := func(i int) []byte { return binary.BigEndian.AppendUint64(nil, uint64(i)*0x9E3779B97F4A7C15) }
	val := func(i int) []byte { return binary.LittleEndian.AppendUint64(nil, uint64(i)) }
	for i := range n {
		if err := h.tr.Put(key(i), val(i)); err != nil {
			t.Fatal(err)
		}
		if i%20000 == 19999 {
			h.checkpoint()
		}
	}
	h.checkpoint()
	r := rand.New(rand.NewPCG(3, 4))
	for range n / 10 {
		i := r.IntN(n)
		v, ok, err := h.tr.Get(key(i))
		if err != nil || !ok || binary.LittleEndian.Uint64(v) != uint64(i) {
			t.Fatalf("Get %d: %v %v", i, ok, err)
		}
	}
	// Delete the odd ones with the cache still tiny.
	for i := 1; i < n; i += 2 {
		if ok, err := h.tr.Delete(key(i)); !ok || err != nil {
			t.Fatalf("Delete %d: %v %v", i, ok, err)
		}
	}
	h.checkpoint()
	seen := 0
	err := h.tr.Ascend(nil, func(k, v []byte) bool {
		i := int(binary.LittleEndian.Uint64(v))
		if i%2 != 0 || string(k) != string(key(i)) {
			t.Errorf("unexpected entry %d", i)
			return false
		}
		seen++
		return true
	})
	if err != nil || seen != n/2 {
		t.Fatalf("Ascend: %d entries, %v", seen, err)
	}
	hits, misses := h.c.Metrics()
	if misses == 0 || h.p.reads == 0 {
		t.Fatalf("cache never missed (hits %d misses %d reads %d): not under pressure", hits, misses, h.p.reads)
	}
	t.Logf("hits %d misses %d device reads %d", hits, misses, h.p.reads)
	h.checkLive()
}

// TestTxReserve: after Reserve, Delete+Put in one Update succeed with Alloc
// failing, and without Reserve the same Update fails cleanly.
func TestTxReserve(t *testing.T) {
	h, m := corruptFixture(t)
	merge := func(tx *Tx, reserve bool) error {
		if reserve {
			if err := tx.Reserve(2); err != nil {
				return err
			}
		}
		h.p.failIn, h.p.failAll = 1, true
		defer func() { h.p.failIn, h.p.failAll = 0, false }()
		if _, err := tx.Delete([]byte("key000100")); err != nil {
			return err
		}
		return tx.Put([]byte("key000099"), []byte("merged"))
	}
	// Without a reservation the Delete already fails (clean path): nothing changed.
	if err := h.tr.Update(func(tx *Tx) error { return merge(tx, false) }); !errors.Is(err, errNoSpace) {
		t.Fatalf("unreserved: %v", err)
	}
	compare(t, h.tr, m)
	if err := h.tr.Update(func(tx *Tx) error { return merge(tx, true) }); err != nil {
		t.Fatalf("reserved: %v", err)
	}
	delete(m, "key000100")
	m["key000099"] = "merged"
	compare(t, h.tr, m)
	h.checkLive()
	h.checkpoint()
}
