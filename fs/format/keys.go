package format

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
)

// # Metadata trees
//
// Every AG has one copy-on-write B+tree (package meta/tree documents the
// node format). A checkpoint records each AG tree's root block. The tree of
// AG a holds:
//
//   - the AG header and the orphan list of AG a;
//   - every inode whose number lies in AG a, with everything the inode owns
//     (attributes, symlink target, xattrs, extents, directory entries), all
//     under keys that start with the inode number, so an inode's metadata
//     sits together (as in btrfs);
//   - the free space of the blocks of AG a.
//
// Keys (big-endian integers, so byte order is numeric order):
//
//	00 01                         AG header        → AGHeader (below)
//	00 02 ino:8                   orphan           → empty (nlink 0, still open)
//	00 03 stream:4 src:1          inodes per stream and stream source → count:8
//	00 04                         rotor (AG 0 only) → AG of the next new directory:4
//	01 ino:8 01                   inode            → RecInode body without the target
//	01 ino:8 02 chunk:1           symlink target   → up to ChunkBytes bytes
//	01 ino:8 03 name 00 chunk:1   xattr value      → up to ChunkBytes bytes
//	01 ino:8 04 lblk:8            extent           → len:8 pblk:8 flags:4 stream:4
//	01 ino:8 05 hash:8 name       directory entry  → ino:8 mode:4
//	02 start:8                    free extent      → len:8
//
// A directory entry's hash is DirHash(name): readdir walks entries in hash
// order and the hash is the stable readdir offset (ext4 htree style).
// Values larger than ChunkBytes (symlink targets, xattr values) are split
// into numbered chunks; an empty value is one empty chunk.
//
// AG header value: next agino u32 (above every inode number used in the
// AG; numbers are not reused), inodes u64 (inode records in the AG). The
// stream counts count inodes with a nonzero stream; a count that drops to
// zero is deleted. Counts are little-endian.
//
// Every key and value is validated by its decoder below before use.

// Key prefixes and inode sub-kinds.
const (
	KeyAG      = 0x00
	KeyInoSpc  = 0x01
	KeyFreeSpc = 0x02

	kindAGHeader = 0x01
	kindOrphan   = 0x02
	kindStream   = 0x03
	kindRotor    = 0x04

	KindInode  = 0x01
	KindTarget = 0x02
	KindXattr  = 0x03
	KindExtent = 0x04
	KindDirent = 0x05
)

// ChunkBytes is the largest value piece stored under one key: a 4 KiB node
// holds several of them with their keys.
const ChunkBytes = 512

var be = binary.BigEndian

// AGHeaderKey is the key of the AG header.
func AGHeaderKey() []byte { return []byte{KeyAG, kindAGHeader} }

// OrphanKey is the key marking ino as an orphan.
func OrphanKey(ino uint64) []byte {
	return be.AppendUint64(append(make([]byte, 0, 10), KeyAG, kindOrphan), ino)
}

// StreamCountKey is the key of the inode count of stream id and source src.
func StreamCountKey(id uint32, src uint8) []byte {
	return append(be.AppendUint32([]byte{KeyAG, kindStream}, id), src)
}

// StreamCountPrefix starts the stream counts.
func StreamCountPrefix() []byte { return []byte{KeyAG, kindStream} }

// RotorKey is the key of the directory rotor (AG 0's tree only).
func RotorKey() []byte { return []byte{KeyAG, kindRotor} }

// OrphanPrefix starts the orphan keys.
func OrphanPrefix() []byte { return []byte{KeyAG, kindOrphan} }

// InoPrefix is the prefix of every key ino owns.
func InoPrefix(ino uint64) []byte { return inoKey(ino, 0, 0)[:9:9] }

// inoKey returns ino's key prefix of one kind with room for extra more
// bytes, in one allocation: built by appends, a key took up to four, and
// every create, lookup and unlink builds several.
func inoKey(ino uint64, kind byte, extra int) []byte {
	k := make([]byte, 10, 10+extra)
	k[0] = KeyInoSpc
	be.PutUint64(k[1:9], ino)
	k[9] = kind
	return k
}

// InoKindPrefix is the prefix of ino's keys of one kind.
func InoKindPrefix(ino uint64, kind byte) []byte { return inoKey(ino, kind, 0) }

// InodeKey is the key of ino's attributes.
func InodeKey(ino uint64) []byte { return inoKey(ino, KindInode, 0) }

// TargetKey is the key of chunk i of a symlink target.
func TargetKey(ino uint64, i int) []byte { return append(inoKey(ino, KindTarget, 1), byte(i)) }

// XattrPrefix is the prefix of the chunks of xattr name (with room for
// XattrKey's chunk number).
func XattrPrefix(ino uint64, name string) []byte {
	k := append(inoKey(ino, KindXattr, len(name)+2), name...)
	return append(k, 0)
}

// XattrKey is the key of chunk i of xattr name.
func XattrKey(ino uint64, name string, i int) []byte { return append(XattrPrefix(ino, name), byte(i)) }

// ExtentKey is the key of the extent starting at file block lblk.
func ExtentKey(ino, lblk uint64) []byte { return be.AppendUint64(inoKey(ino, KindExtent, 8), lblk) }

// DirentKey is the key of the entry name in directory dir.
func DirentKey(dir uint64, name string) []byte {
	return append(be.AppendUint64(inoKey(dir, KindDirent, 8+len(name)), DirHash(name)), name...)
}

// DirentHashKey is the first possible key with hash h in dir.
func DirentHashKey(dir, h uint64) []byte { return be.AppendUint64(inoKey(dir, KindDirent, 8), h) }

