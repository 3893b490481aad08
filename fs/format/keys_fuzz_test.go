package format

import (
	"bytes"
	"testing"
)

// FuzzDecodeTreeEntries feeds every tree key/value decoder arbitrary bytes:
// none may panic, and whatever decodes re-encodes to the same bytes.
func FuzzDecodeTreeEntries(f *testing.F) {
	in := InodeRec{Ino: 1<<32 | 7, Mode: 0o100644, Nlink: 1, Size: 5000, Blocks: 2, Stream: 3, StreamSrc: StreamSrcRule}
	f.Add(ExtentKey(7, 100), ExtentVal(8, 4096, ExtUnwritten, 2))
	f.Add(DirentKey(1, "hello.txt"), DirentVal(1<<32|7, 0o100000))
	f.Add(FreeKey(12345), FreeVal(77))
	f.Add(InodeKey(in.Ino), InodeVal(&in))
	f.Add(AGHeaderKey(), (&AGHeader{NextAgino: 9, Inodes: 3}).Encode())
	f.Fuzz(func(t *testing.T, k, v []byte) {
		if lblk, n, pblk, flags, stream, err := DecodeExtent(k, v); err == nil {
			if !bytes.Equal(ExtentVal(n, pblk, flags, stream), v) || !bytes.Equal(ExtentKey(be.Uint64(k[1:]), lblk)[10:], k[10:]) {
				t.Fatalf("extent %x/%x does not round-trip", k, v)
			}
		}
		if name, _, ino, mode, err := DecodeDirent(k, v); err == nil {
			if !bytes.Equal(DirentKey(be.Uint64(k[1:]), name)[9:], k[9:]) || (mode&^0o170000 == 0 && !bytes.Equal(DirentVal(ino, mode), v)) {
				t.Fatalf("directory entry %x/%x does not round-trip", k, v)
			}
		}
		if start, n, err := DecodeFree(k, v); err == nil {
			if !bytes.Equal(FreeKey(start), k) || !bytes.Equal(FreeVal(n), v) {
				t.Fatalf("free extent %x/%x does not round-trip", k, v)
			}
		}
		if a, err := DecodeInodeVal(v); err == nil && a.Target == "" {
			if !bytes.Equal(InodeVal(&a), v) {
				t.Fatalf("inode %x does not round-trip", v)
			}
		}
		if h, err := DecodeAGHeader(v); err == nil {
			if !bytes.Equal(h.Encode(), v) {
				t.Fatalf("AG header %x does not round-trip", v)
			}
		}
		_, _, _, _ = InoKey(k)
	})
}
