package datatag

import "testing"

// Tags are never zero, differ between inodes and offsets, and OK accepts
// exactly a file's own tags (any generation) and holes.
func TestTags(t *testing.T) {
	for off := int64(0); off < 64; off++ {
		b := Byte(7, off, 3)
		if b == 0 {
			t.Fatalf("zero tag at %d", off)
		}
		if !OK(7, off, b) || !OK(7, off, Byte(7, off, 5)) || !OK(7, off, 0) {
			t.Fatalf("own tag or hole refused at %d", off)
		}
	}
	if OK(8, 0, Byte(7, 0, 1)) {
		t.Error("another inode's tag accepted")
	}
	if OK(7, 21, Byte(7, 5, 1)) {
		t.Error("another offset's tag accepted")
	}
	if got := Bytes(7, 3, 4, 1); got[0] != Byte(7, 3, 1) || got[3] != Byte(7, 6, 1) {
		t.Errorf("Bytes: %x", got)
	}
}