// FreeKey is the key of the free extent starting at block start.
func FreeKey(start uint64) []byte {
	return be.AppendUint64(append(make([]byte, 0, 9), KeyFreeSpc), start)
}

// FreePrefix starts the free-space keys.
func FreePrefix() []byte { return []byte{KeyFreeSpc} }

// DirHash is the readdir offset of name: never 0 (the start of a
// directory), and below 2^62 so it survives signed 64-bit handling.
func DirHash(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return h.Sum64()>>2 + 1
}

// InoKey splits a key under InoPrefix: the inode number and the kind, and
// the rest of the key.
func InoKey(k []byte) (ino uint64, kind byte, rest []byte, err error) {
	if len(k) < 10 || k[0] != KeyInoSpc {
		return 0, 0, nil, fmt.Errorf("inode key % x: %w", k, ErrCorrupt)
	}
	return be.Uint64(k[1:]), k[9], k[10:], nil
}

// ExtentVal encodes an extent's value.
func ExtentVal(n, pblk uint64, flags, stream uint32) []byte {
	b := make([]byte, 24)
	le := binary.LittleEndian
	le.PutUint64(b, n)
	le.PutUint64(b[8:], pblk)
	le.PutUint32(b[16:], flags)
	le.PutUint32(b[20:], stream)
	return b
}

// DecodeExtent decodes an extent key's lblk and its value.
func DecodeExtent(k, v []byte) (lblk, n, pblk uint64, flags, stream uint32, err error) {
	if len(k) != 18 || len(v) != 24 || k[0] != KeyInoSpc || k[9] != KindExtent {
		return 0, 0, 0, 0, 0, fmt.Errorf("extent entry % x of %d bytes: %w", k, len(v), ErrCorrupt)
	}
	le := binary.LittleEndian
	lblk = be.Uint64(k[10:])
	n, pblk, flags, stream = le.Uint64(v), le.Uint64(v[8:]), le.Uint32(v[16:]), le.Uint32(v[20:])
	if n == 0 || lblk+n < lblk || pblk+n < pblk || flags&^ExtUnwritten != 0 {
		return 0, 0, 0, 0, 0, fmt.Errorf("extent %d+%d at %d flags %#x: %w", lblk, n, pblk, flags, ErrCorrupt)
	}
	return lblk, n, pblk, flags, stream, nil
}

// DirentVal encodes a directory entry's value.
func DirentVal(ino uint64, mode uint32) []byte {
	b := binary.LittleEndian.AppendUint64(nil, ino)
	return binary.LittleEndian.AppendUint32(b, mode&0o170000)
}

// DecodeDirent decodes a directory entry.
func DecodeDirent(k, v []byte) (name string, hash, ino uint64, mode uint32, err error) {
	if len(k) < 19 || len(v) != 12 || k[0] != KeyInoSpc || k[9] != KindDirent {
		return "", 0, 0, 0, fmt.Errorf("directory entry % x of %d bytes: %w", k, len(v), ErrCorrupt)
	}
	name = string(k[18:])
	hash = be.Uint64(k[10:])
	if !ValidName(name) || DirHash(name) != hash {
		return "", 0, 0, 0, fmt.Errorf("directory entry %q (hash %#x): %w", name, hash, ErrCorrupt)
	}
	ino, mode = binary.LittleEndian.Uint64(v), binary.LittleEndian.Uint32(v[8:])
	if mode&^0o170000 != 0 {
		return "", 0, 0, 0, fmt.Errorf("directory entry %q mode %#o: %w", name, mode, ErrCorrupt)
	}
	return name, hash, ino, mode, nil
}

// FreeVal encodes a free extent's length.
func FreeVal(n uint64) []byte { return binary.LittleEndian.AppendUint64(nil, n) }

// DecodeFree decodes a free extent.
func DecodeFree(k, v []byte) (start, n uint64, err error) {
	if len(k) != 9 || k[0] != KeyFreeSpc || len(v) != 8 {
		return 0, 0, fmt.Errorf("free-space entry of %d/%d bytes: %w", len(k), len(v), ErrCorrupt)
	}
	start, n = be.Uint64(k[1:]), binary.LittleEndian.Uint64(v)
	if n == 0 || start+n < start {
		return 0, 0, fmt.Errorf("free extent %d+%d: %w", start, n, ErrCorrupt)
	}
	return start, n, nil
}

// InodeVal encodes an inode's attributes (the target is stored apart).
func InodeVal(r *InodeRec) []byte {
	c := *r
	c.Target = ""
	var e Encoder
	e.Inode(&c)
	return e.Buf[5:]
}

// DecodeInodeVal decodes an inode's attributes.
func DecodeInodeVal(v []byte) (InodeRec, error) {
	r, err := decodeRecord(RecInode, v)
	if err != nil {
		return InodeRec{}, err
	}
	return r.Inode, nil
}

// AGHeader is the per-AG counter record.
type AGHeader struct {
	NextAgino uint32
	Inodes    uint64
}

// Encode returns the header's value.
func (h *AGHeader) Encode() []byte {
	b := binary.LittleEndian.AppendUint32(nil, h.NextAgino)
	return binary.LittleEndian.AppendUint64(b, h.Inodes)
}

// DecodeAGHeader decodes an AG header value.
func DecodeAGHeader(v []byte) (*AGHeader, error) {
	if len(v) != 12 {
		return nil, fmt.Errorf("AG header of %d bytes: %w", len(v), ErrCorrupt)
	}
	le := binary.LittleEndian
	return &AGHeader{NextAgino: le.Uint32(v), Inodes: le.Uint64(v[4:])}, nil
}
