package meta

import (
	"syscall"
	"testing"

	"github.com/streamfs/streamfs/fs/format"
)

// A rule's stream wins over the directory's, an explicit SET over both,
// and the source survives a remount (through the checkpoint).
func TestStreamSource(t *testing.T) {
	fd, _, s, d := openWithDir(t, 3, 3)
	mk := func(name string, rule uint32) *Inode {
		in, err := s.Create(d, name, NewInode{Mode: syscall.S_IFREG | 0o644, RuleStream: rule})
		if err != nil {
			t.Fatal(err)
		}
		return in
	}
	byRule, byDir, bySet := mk("a.log", 1), mk("b", 0), mk("c.log", 1)
	plain, err := s.Create(s.Root(), "e", NewInode{Mode: syscall.S_IFREG | 0o644})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetStream(bySet, 2); err != nil {
		t.Fatal(err)
	}
	want := map[uint64][2]uint32{
		byRule.Ino(): {1, uint32(format.StreamSrcRule)}, byDir.Ino(): {3, uint32(format.StreamSrcDir)},
		bySet.Ino(): {2, uint32(format.StreamSrcSet)}, plain.Ino(): {0, uint32(format.StreamSrcNone)},
	}
	check := func(s *Store, when string) {
		t.Helper()
		for ino, w := range want {
			in := s.Get(ino)
			if in == nil {
				t.Fatalf("%s: inode %#x missing", when, ino)
			}
			if a := in.Attr(); a.Stream != w[0] || uint32(a.StreamSrc) != w[1] {
				t.Errorf("%s: inode %#x: stream %d source %d, want %v", when, ino, a.Stream, a.StreamSrc, w)
			}
		}
	}
	check(s, "before remount")
	_, bySrc := s.StreamFileSources()
	if c := bySrc[3]; c[format.StreamSrcDir] != 1 {
		t.Errorf("stream 3 sources %v", c)
	}
	if err := s.SyncAll(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil { // writes a checkpoint: sources must survive it
		t.Fatal(err)
	}
	s, err = Open(fd, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	check(s, "after remount")
}
