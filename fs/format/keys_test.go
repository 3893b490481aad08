package format

import (
	"bytes"
	"testing"
)

// The key layout is on-disk format: every key builder gives the bytes the
// format documents, and room left for appends never shows in the key.
func TestKeyBytes(t *testing.T) {
	const ino = 0x0102030405060708
	ino8 := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	h := DirHash("name")
	hb := []byte{byte(h >> 56), byte(h >> 48), byte(h >> 40), byte(h >> 32), byte(h >> 24), byte(h >> 16), byte(h >> 8), byte(h)}
	for _, c := range []struct {
		name      string
		got, want []byte
	}{
		{"OrphanKey", OrphanKey(ino), cat([]byte{KeyAG, kindOrphan}, ino8)},
		{"InoPrefix", InoPrefix(ino), cat([]byte{KeyInoSpc}, ino8)},
		{"InoKindPrefix", InoKindPrefix(ino, KindExtent), cat([]byte{KeyInoSpc}, ino8, []byte{KindExtent})},
		{"InodeKey", InodeKey(ino), cat([]byte{KeyInoSpc}, ino8, []byte{KindInode})},
		{"TargetKey", TargetKey(ino, 3), cat([]byte{KeyInoSpc}, ino8, []byte{KindTarget, 3})},
		{"XattrPrefix", XattrPrefix(ino, "user.a"), cat([]byte{KeyInoSpc}, ino8, []byte{KindXattr}, []byte("user.a"), []byte{0})},
		{"XattrKey", XattrKey(ino, "user.a", 2), cat([]byte{KeyInoSpc}, ino8, []byte{KindXattr}, []byte("user.a"), []byte{0, 2})},
		{"ExtentKey", ExtentKey(ino, ino), cat([]byte{KeyInoSpc}, ino8, []byte{KindExtent}, ino8)},
		{"DirentKey", DirentKey(ino, "name"), cat([]byte{KeyInoSpc}, ino8, []byte{KindDirent}, hb, []byte("name"))},
		{"DirentHashKey", DirentHashKey(ino, h), cat([]byte{KeyInoSpc}, ino8, []byte{KindDirent}, hb)},
		{"FreeKey", FreeKey(ino), cat([]byte{KeyFreeSpc}, ino8)},
	} {
		if !bytes.Equal(c.got, c.want) {
			t.Errorf("%s = %x, want %x", c.name, c.got, c.want)
		}
	}
	// Two keys from one prefix must not share bytes.
	p := InoKindPrefix(ino, KindXattr)
	a, b := append(p, 'a'), append(p, 'b')
	if a[len(a)-1] != 'a' || b[len(b)-1] != 'b' {
		t.Errorf("keys appended to one prefix share storage: %q %q", a, b)
	}
}
