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

// node is the decoded form of one block. Clean nodes (from the device or the
// cache) are immutable and may be shared between goroutines; only nodes in
// the tree's dirty map are modified, under the tree's write lock.
type node struct {
	blk   uint64
	owner uint64 // guards against a stale cache entry of another tree
	level int
	keys  [][]byte // leaf: one per entry; internal: separators, len(kids)-1
	vals  [][]byte // leaf only
	kids  []uint64 // internal only
	size  int      // encoded bytes including the header
	// pfx[i] is keyPrefix(keys[i]), only for immutable (clean) nodes, nil
	// otherwise: binary search then stays in one small array instead of
	// chasing a pointer per comparison (about twice as fast when cold).
	pfx []uint64
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

// freeze builds pfx; the node must not change afterwards.
func (n *node) freeze() {
	if n.pfx != nil || len(n.keys) == 0 {
		return
	}
	p := make([]uint64, len(n.keys))
	for i, k := range n.keys {
		p[i] = keyPrefix(k)
	}
	n.pfx = p
}

// lowerBound is the first index i with keys[i] >= key (a leaf's position).
func (n *node) lowerBound(key []byte) int {
	if n.pfx == nil {
		return lowerBound(n.keys, key)
	}
	kp := keyPrefix(key)
	lo, hi := 0, len(n.pfx)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		p := n.pfx[m]
		if p < kp || (p == kp && bytes.Compare(n.keys[m], key) < 0) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// upperBound is the first index i with keys[i] > key (an internal node's child).
func (n *node) upperBound(key []byte) int {
	if n.pfx == nil {
		return upperBound(n.keys, key)
	}
	kp := keyPrefix(key)
	lo, hi := 0, len(n.pfx)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		p := n.pfx[m]
		if p < kp || (p == kp && bytes.Compare(n.keys[m], key) <= 0) {
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
		return len(n.keys)
	}
	return len(n.kids)
}

// entrySize is the encoded size of entry j as counted by count().
func (n *node) entrySize(j int) int {
	if n.leaf() {
		return leafEntryHdr + len(n.keys[j]) + len(n.vals[j])
	}
	if j == 0 {
		return innerEntryHdr
	}
	return innerEntryHdr + len(n.keys[j-1])
}

func (n *node) computeSize() int {
	s := hdrSize
	for j := range n.count() {
		s += n.entrySize(j)
	}
	return s
}

// clone returns a private, modifiable copy under a new block number. The
// slices get their own backing arrays so that appends never reach the
// (possibly cached and shared) original; key and value bytes are immutable
// and shared.
func (n *node) clone(blk uint64) *node {
	c := &node{blk: blk, owner: n.owner, level: n.level, size: n.size}
	c.keys = append(make([][]byte, 0, len(n.keys)+2), n.keys...)
	if n.leaf() {
		c.vals = append(make([][]byte, 0, len(n.vals)+2), n.vals...)
	} else {
		c.kids = append(make([]uint64, 0, len(n.kids)+2), n.kids...)
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
		for i, k := range n.keys {
			v := n.vals[i]
			le.PutUint16(buf[p:], uint16(len(k)))
			le.PutUint16(buf[p+2:], uint16(len(v)))
			p += leafEntryHdr
			p += copy(buf[p:], k)
			p += copy(buf[p:], v)
		}
	} else {
		for i, c := range n.kids {
			le.PutUint64(buf[p:], c)
			var k []byte
			if i > 0 {
				k = n.keys[i-1]
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
	n := &node{blk: blk, owner: cfg.Owner, level: level, size: used}
	p := hdrSize
	if level == 0 {
		n.keys = make([][]byte, count)
		n.vals = make([][]byte, count)
		for i := range count {
			if p+leafEntryHdr > used {
				return nil, bad("entry %d header past end", i)
			}
			kl, vl := int(le.Uint16(buf[p:])), int(le.Uint16(buf[p+2:]))
			p += leafEntryHdr
			if kl+vl > maxE {
				return nil, bad("entry %d is %d bytes, max %d", i, kl+vl, maxE)
			}
			if p+kl+vl > used {
				return nil, bad("entry %d past end", i)
			}
			n.keys[i] = buf[p : p+kl : p+kl]
			p += kl
			n.vals[i] = buf[p : p+vl : p+vl]
			p += vl
			if i > 0 && bytes.Compare(n.keys[i-1], n.keys[i]) >= 0 {
				return nil, bad("key %d out of order", i)
			}
		}
	} else {
		if count == 0 {
			return nil, bad("internal node without children")
		}
		n.kids = make([]uint64, count)
		n.keys = make([][]byte, count-1)
		for i := range count {
			if p+innerEntryHdr > used {
				return nil, bad("entry %d header past end", i)
			}
			c := le.Uint64(buf[p:])
			kl := int(le.Uint16(buf[p+8:]))
			p += innerEntryHdr
			if c == 0 || c == blk {
				return nil, bad("child %d is block %d", i, c)
			}
			n.kids[i] = c
			if i == 0 {
				if kl != 0 {
					return nil, bad("first separator not empty")
				}
				continue
			}
			if kl > maxE {
				return nil, bad("separator %d is %d bytes, max %d", i, kl, maxE)
			}
			if p+kl > used {
				return nil, bad("separator %d past end", i)
			}
			n.keys[i-1] = buf[p : p+kl : p+kl]
			p += kl
			if i > 1 && bytes.Compare(n.keys[i-2], n.keys[i-1]) >= 0 {
				return nil, bad("separator %d out of order", i)
			}
		}
	}
	if p != used {
		return nil, bad("entries end at %d, header says %d", p, used)
	}
	n.freeze()
	return n, nil
}
