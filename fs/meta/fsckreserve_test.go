package meta

import (
	"bytes"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/streamfs/streamfs/fs/crashtest/datatag"
	"github.com/streamfs/streamfs/fs/format"
	"github.com/streamfs/streamfs/fs/meta/fsck"
)

// freeOverTopFile damages the image at base so that the free-space records
// call file f's blocks free and everything above them in f's AG in use:
// the first tree node a repair allocates in that AG (nodes come from the
// top of an AG's free space) lands on f's data, unless fsck withholds
// every block in use before it allocates anything.
func freeOverTopFile(t *testing.T, base string) string {
	return damagedCopy(t, base, false, func(s *Store) {
		f := lookupPath(t, s, "f")
		exts, err := extentsIn(s.treeFor(f.Ino()), f.Ino(), 0, ^uint64(0))
		if err != nil || len(exts) == 0 {
			t.Fatal(exts, err)
		}
		// Node blocks this session took so far go into the records first,
		// and the allocator starts again from them.
		if _, err := s.foldNodeSpace(); err != nil {
			t.Fatal(err)
		}
		if err := s.rebuildAllocator(); err != nil {
			t.Fatal(err)
		}
		ag := s.agOfBlock(exts[0].PBlk)
		var end uint64
		for _, e := range exts {
			if s.agOfBlock(e.PBlk) != ag || s.agOfBlock(e.PBlk+e.Len-1) != ag {
				t.Fatalf("f's extents span AGs: %v", exts)
			}
			end = max(end, e.PBlk+e.Len)
		}
		type run struct{ start, n uint64 }
		var above []run
		s.trees[ag].Ascend(format.FreeKey(end), func(k, v []byte) bool {
			fs, fn, err := format.DecodeFree(k, v)
			if err != nil {
				return false
			}
			above = append(above, run{fs, fn})
			return true
		})
		// The allocator withholds the leaked runs too, so that this
		// session's own node copies go below f, where the records agree.
		for _, r := range above {
			s.reserve(r.start, r.n)
		}
		for _, r := range above {
			if err := s.spaceUse(r.start, r.n); err != nil {
				t.Fatal(err)
			}
		}
		for _, e := range exts {
			if err := s.spaceFree(e.PBlk, e.Len); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// checkFileF fails t unless the image's file f holds the data fsckImage
// wrote.
func checkFileF(t *testing.T, p string) {
	t.Helper()
	fd := openImage(t, p)
	defer fd.Close()
	s, err := Open(fd, Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	defer s.Close()
	f := lookupPath(t, s, "f")
	want := datatag.Bytes(f.Ino(), 0, 1<<20, 1)
	got := make([]byte, len(want))
	if n, err := s.Read(f, got, 0); err != nil || n != len(want) || !bytes.Equal(got, want) {
		t.Fatalf("f's data after fsck -y: %d bytes, %v, intact %v", n, err, bytes.Equal(got, want))
	}
}

// fsck -y replays a pending journal, and replay copies tree nodes: with
// free-space records that call a file's blocks free, those copies must
// not land on the file (the repaired checkpoint would write them over its
// data). After the repair the file is intact and fsck -n is clean.
func TestFsckRepairAllocatesNoFileBlocks(t *testing.T) {
	base := fsckImageN(t, 20)
	p := freeOverTopFile(t, base)
	// Commits after the checkpoint, left in the journal by a crash:
	// metadata only, so no data of this session lands on f either (its
	// node copies, which may, are never written).
	fd := openImage(t, p)
	s, err := Open(fd, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 40; i++ {
		if _, err := s.Create(s.Root(), "late"+itoa(uint64(i)), NewInode{Mode: syscall.S_IFREG | 0o644}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SyncAll(); err != nil {
		t.Fatal(err)
	}
	crash(t, s, fd)
	fd.Close()

	rep := fsckRun(t, p, true)
	t.Logf("fsck -y: %q", rep.Problems)
	if rep.ExitCode() != fsck.Corrected || !rep.Wrote {
		t.Errorf("fsck -y: exit %d (wrote %v): %q", rep.ExitCode(), rep.Wrote, rep.Problems)
	}
	if rep := fsckRun(t, p, false); len(rep.Problems) != 0 {
		t.Errorf("fsck -n after the repair: %q", rep.Problems)
	}
	checkFileF(t, p)
}

// fsck -y does not write a repaired checkpoint while a problem it cannot
// repair remains (here two files claim the same blocks): it reports
// everything, writes nothing and exits 4.
func TestFsckUnfixableWritesNothing(t *testing.T) {
	base := fsckImageN(t, 20)
	gName := strings.Repeat("n", 100) + "1"
	p := damagedCopy(t, base, false, func(s *Store) {
		f := lookupPath(t, s, "f")
		exts, err := extentsIn(s.treeFor(f.Ino()), f.Ino(), 0, ^uint64(0))
		if err != nil || len(exts) == 0 {
			t.Fatal(exts, err)
		}
		// g's first block now also maps f's first block (cross-linked).
		g := lookupPath(t, s, "d", gName)
		if err := s.treeFor(g.Ino()).Put(format.ExtentKey(g.Ino(), 0), format.ExtentVal(1, exts[0].PBlk, 0, 0)); err != nil {
			t.Fatal(err)
		}
		// And a problem fsck can repair: a link count.
		a := f.attr
		a.Nlink = 9
		if err := s.applyInode(&a); err != nil {
			t.Fatal(err)
		}
	})
	before, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	rep := fsckRun(t, p, true)
	t.Logf("fsck -y: %q", rep.Problems)
	if rep.ExitCode() != fsck.Uncorrected || rep.Wrote {
		t.Errorf("fsck -y with a cross-linked block: exit %d, wrote %v; want %d and nothing written", rep.ExitCode(), rep.Wrote, fsck.Uncorrected)
	}
	after, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Errorf("fsck -y changed the image although a problem is left that it cannot repair")
	}
	checkFileF(t, p)
}
