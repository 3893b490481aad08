package tree

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
)

var errNoSpace = errors.New("fake pager: no space")

// memPager is a fake device plus allocator with the deferred-reuse rule of
// the real pager: a freed block becomes reusable only after a checkpoint
// taken after the free is durable. It records every violation it sees.
type memPager struct {
	mu       sync.Mutex
	ns       int
	dev      map[uint64][]byte // durable block contents
	next     uint64            // next never-used block
	live     map[uint64]bool   // allocated and not freed
	pending  []uint64          // freed since the last checkpoint began
	reusable []uint64          // free for reuse (LIFO, to reuse eagerly)
	failIn   int               // >0: the failIn-th Alloc from now fails; then keeps failing if failAll
	failAll  bool
	allocs   int
	reads    int
	problems []string
}

func newMemPager(ns int) *memPager {
	return &memPager{ns: ns, dev: make(map[uint64][]byte), next: 100, live: make(map[uint64]bool)}
}

func (p *memPager) Read(blk uint64, buf []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reads++
	d, ok := p.dev[blk]
	if !ok {
		return fmt.Errorf("fake pager: block %d never written", blk)
	}
	copy(buf, d)
	return nil
}

func (p *memPager) Alloc(hint uint64) (uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failIn > 0 {
		p.failIn--
		if p.failIn == 0 {
			if p.failAll {
				p.failIn = 1
			}
			return 0, fmt.Errorf("alloc near %d: %w", hint, errNoSpace)
		}
	}
	p.allocs++
	var b uint64
	if n := len(p.reusable); n > 0 {
		b, p.reusable = p.reusable[n-1], p.reusable[:n-1]
	} else {
		b = p.next
		p.next++
	}
	if p.live[b] {
		p.problems = append(p.problems, fmt.Sprintf("allocated live block %d", b))
	}
	p.live[b] = true
	return b, nil
}

func (p *memPager) Free(blk uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.live[blk] {
		p.problems = append(p.problems, fmt.Sprintf("free of block %d that is not allocated", blk))
		return
	}
	delete(p.live, blk)
	p.pending = append(p.pending, blk)
}

func (p *memPager) liveSet() map[uint64]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := make(map[uint64]bool, len(p.live))
	for b := range p.live {
		m[b] = true
	}
	return m
}

func (p *memPager) check(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.problems {
		t.Error(s)
	}
	p.problems = nil
}

func testCfg(ns int) Config {
	return Config{NodeSize: ns, Owner: 7, UUID: [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}}
}

// harness ties a tree to its pager and the last durable checkpoint.
type harness struct {
	t        *testing.T
	p        *memPager
	c        *Cache
	cfg      Config
	tr       *Tree
	durable  uint64          // root of the last durable checkpoint
	durReach map[uint64]bool // blocks reachable from it
}

