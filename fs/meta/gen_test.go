package meta

import (
	"syscall"
	"testing"

	"github.com/streamfs/streamfs/fs/crashtest/datatag"
)

// New inodes get random, non-zero generations (file handles carry them:
// with sequential inode numbers and a fixed generation a handle could be
// guessed), kept by every later change, by a crash's journal replay and
// by a clean remount.
func TestGenerationsUnpredictable(t *testing.T) {
	fd, _ := newTestImage(t, 64<<20, 3)
	s, err := Open(fd, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	gens := map[uint64]uint32{}
	seen := map[uint32]bool{}
	var prev uint32
	steps := 0
	for i := 0; i < 64; i++ {
		mode := uint32(syscall.S_IFREG | 0o644)
		if i%4 == 0 {
			mode = syscall.S_IFDIR | 0o755
		}
		in, err := s.Create(s.Root(), "f"+itoa(uint64(i)), NewInode{Mode: mode})
		if err != nil {
			t.Fatal(err)
		}
		g := in.Attr().Gen
		if g == 0 || seen[g] {
			t.Fatalf("inode %d: generation %d (zero or repeated)", in.Ino(), g)
		}
		if g == prev+1 {
			steps++
		}
		seen[g], gens[in.Ino()], prev = true, g, g
	}
	if steps > 2 {
		t.Fatalf("%d of 64 generations follow their predecessor", steps)
	}
	f := lookupPath(t, s, "f1")
	mustWrite(t, s, f, datatag.Bytes(f.Ino(), 0, 10000, 1), 0)
	if err := s.Rename(s.Root(), "f1", s.Root(), "g1", 0); err != nil {
		t.Fatal(err)
	}
	if err := s.SyncAll(); err != nil {
		t.Fatal(err)
	}
	check := func(s *Store, when string) {
		for ino, g := range gens {
			if got := s.Get(ino).Attr().Gen; got != g {
				t.Fatalf("%s: inode %d generation %d, was %d", when, ino, got, g)
			}
		}
	}
	check(s, "after changes")
	crash(t, s, fd)
	if s, err = Open(fd, testOpts()); err != nil {
		t.Fatal(err)
	}
	check(s, "after journal replay")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(fd, testOpts()); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	check(s, "after a clean remount")
}
