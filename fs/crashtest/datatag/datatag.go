// Package datatag makes file data that names where it belongs, for crash
// tests: every 16-byte word carries the inode number and the offset, 7 bits
// a byte with the top bit set, so a byte of another file's (or another
// offset's) data is told from this file's own (no stale data after a
// crash), and no tag byte is zero, so a lost write is told from the hole it
// leaves. One byte a word carries the write generation.
package datatag

// Byte is the byte at file offset off of inode ino written by write
// generation gen.
func Byte(ino uint64, off int64, gen byte) byte {
	w, i := off/16, off%16
	switch {
	case i < 5:
		return byte(ino>>(7*i))&0x7f | 0x80
	case i < 9:
		return byte(w>>(7*(i-5)))&0x7f | 0x80
	case i == 9:
		return gen | 0x80
	default:
		return 0xa0 | byte(i)
	}
}

// OK reports whether b may be at offset off of inode ino: zero, or the
// inode's own tag for that offset (any generation).
func OK(ino uint64, off int64, b byte) bool {
	if b == 0 {
		return true
	}
	if off%16 == 9 {
		return b&0x80 != 0
	}
	return b == Byte(ino, off, 0)
}

// Bytes is n tagged bytes of inode ino from offset off, generation gen.
func Bytes(ino uint64, off int64, n int, gen byte) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = Byte(ino, off+int64(i), gen)
	}
	return p
}
