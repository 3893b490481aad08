package meta

import (
	"fmt"
	"syscall"
	"testing"

	"github.com/streamfs/streamfs/alloc"
)

// New directories rotate across AGs and files follow their directory; an
// AG whose inode numbers are spent passes new inodes to the next AG instead
// of wrapping onto the root.
func TestInodeNumbers(t *testing.T) {
	fd, _ := newTestImage(t, 128<<20, 7)
	s, err := Open(fd, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ags := map[uint32]bool{}
	for i := 0; i < int(s.sb.AGCount); i++ {
		d, err := s.Create(s.Root(), fmt.Sprintf("d%d", i), NewInode{Mode: syscall.S_IFDIR | 0o755})
		if err != nil {
			t.Fatal(err)
		}
		ags[alloc.InoAG(d.Ino())] = true
		f := mustCreate(t, s, d, "f")
		if alloc.InoAG(f.Ino()) != alloc.InoAG(d.Ino()) {
			t.Fatalf("file %#x not in its directory's AG (%#x)", f.Ino(), d.Ino())
		}
	}
	if len(ags) != int(s.sb.AGCount) {
		t.Fatalf("directories used AGs %v of %d", ags, s.sb.AGCount)
	}
	s.agNext[0].Store(^uint32(0) - 1)
	a := mustCreate(t, s, s.Root(), "a")
	b := mustCreate(t, s, s.Root(), "b")
	if alloc.InoAG(a.Ino()) != 0 || alloc.InoAG(b.Ino()) == 0 || b.Ino() <= RootIno {
		t.Fatalf("after AG 0 ran out: %#x then %#x", a.Ino(), b.Ino())
	}
	if !s.Root().IsDir() {
		t.Fatal("root overwritten")
	}
}
