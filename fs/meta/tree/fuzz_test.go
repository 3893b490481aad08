package tree

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

const fuzzBlk = 1234

// seedNodes are real encoded nodes: leaves with short, empty, long and
// maximal entries, and internal nodes.
func seedNodes() [][]byte {
	cfg := testCfg(4096)
	maxE := MaxEntry(4096)
	var out [][]byte
	add := func(n *node) {
		n.blk, n.owner = fuzzBlk, cfg.Owner
		n.size = n.computeSize()
		buf := make([]byte, cfg.NodeSize)
		encode(n, &cfg, buf)
		out = append(out, buf)
	}
	add(&node{keys: [][]byte{[]byte("a"), []byte("b"), []byte("c")}, vals: [][]byte{[]byte("1"), nil, []byte("333")}})
	add(&node{keys: [][]byte{{}, []byte("k")}, vals: [][]byte{[]byte("empty key"), bytes.Repeat([]byte{7}, 100)}})
	big := &node{}
	for i := range 4 {
		k := fmt.Appendf(nil, "%0300d", i)
		big.keys = append(big.keys, k)
		big.vals = append(big.vals, bytes.Repeat([]byte{byte(i)}, maxE-len(k)))
	}
	add(big)
	add(&node{level: 1, kids: []uint64{10, 11, 12}, keys: [][]byte{[]byte("m"), []byte("t")}})
	add(&node{level: 3, kids: []uint64{99}, keys: [][]byte{}})
	return out
}

// TestWriteFuzzSeeds regenerates testdata/fuzz/FuzzDecodeNode when
// TREE_WRITE_FUZZ_SEEDS=1 (after a format change).
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("TREE_WRITE_FUZZ_SEEDS") != "1" {
		t.Skip("set TREE_WRITE_FUZZ_SEEDS=1 to regenerate the seed corpus")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzDecodeNode")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, b := range seedNodes() {
		// Trailing zeros are implied (the target pads to the node size).
		b = bytes.TrimRight(b, "\x00")
		data := "go test fuzz v1\n[]byte(" + strconv.Quote(string(b)) + ")\n"
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed%d", i)), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// FuzzDecodeNode feeds arbitrary blocks to the decoder: it must never panic,
// fail only with ErrCorrupt, and what it accepts must re-encode to a block
// that decodes to the same node. The checksum is fixed up on a second pass
// so mutations reach the entry parser.
func FuzzDecodeNode(f *testing.F) {
	for _, b := range seedNodes() {
		f.Add(b)
	}
	cfg := testCfg(4096)
	f.Fuzz(func(t *testing.T, data []byte) {
		buf := make([]byte, cfg.NodeSize)
		copy(buf, data)
		for pass := range 2 {
			if pass == 1 {
				binary.LittleEndian.PutUint32(buf[offCRC:], nodeCRC(buf))
			}
			n, err := decode(buf, fuzzBlk, &cfg, -1)
			if err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("error not ErrCorrupt: %v", err)
				}
				continue
			}
			if n.size != n.computeSize() || n.size > cfg.NodeSize {
				t.Fatalf("decoded size %d, entries %d", n.size, n.computeSize())
			}
			out := make([]byte, cfg.NodeSize)
			encode(n, &cfg, out)
			n2, err := decode(out, fuzzBlk, &cfg, n.level)
			if err != nil {
				t.Fatalf("re-encoded node rejected: %v", err)
			}
			if n2.level != n.level || n2.size != n.size || n2.nkeys() != n.nkeys() || n2.nkids() != n.nkids() {
				t.Fatalf("round trip changed the node")
			}
			// Through the open form too (what a copy-on-write makes).
			n3 := n.clone(fuzzBlk)
			for i := range n.nkeys() {
				if !bytes.Equal(n.key(i), n2.key(i)) || !bytes.Equal(n.key(i), n3.keys[i]) ||
					(n.leaf() && (!bytes.Equal(n.val(i), n2.val(i)) || !bytes.Equal(n.val(i), n3.vals[i]))) {
					t.Fatalf("round trip changed entry %d", i)
				}
			}
			for i := range n.nkids() {
				if n.kid(i) != n2.kid(i) || n.kid(i) != n3.kids[i] {
					t.Fatalf("round trip changed child %d", i)
				}
			}
			if n3.computeSize() != n.size {
				t.Fatalf("open form size %d, compact %d", n3.computeSize(), n.size)
			}
			// Only the used part is meaningful; encode zero-fills the rest.
			if !bytes.Equal(out[:n.size], buf[:n.size]) && pass == 0 {
				// The header's reserved bytes may differ; entries must not.
				if !bytes.Equal(out[hdrSize:n.size], buf[hdrSize:n.size]) {
					t.Fatalf("round trip changed the entry bytes")
				}
			}
		}
	})
}
