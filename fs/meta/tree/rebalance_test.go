package tree

import (
	"fmt"
	"testing"
)

// handTree builds, in dirty nodes, a level-2 tree whose left level-1 child
// has one leaf and whose right one is nearly full of 300-byte separators:
// merging them cannot fit, so rebalancing must redistribute internal
// entries through the root's separator.
func handTree(t *testing.T) (*harness, model, *node, *node, *node) {
	h := newHarness(t, 4096, 1<<20)
	tr := h.tr
	m := model{}
	key := func(i int) []byte { return fmt.Appendf(nil, "%0290d%010d", 0, i) }
	alloc := func() uint64 {
		b, err := h.p.Alloc(0)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	leaf := func(from, to int) *node {
		n := &node{blk: alloc(), owner: h.cfg.Owner}
		for i := from; i < to; i++ {
			n.keys = append(n.keys, key(i))
			n.vals = append(n.vals, []byte("v"))
			m[string(key(i))] = "v"
		}
		n.size = n.computeSize()
		tr.dirty[n.blk] = n
		return n
	}
	inner := func(level int, kids []*node, seps [][]byte) *node {
		n := &node{blk: alloc(), owner: h.cfg.Owner, level: level, keys: seps}
		for _, k := range kids {
			n.kids = append(n.kids, k.blk)
		}
		n.size = n.computeSize()
		tr.dirty[n.blk] = n
		return n
	}
	a := inner(1, []*node{leaf(0, 3)}, nil)
	var bk []*node
	var bs [][]byte
	for j := range 13 {
		bk = append(bk, leaf(10+10*j, 13+10*j))
		if j > 0 {
			bs = append(bs, key(10+10*j))
		}
	}
	b := inner(1, bk, bs)
	root := inner(2, []*node{a, b}, [][]byte{key(10)})
	tr.root = root.blk
	if a.size-hdrSize >= tr.minFill || a.size+b.size-hdrSize+len(key(10)) <= h.cfg.NodeSize {
		t.Fatalf("fixture not underfull/unmergeable: %d %d", a.size, b.size)
	}
	h.checkLive()
	return h, m, root, a, b
}

func TestRebalanceInternal(t *testing.T) {
	h, m, root, a, b := handTree(t)
	if !h.tr.rebalance(root, 0, a, b, 1) {
		t.Fatal("rebalance refused")
	}
	if len(a.kids) < 4 || len(b.kids) < 4 {
		t.Fatalf("uneven: %d and %d children", len(a.kids), len(b.kids))
	}
	h.checkLive()
	compare(t, h.tr, m)
	h.checkpoint()
}

// TestRebalanceInternalClean is the same with the full sibling clean: it is
// copied first, and with Alloc failing the tree is left as it was.
func TestRebalanceInternalClean(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprint("fail=", fail), func(t *testing.T) {
			h, m, _, _, _ := handTree(t)
			h.checkpoint()
			tr := h.tr
			root, err := tr.load(tr.root, -1)
			if err != nil {
				t.Fatal(err)
			}
			// Make the path to the left child dirty, as Delete would.
			path := []frame{{root, 0}}
			a, err := tr.load(root.kid(0), 1)
			if err != nil {
				t.Fatal(err)
			}
			b, err := tr.load(root.kid(1), 1)
			if err != nil {
				t.Fatal(err)
			}
			path = append(path, frame{a, 0})
			if err := tr.reserve(tr.cleanCount(path), 0); err != nil {
				t.Fatal(err)
			}
			tr.cowPath(path)
			if fail {
				h.p.failIn, h.p.failAll = 1, true
			}
			ok := tr.rebalance(path[0].n, 0, path[1].n, b, 1)
			h.p.failIn, h.p.failAll = 0, false
			if ok == fail {
				t.Fatalf("rebalance = %v with failing alloc %v", ok, fail)
			}
			h.checkLive()
			compare(t, tr, m)
			h.checkpoint()
		})
	}
}
