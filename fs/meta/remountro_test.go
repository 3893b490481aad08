package meta

import (
	"bytes"
	"os"
	"testing"

	"github.com/streamfs/streamfs/fs/crashtest/datatag"
)

// An unlinked file closed for the last time after a remount read-only is
// not freed then: read-only means nothing more is written to the device
// (a block-level snapshot or backup taken after the remount must stay
// valid), as XFS skips inactivation on a read-only filesystem. It stays on
// the orphan list, which the checkpoint of the remount made durable; fsck
// meanwhile is clean (orphans are notes, not errors), and a remount
// read-write or the next read-write mount frees it. A file still open at
// the remount read-write is freed at its last close.
func TestRemountROUnlinkedOpenFile(t *testing.T) {
	for _, how := range []string{"remount rw", "next mount"} {
		t.Run(how, func(t *testing.T) {
			fd, path := newTestImage(t, 64<<20, 9)
			s, err := Open(fd, testOpts())
			if err != nil {
				t.Fatal(err)
			}
			freeBefore := s.alloc.FreeBlocks()
			f := mustCreate(t, s, s.Root(), "f")
			mustWrite(t, s, f, datatag.Bytes(f.Ino(), 0, 1<<20, 1), 0)
			g := mustCreate(t, s, s.Root(), "g") // still open at the remount rw
			for _, in := range []*Inode{f, g} {
				if err := s.OpenFile(in); err != nil {
					t.Fatal(err)
				}
			}
			for _, name := range []string{"f", "g"} {
				if err := s.Remove(s.Root(), name, false); err != nil {
					t.Fatal(err)
				}
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
			got := make([]byte, 4096)
			if n, err := s.Read(f, got, 0); err != nil || n != len(got) || !bytes.Equal(got, datatag.Bytes(f.Ino(), 0, 4096, 1)) {
				t.Fatalf("reading the unlinked open file after remount ro: %d, %v", n, err)
			}
			s.Release(f)
			if !bytes.Equal(before, image()) {
				t.Fatal("the last close of an unlinked file wrote to a filesystem remounted read-only")
			}
			if rep := mustFsck(t, fd, true); rep.Orphans != 2 {
				t.Fatalf("fsck after the release: %d orphans, want 2", rep.Orphans)
			}
			if how == "remount rw" {
				if err := s.SetReadOnly(false); err != nil {
					t.Fatal(err)
				}
				if s.Get(f.Ino()) != nil {
					t.Errorf("inode %d, closed while read-only, still exists after the remount read-write", f.Ino())
				}
				if s.Get(g.Ino()) == nil {
					t.Fatalf("inode %d, still open, was freed by the remount read-write", g.Ino())
				}
				s.Release(g)
				if s.Get(g.Ino()) != nil {
					t.Errorf("inode %d still exists after its last close", g.Ino())
				}
			} else {
				s.Release(g)
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(before, image()) {
					t.Fatal("unmounting a filesystem remounted read-only wrote to it")
				}
				if s, err = Open(fd, testOpts()); err != nil {
					t.Fatal(err)
				}
				for _, in := range []*Inode{f, g} {
					if s.Get(in.Ino()) != nil {
						t.Errorf("inode %d still exists after a read-write mount", in.Ino())
					}
				}
			}
			// A checkpoint gives back freed blocks and old node copies.
			if err := s.SyncAll(); err != nil {
				t.Fatal(err)
			}
			if err := s.checkpoint(); err != nil {
				t.Fatal(err)
			}
			if free := s.alloc.FreeBlocks(); free < freeBefore {
				t.Errorf("%d blocks free, %d before the files were made", free, freeBefore)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if rep := mustFsck(t, fd, false); rep.Orphans != 0 {
				t.Fatalf("fsck at the end: %d orphans", rep.Orphans)
			}
		})
	}
}