func newHarness(t *testing.T, ns int, cacheBytes int64) *harness {
	t.Helper()
	c, err := NewCache(cacheBytes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	h := &harness{t: t, p: newMemPager(ns), c: c, cfg: testCfg(ns), durReach: map[uint64]bool{}}
	if h.tr, err = Open(h.p, c, h.cfg, 0); err != nil {
		t.Fatal(err)
	}
	return h
}

// reachable lists the blocks of the durable tree at root, read from the
// device only (what a crash would leave).
func (h *harness) reachable(root uint64) map[uint64]bool {
	h.t.Helper()
	set := map[uint64]bool{}
	if root == 0 {
		return set
	}
	fresh, err := Open(h.p, nil, h.cfg, root)
	if err != nil {
		h.t.Fatalf("open durable root %d: %v", root, err)
	}
	if err := fresh.Blocks(func(b uint64) { set[b] = true }); err != nil {
		h.t.Fatalf("blocks of durable root %d: %v", root, err)
	}
	return set
}

// pendingCP is a snapshot whose writes are not on the device yet.
type pendingCP struct {
	root        uint64
	writes      []BlockWrite
	freedBefore []uint64        // frees reported before the snapshot
	live        map[uint64]bool // allocated at snapshot time
}

// snapshot runs Snapshot and checks COW safety: no write lands on a block of
// the durable checkpoint, and every write is to an allocated block.
func (h *harness) snapshot() *pendingCP {
	t := h.t
	t.Helper()
	h.p.mu.Lock()
	freedBefore := slices.Clone(h.p.pending)
	h.p.pending = nil
	h.p.mu.Unlock()
	root, writes := h.tr.Snapshot()
	if h.tr.Dirty() != 0 {
		t.Fatalf("dirty %d after snapshot", h.tr.Dirty())
	}
	// Spares freed by Snapshot also count as freed before it.
	h.p.mu.Lock()
	freedBefore = append(freedBefore, h.p.pending...)
	h.p.pending = nil
	h.p.mu.Unlock()
	live := h.p.liveSet()
	for _, w := range writes {
		if h.durReach[w.Blk] {
			t.Fatalf("snapshot overwrites block %d of the durable checkpoint", w.Blk)
		}
		if !live[w.Blk] {
			t.Fatalf("snapshot writes block %d that is not allocated", w.Blk)
		}
		if len(w.Data) != h.cfg.NodeSize {
			t.Fatalf("write of %d bytes", len(w.Data))
		}
	}
	return &pendingCP{root: root, writes: writes, freedBefore: freedBefore, live: live}
}

// finish writes the snapshot's blocks to the fake device, calls Written,
// checks the durable tree references exactly the blocks allocated at
// snapshot time (no leak, nothing freed), and makes the frees reported
// before the snapshot reusable.
func (h *harness) finish(cp *pendingCP) {
	t := h.t
	t.Helper()
	h.p.mu.Lock()
	for _, w := range cp.writes {
		h.p.dev[w.Blk] = bytes.Clone(w.Data)
	}
	h.p.mu.Unlock()
	h.tr.Written()
	reach := h.reachable(cp.root)
	for _, b := range cp.freedBefore {
		if reach[b] {
			t.Fatalf("checkpoint references block %d freed before it", b)
		}
	}
	if len(reach) != len(cp.live) {
		t.Fatalf("checkpoint references %d blocks, %d allocated", len(reach), len(cp.live))
	}
	for b := range reach {
		if !cp.live[b] {
			t.Fatalf("checkpoint references unallocated block %d", b)
		}
	}
	h.durable, h.durReach = cp.root, reach
	h.p.mu.Lock()
	h.p.reusable = append(h.p.reusable, cp.freedBefore...)
	h.p.mu.Unlock()
	h.p.check(t)
}

func (h *harness) checkpoint() { h.finish(h.snapshot()) }

// checkLive checks the in-memory invariant: allocated == reachable from the
// in-memory root plus spares, and Check finds nothing.
func (h *harness) checkLive() {
	t := h.t
	t.Helper()
	reach := map[uint64]bool{}
	if errs := h.tr.Check(func(b uint64, _ int) { reach[b] = true }); len(errs) > 0 {
		t.Fatalf("Check: %v", errors.Join(errs...))
	}
	h.tr.mu.RLock()
	for _, b := range h.tr.spare {
		reach[b] = true
	}
	h.tr.mu.RUnlock()
	live := h.p.liveSet()
	if len(reach) != len(live) {
		t.Fatalf("tree reaches %d blocks (with spares), %d allocated", len(reach), len(live))
	}
	for b := range reach {
		if !live[b] {
			t.Fatalf("tree reaches unallocated block %d", b)
		}
	}
	h.p.check(t)
}

// model is the reference: a sorted map.
type model map[string]string

func (m model) sortedKeys() []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// compare checks tr against m through Ascend and Get.
func compare(t *testing.T, tr *Tree, m model) {
	t.Helper()
	ks := m.sortedKeys()
	i := 0
	err := tr.Ascend(nil, func(k, v []byte) bool {
		if i >= len(ks) {
			t.Errorf("extra entry %q", k)
			return false
		}
		if string(k) != ks[i] || string(v) != m[ks[i]] {
			t.Errorf("entry %d: got %q (%d bytes), want %q (%d bytes)", i, k, len(v), ks[i], len(m[ks[i]]))
			return false
		}
		i++
		return true
	})
	if err != nil {
		t.Fatalf("Ascend: %v", err)
	}
	if i != len(ks) && !t.Failed() {
		t.Errorf("Ascend saw %d entries, want %d", i, len(ks))
	}
	if t.Failed() {
		t.FailNow()
	}
}
