package tree

import (
	"math/rand/v2"
	"testing"
)

// TestSharedCacheTwoTrees runs two trees (different owners) on one pager and
// one tiny cache, so blocks freed by one tree are soon reused by the other:
// a stale cached node of a block's previous life must never be returned.
func TestSharedCacheTwoTrees(t *testing.T) {
	p := newMemPager(4096)
	c, err := NewCache(64 << 10)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var trees [2]*Tree
	var models [2]model
	var cfgs [2]Config
	for i := range trees {
		cfgs[i] = testCfg(4096)
		cfgs[i].Owner = uint64(i + 1)
		if trees[i], err = Open(p, c, cfgs[i], 0); err != nil {
			t.Fatal(err)
		}
		models[i] = model{}
	}
	r := rand.New(rand.NewPCG(21, 22))
	checkpoint := func() {
		p.mu.Lock()
		freed := p.pending
		p.pending = nil
		p.mu.Unlock()
		var roots [2]uint64
		for i, tr := range trees {
			var writes []BlockWrite
			roots[i], writes = tr.Snapshot()
			p.mu.Lock()
			for _, w := range writes {
				p.dev[w.Blk] = w.Data
			}
			p.mu.Unlock()
		}
		for _, tr := range trees {
			tr.Written()
		}
		p.mu.Lock()
		p.reusable = append(append(p.reusable, freed...), p.pending...)
		p.pending = nil
		p.mu.Unlock()
		for i := range trees {
			fresh, err := Open(p, nil, cfgs[i], roots[i])
			if err != nil {
				t.Fatal(err)
			}
			compare(t, fresh, models[i])
		}
	}
	for op := range 20000 {
		i := r.IntN(2)
		k := randKey(r, 3000)
		if r.IntN(3) != 0 {
			v := randVal(r, 200)
			if err := trees[i].Put(k, v); err != nil {
				t.Fatal(err)
			}
			models[i][string(k)] = string(v)
		} else {
			if _, err := trees[i].Delete(k); err != nil {
				t.Fatal(err)
			}
			delete(models[i], string(k))
		}
		if op%500 == 499 {
			checkpoint()
			for i := range trees {
				compare(t, trees[i], models[i]) // through the shared cache
			}
		}
	}
	p.check(t)
}
