package tree

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// ErrCorrupt marks a node that failed validation.
var ErrCorrupt = errors.New("corrupt tree node")

// ErrInvalid marks a bad argument or configuration (not device corruption).
var ErrInvalid = errors.New("invalid tree argument")

const (
	nodeMagic   = 0x52544653
	nodeVersion = 1
	hdrSize     = 64
	maxLevel    = 32 // far above any real height; bounds descent on bad images

	offMagic   = 0
	offVersion = 4
	offLevel   = 5
	offCount   = 6
	offUsed    = 8
	offCRC     = 12
	offOwner   = 16
	offSelf    = 24
	offUUID    = 32

	leafEntryHdr  = 4  // u16 klen, u16 vlen
	innerEntryHdr = 10 // u64 child, u16 klen

	minNodeSize = 4096
	maxNodeSize = 65536
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// MaxEntry is the largest len(key)+len(value) a tree with this node size
// accepts. A quarter of the entry area minus the larger per-entry overhead,
// so that any node (leaf or internal) holds at least four maximal entries.
// 4096-byte nodes: 998.
func MaxEntry(nodeSize int) int {
	return (nodeSize-hdrSize)/4 - innerEntryHdr
}

// node is the decoded form of one block, in one of two forms:
//
//   - compact (raw != nil): a node read from the device or published by
//     Written. It keeps the block image and the offset of each entry, so its
//     memory is about the node size (what the Cache charges) and it holds
//     few pointers for the GC. Immutable; shared between goroutines.
//   - open (raw == nil): keys, vals and kids as slices, for nodes being
//     changed (dirty, under the tree's write lock) and snapshotted ones.
//
// Code that may see either form reads through key, val, kid and the counts.
type node struct {
	blk   uint64
	owner uint64 // guards against a stale cache entry of another tree
	level int
	size  int // encoded bytes including the header

	// Open form.
	keys [][]byte // leaf: one per entry; internal: separators, len(kids)-1
	vals [][]byte // leaf only
	kids []uint64 // internal only
	// lastIns is 1 + the index of the last entry inserted into this dirty
	// leaf (0: none): an insert right after it is sequential, and the leaf
	// then splits at the insertion point instead of the middle.
	lastIns int

	// Compact form.
	raw  []byte   // the block image
	offs []uint16 // offset of each encoded entry (children for internal nodes)
	// pfx[i] is keyPrefix(key(i)): binary search stays in one small array
	// instead of chasing a pointer per comparison.
	pfx []uint64
}

// nkeys is the number of keys (entries of a leaf, separators of an internal node).
func (n *node) nkeys() int {
	if n.raw == nil {
		return len(n.keys)
	}
	if n.level == 0 {
		return len(n.offs)
	}
	return len(n.offs) - 1
}

// nkids is the number of children (0 for a leaf).
func (n *node) nkids() int {
	if n.level == 0 {
		return 0
	}
	if n.raw == nil {
		return len(n.kids)
	}
	return len(n.offs)
}

func (n *node) key(i int) []byte {
	if n.raw == nil {
		return n.keys[i]
	}
	if n.level == 0 {
		o := int(n.offs[i])
		kl := int(binary.LittleEndian.Uint16(n.raw[o:]))
		o += leafEntryHdr
		return n.raw[o : o+kl : o+kl]
	}
	o := int(n.offs[i+1])
	kl := int(binary.LittleEndian.Uint16(n.raw[o+8:]))
	o += innerEntryHdr
	return n.raw[o : o+kl : o+kl]
}

func (n *node) val(i int) []byte {
	if n.raw == nil {
		return n.vals[i]
	}
	o := int(n.offs[i])
	kl := int(binary.LittleEndian.Uint16(n.raw[o:]))
	vl := int(binary.LittleEndian.Uint16(n.raw[o+2:]))
	o += leafEntryHdr + kl
	return n.raw[o : o+vl : o+vl]
}

func (n *node) kid(i int) uint64 {
	if n.raw == nil {
		return n.kids[i]
	}
	return binary.LittleEndian.Uint64(n.raw[n.offs[i]:])
}

// keyPrefix is k's first 8 bytes, zero-padded, big-endian. If two prefixes
// differ, the keys compare the same way.
func keyPrefix(k []byte) uint64 {
	if len(k) >= 8 {
		return binary.BigEndian.Uint64(k)
	}
	var b [8]byte
	copy(b[:], k)
	return binary.BigEndian.Uint64(b[:])
}

// lowerBound is the first index i with keys[i] >= key (a leaf's position).
func (n *node) lowerBound(key []byte) int {
	if n.raw == nil {
		return lowerBound(n.keys, key)
	}
	kp := keyPrefix(key)
	lo, hi := 0, len(n.pfx)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		p := n.pfx[m]
		if p < kp || (p == kp && bytes.Compare(n.key(m), key) < 0) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// upperBound is the first index i with keys[i] > key (an internal node's child).
func (n *node) upperBound(key []byte) int {
	if n.raw == nil {
		return upperBound(n.keys, key)
	}
	kp := keyPrefix(key)
	lo, hi := 0, len(n.pfx)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		p := n.pfx[m]
		if p < kp || (p == kp && bytes.Compare(n.key(m), key) <= 0) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

func (n *node) leaf() bool { return n.level == 0 }

// count is the number of entries as encoded (children for internal nodes).
func (n *node) count() int {
	if n.leaf() {
		return n.nkeys()
	}
	return n.nkids()
}

// entrySize is the encoded size of entry j as counted by count().
func (n *node) entrySize(j int) int {
	if n.leaf() {
		return leafEntryHdr + len(n.key(j)) + len(n.val(j))
	}
	if j == 0 {
		return innerEntryHdr
	}
	return innerEntryHdr + len(n.key(j-1))
}

func (n *node) computeSize() int {
	s := hdrSize
	for j := range n.count() {
		s += n.entrySize(j)
	}
	return s
}

// clone returns a private, modifiable node in open form under a new block
// number. The slices get their own backing arrays so that appends never
// reach the (possibly cached and shared) original; key and value bytes are
// shared, and no entry of the copy is owned (see newEntry).
func (n *node) clone(blk uint64) *node {
	c := &node{blk: blk, owner: n.owner, level: n.level, size: n.size}
	nk := n.nkeys()
	c.keys = make([][]byte, nk, nk+2)
	for i := range nk {
		c.keys[i] = n.key(i)
	}
	if n.leaf() {
		c.vals = make([][]byte, nk, nk+2)
		for i := range nk {
			c.vals[i] = disown(n.val(i)) // n's bytes are shared, never written
		}
	} else {
		c.kids = make([]uint64, n.nkids(), n.nkids()+2)
		for i := range c.kids {
			c.kids[i] = n.kid(i)
		}
	}
	return c
}

// lowerBound is the first index i with keys[i] >= key.
func lowerBound(keys [][]byte, key []byte) int {
	lo, hi := 0, len(keys)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if bytes.Compare(keys[m], key) < 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// upperBound is the first index i with keys[i] > key; for an internal node it
// is the child whose range holds key.
func upperBound(keys [][]byte, key []byte) int {
	lo, hi := 0, len(keys)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if bytes.Compare(keys[m], key) <= 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

func insertAt[T any](s []T, i int, v T) []T {
	var zero T
	s = append(s, zero)
	copy(s[i+1:], s[i:])
	s[i] = v
	return s
}

func removeAt[T any](s []T, i int) []T {
	copy(s[i:], s[i+1:])
	var zero T
	s[len(s)-1] = zero // drop the reference for the GC
	return s[:len(s)-1]
}

// encode writes n into buf (len == node size), zero-filling the tail.
func encode(n *node, cfg *Config, buf []byte) {
	le := binary.LittleEndian
	le.PutUint32(buf[offMagic:], nodeMagic)
	buf[offVersion] = nodeVersion
	buf[offLevel] = byte(n.level)
	le.PutUint16(buf[offCount:], uint16(n.count()))
	le.PutUint32(buf[offCRC:], 0)
	le.PutUint64(buf[offOwner:], cfg.Owner)
	le.PutUint64(buf[offSelf:], n.blk)
	copy(buf[offUUID:offUUID+16], cfg.UUID[:])
	clear(buf[offUUID+16 : hdrSize])
	p := hdrSize
	if n.leaf() {
		for i := range n.nkeys() {
			k, v := n.key(i), n.val(i)
			le.PutUint16(buf[p:], uint16(len(k)))
			le.PutUint16(buf[p+2:], uint16(len(v)))
			p += leafEntryHdr
			p += copy(buf[p:], k)
			p += copy(buf[p:], v)
		}
	} else {
		for i := range n.nkids() {
			le.PutUint64(buf[p:], n.kid(i))
			var k []byte
			if i > 0 {
				k = n.key(i - 1)
			}
			le.PutUint16(buf[p+8:], uint16(len(k)))
			p += innerEntryHdr
			p += copy(buf[p:], k)
		}
	}
	le.PutUint32(buf[offUsed:], uint32(p))
	clear(buf[p:])
	le.PutUint32(buf[offCRC:], nodeCRC(buf))
}

func nodeCRC(buf []byte) uint32 {
	var zero [4]byte
	c := crc32.Update(0, castagnoli, buf[:offCRC])
	c = crc32.Update(c, castagnoli, zero[:])
	return crc32.Update(c, castagnoli, buf[offCRC+4:])
}

// decode validates buf as the node at block blk and returns it. wantLevel < 0
// accepts any level (the root). The returned node aliases buf, which the
// caller must not reuse.
func decode(buf []byte, blk uint64, cfg *Config, wantLevel int) (*node, error) {
	le := binary.LittleEndian
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: block %d (owner %d): %s", ErrCorrupt, blk, cfg.Owner, fmt.Sprintf(format, args...))
	}
	if len(buf) != cfg.NodeSize {
		return nil, bad("node is %d bytes, want %d", len(buf), cfg.NodeSize)
	}
	if m := le.Uint32(buf[offMagic:]); m != nodeMagic {
		return nil, bad("bad magic %#x", m)
	}
	if v := buf[offVersion]; v != nodeVersion {
		return nil, bad("unknown version %d", v)
	}
	if got, want := le.Uint32(buf[offCRC:]), nodeCRC(buf); got != want {
		return nil, bad("checksum %#x, computed %#x", got, want)
	}
	if o := le.Uint64(buf[offOwner:]); o != cfg.Owner {
		return nil, bad("owner %d, want %d", o, cfg.Owner)
	}
	if s := le.Uint64(buf[offSelf:]); s != blk {
		return nil, bad("self block %d", s)
	}
	if !bytes.Equal(buf[offUUID:offUUID+16], cfg.UUID[:]) {
		return nil, bad("filesystem uuid %x differs", buf[offUUID:offUUID+16])
	}
	level := int(buf[offLevel])
	if level > maxLevel || (wantLevel >= 0 && level != wantLevel) {
		return nil, bad("level %d, want %d", level, wantLevel)
	}
	count := int(le.Uint16(buf[offCount:]))
	used := int(le.Uint32(buf[offUsed:]))
	if used < hdrSize || used > len(buf) {
		return nil, bad("used %d out of range", used)
	}
	maxE := MaxEntry(cfg.NodeSize)
	n := &node{blk: blk, owner: cfg.Owner, level: level, size: used, raw: buf}
	n.offs = make([]uint16, count)
	p := hdrSize
	var prev []byte
	if level == 0 {
		for i := range count {
			if p+leafEntryHdr > used {
				return nil, bad("entry %d header past end", i)
			}
			kl, vl := int(le.Uint16(buf[p:])), int(le.Uint16(buf[p+2:]))
			if kl+vl > maxE {
				return nil, bad("entry %d is %d bytes, max %d", i, kl+vl, maxE)
			}
			if p+leafEntryHdr+kl+vl > used {
				return nil, bad("entry %d past end", i)
			}
			n.offs[i] = uint16(p)
			k := buf[p+leafEntryHdr : p+leafEntryHdr+kl]
			if i > 0 && bytes.Compare(prev, k) >= 0 {
				return nil, bad("key %d out of order", i)
			}
			prev = k
			p += leafEntryHdr + kl + vl
		}
	} else {
		if count == 0 {
			return nil, bad("internal node without children")
		}
		for i := range count {
			if p+innerEntryHdr > used {
				return nil, bad("entry %d header past end", i)
			}
			c := le.Uint64(buf[p:])
			kl := int(le.Uint16(buf[p+8:]))
			if c == 0 || c == blk {
				return nil, bad("child %d is block %d", i, c)
			}
			if i == 0 && kl != 0 {
				return nil, bad("first separator not empty")
			}
			if kl > maxE {
				return nil, bad("separator %d is %d bytes, max %d", i, kl, maxE)
			}
			if p+innerEntryHdr+kl > used {
				return nil, bad("separator %d past end", i)
			}
			n.offs[i] = uint16(p)
			k := buf[p+innerEntryHdr : p+innerEntryHdr+kl]
			if i > 1 && bytes.Compare(prev, k) >= 0 {
				return nil, bad("separator %d out of order", i)
			}
			prev = k
			p += innerEntryHdr + kl
		}
	}
	if p != used {
		return nil, bad("entries end at %d, header says %d", p, used)
	}
	if nk := n.nkeys(); nk > 0 {
		n.pfx = make([]uint64, nk)
		for i := range nk {
			n.pfx[i] = keyPrefix(n.key(i))
		}
	}
	return n, nil
}
