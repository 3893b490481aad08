package tree_test

import (
	"encoding/binary"
	"fmt"

	"github.com/streamfs/streamfs/fs/meta/tree"
)

// slicePager is the smallest Pager: blocks in a map, allocation by counter,
// frees ignored (a real pager reuses them after the next durable checkpoint).
type slicePager struct {
	blocks map[uint64][]byte
	next   uint64
}

func (p *slicePager) Read(blk uint64, buf []byte) error {
	b, ok := p.blocks[blk]
	if !ok {
		return fmt.Errorf("block %d not written", blk)
	}
	copy(buf, b)
	return nil
}

func (p *slicePager) Alloc(uint64) (uint64, error) { p.next++; return p.next, nil }
func (p *slicePager) Free(uint64)                  {}

// A free-space tree: key = start block, value = length; SeekLE finds the
// extent that may contain a block. A checkpoint writes the dirty nodes and
// the tree is reopened from its root.
func Example() {
	p := &slicePager{blocks: map[uint64][]byte{}, next: 1000}
	cache, err := tree.NewCache(64 << 20)
	if err != nil {
		panic(err)
	}
	defer cache.Close()
	cfg := tree.Config{NodeSize: 4096, Owner: 1, UUID: [16]byte{1}}
	t, err := tree.Open(p, cache, cfg, 0)
	if err != nil {
		panic(err)
	}
	be := binary.BigEndian
	for _, ext := range [][2]uint64{{100, 50}, {300, 10}, {500, 200}} {
		if err := t.Put(be.AppendUint64(nil, ext[0]), be.AppendUint64(nil, ext[1])); err != nil {
			panic(err)
		}
	}

	root, writes := t.Snapshot()
	for _, w := range writes {
		p.blocks[w.Blk] = w.Data
	}
	t.Written()

	t2, err := tree.Open(p, cache, cfg, root)
	if err != nil {
		panic(err)
	}
	k, v, ok, err := t2.SeekLE(be.AppendUint64(nil, 305))
	if err != nil || !ok {
		panic(err)
	}
	start, n := be.Uint64(k), be.Uint64(v)
	fmt.Printf("block 305 is in extent [%d,%d): %v\n", start, start+n, 305 < start+n)
	fmt.Println("problems:", len(t2.Check(nil)))
	// Output:
	// block 305 is in extent [300,310): true
	// problems: 0
}
