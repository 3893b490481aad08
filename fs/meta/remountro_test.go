package meta

import (
	"bytes"
	"os"
	"testing"
)

// An unlinked file closed for the last time after a remount read-only is
// not freed then: read-only means nothing more is written to the device
// (a block-level snapshot or backup taken after the remount must stay
// valid), as XFS skips inactivation on a read-only filesystem. It stays on
// the orphan list, which the checkpoint of the remount made durable; fsck
// meanwhile is clean (orphans are notes, not errors), and the next
// read-write mount frees it.
func TestRemountROUnlinkedOpenFile(t *testing.T) {
	fd, path := newTestImage(t, 64<<20, 9)
	s, err := Open(fd, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	freeBefore := s.alloc.FreeBlocks()
	f := mustCreate(t, s, s.Root(), "f")
	mustWrite(t, s, f, tagged(f.Ino(), 0, 1<<20, 1), 0)
	if err := s.OpenFile(f); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(s.Root(), "f", false); err != nil {
		t.Fatal(err)
	}
	if err := s.SetReadOnly(true); err != nil {
		t.Fatal(err)
	}
	image := func() []byte {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	before := image()
	// Still readable while open.
	got := make([]byte, 4096)
	if n, err := s.Read(f, got, 0); err != nil || n != len(got) || !bytes.Equal(got, tagged(f.Ino(), 0, 4096, 1)) {
		t.Fatalf("reading the unlinked open file after remount ro: %d, %v", n, err)
	}
	s.Release(f)
	if !bytes.Equal(before, image()) {
		t.Fatal("the last close of an unlinked file wrote to a filesystem remounted read-only")
	}
	// Meanwhile fsck is clean and counts the orphan.
	if rep := mustFsck(t, fd, true); rep.Orphans != 1 {
		t.Fatalf("fsck after the release: %d orphans, want 1", rep.Orphans)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, image()) {
		t.Fatal("unmounting a filesystem remounted read-only wrote to it")
	}
	// The next read-write mount frees it.
	if s, err = Open(fd, testOpts()); err != nil {
		t.Fatal(err)
	}
	if s.Get(f.Ino()) != nil {
		t.Errorf("inode %d still exists after a read-write mount", f.Ino())
	}
	if free := s.alloc.FreeBlocks(); free < freeBefore {
		t.Errorf("%d blocks free after the read-write mount, %d before the file was made", free, freeBefore)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if rep := mustFsck(t, fd, false); rep.Orphans != 0 {
		t.Fatalf("fsck after the read-write mount: %d orphans", rep.Orphans)
	}
}
