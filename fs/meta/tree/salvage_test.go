package tree

import (
	"bytes"
	"fmt"
	"testing"
)

// Salvage of a tree with one damaged node returns every entry outside the
// damaged subtree, exactly as last written, and names the range lost; the
// stale copies of nodes that copy-on-write left on the device (with valid
// checksums) never come back.
func TestSalvage(t *testing.T) {
	const ns = 4096
	h := newHarness(t, ns, 1<<20)
	m := model{}
	put := func(gen int) {
		for i := 0; i < 8000; i++ {
			k := []byte(fmt.Sprintf("key%06d", i))
			v := []byte(fmt.Sprintf("gen%d-%d-%0200d", gen, i, i))
			if err := h.tr.Put(k, v); err != nil {
				t.Fatal(err)
			}
			m[string(k)] = string(v)
		}
		h.checkpoint()
	}
	put(1)
	put(2) // every node copied: the generation-1 nodes stay on the device
	var leaves, inner []uint64
	if errs := h.tr.Check(func(blk uint64, level int) {
		if level == 0 {
			leaves = append(leaves, blk)
		} else if blk != h.tr.Root() {
			inner = append(inner, blk)
		}
	}); len(errs) != 0 {
		t.Fatal(errs)
	}
	if len(leaves) < 10 || len(inner) == 0 {
		t.Fatalf("tree too small: %d leaves, %d inner nodes", len(leaves), len(inner))
	}
	cases := map[string]uint64{"leaf": leaves[len(leaves)/2], "inner node": inner[0], "root": h.tr.Root()}
	for name, blk := range cases {
		t.Run(name, func(t *testing.T) {
			saved := bytes.Clone(h.p.dev[blk])
			defer func() { h.p.dev[blk] = saved }()
			h.p.dev[blk][ns/2] ^= 0x5a
			c, err := NewCache(1 << 20)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if name == "root" {
				if _, err := Open(h.p, c, h.cfg, h.durable); err == nil {
					t.Fatal("Open of a damaged root succeeded")
				}
			}
			tr, err := OpenDamaged(h.p, c, h.cfg, h.durable)
			if err != nil {
				t.Fatal(err)
			}
			got := model{}
			var visited int
			lost := tr.Salvage(func(k, v []byte) {
				if _, dup := got[string(k)]; dup {
					t.Fatalf("key %q salvaged twice", k)
				}
				got[string(k)] = string(v)
			}, func(uint64) { visited++ })
			if len(lost) != 1 {
				t.Fatalf("%d lost ranges, want 1: %v", len(lost), lost)
			}
			for k, v := range got {
				if m[k] != v {
					t.Fatalf("salvaged %q = %q, last written %q", k, v, m[k])
				}
			}
			missing := len(m) - len(got)
			switch {
			case name == "root" && len(got) != 0:
				t.Fatalf("salvaged %d entries through a damaged root", len(got))
			case name != "root" && (missing == 0 || len(got) == 0):
				t.Fatalf("salvaged %d of %d entries", len(got), len(m))
			}
			// The entries lost are exactly those in the damaged subtree: a
			// fresh tree built from the salvage checks clean.
			h2 := newHarness(t, ns, 1<<20)
			for _, k := range got.sortedKeys() {
				if err := h2.tr.Put([]byte(k), []byte(got[k])); err != nil {
					t.Fatal(err)
				}
			}
			h2.checkpoint()
			compare(t, h2.tr, got)
			if visited == 0 {
				t.Fatal("visit heard of no block")
			}
		})
	}
}
