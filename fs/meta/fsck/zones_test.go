package fsck

import (
	"strings"
	"syscall"
	"testing"

	"github.com/streamfs/streamfs/backend"
	"github.com/streamfs/streamfs/fs/format"
)

// fakeZones: 32 MiB of conventional zones, then 8 sequential zones of
// 1 MiB with 768 KiB (192 blocks) writable.
var fakeZones = format.ZoneLayout{DataStart: 32 << 20, ZoneSize: 1 << 20, ZoneCap: 768 << 10, DataZones: 8}

func newFakeZoned(t *testing.T) (*fakeImage, backend.Device) {
	t.Helper()
	zl := fakeZones
	return newFakeImageOn(t, &zl)
}

// addFile adds regular file name (inode ino) with one extent of n blocks
// at device block pblk.
func (fi *fakeImage) addFile(ino uint64, name string, pblk, n uint64) {
	a := format.InodeRec{Ino: ino, Mode: syscall.S_IFREG | 0o644, Nlink: 1, Size: n * 4096, Blocks: n, Gen: 3}
	fi.put(format.InodeKey(ino), format.InodeVal(&a))
	fi.put(format.DirentKey(rootIno, name), format.DirentVal(ino, a.Mode))
	fi.put(format.ExtentKey(ino, 0), format.ExtentVal(n, pblk, 0, 0))
	fi.inodes++
	fi.next = max(fi.next, uint32(ino)+1)
}

func hasLine(lines []string, sub string) bool {
	return strings.Contains(strings.Join(lines, "\n"), sub)
}

// A clean zoned image: the conventional space's records cover it (the
// file's blocks in the zones are not "leaked"), and dead blocks below a
// write pointer are reported as reclaimable garbage, not as errors.
func TestCheckZonedClean(t *testing.T) {
	fi, dev := newFakeZoned(t)
	rep := run(t, fi, dev, false)
	if rep.ExitCode() != Clean || len(rep.Notes) != 0 {
		t.Fatalf("exit %d: problems %q notes %q", rep.ExitCode(), rep.Problems, rep.Notes)
	}
	if len(rep.Zones) != 8 || rep.Zones[0].Live != 8 || rep.Zones[0].Written != 8 || rep.Zones[0].Garbage != 0 || rep.Zones[1].Written != 0 {
		t.Fatalf("zones %+v", rep.Zones)
	}
	if rep.UsedBlocks+rep.FreeBlocks != fi.sb.BackupBlock-fi.sb.MetaEnd() {
		t.Fatalf("used %d free %d of %d conventional blocks", rep.UsedBlocks, rep.FreeBlocks, fi.sb.BackupBlock-fi.sb.MetaEnd())
	}
	// 4 blocks written after the file's and no longer mapped; zone 2
	// full of garbage.
	fi.setWP(0, 12)
	fi.setWP(2, 192)
	for _, repair := range []bool{false, true} {
		rep = run(t, fi, dev, repair)
		if rep.ExitCode() != Clean || rep.Wrote || !hasLine(rep.Notes, "2 zones hold 196 blocks of garbage") {
			t.Fatalf("repair %v: exit %d, wrote %v: problems %q notes %q", repair, rep.ExitCode(), rep.Wrote, rep.Problems, rep.Notes)
		}
		z0, z2 := rep.Zones[0], rep.Zones[2]
		if z0.Garbage != 4 || z0.Live != 8 || z2.Garbage != 192 || z2.Cond != "full" || z2.Start != fi.sb.DataStart+2*256 {
			t.Fatalf("zones %+v", rep.Zones)
		}
	}
}

// An extent past its zone's write pointer (the zone was reset, or the
// write pointer never got there): -n reports it, -y drops it as e2fsck
// clears illegal blocks, and the next run is clean.
func TestCheckZonedPastWritePointer(t *testing.T) {
	fi, dev := newFakeZoned(t)
	fi.setWP(0, 5)
	rep := run(t, fi, dev, false)
	want := "inode 2 extent 0+8 at block 8192 lies past the write pointer of zone 32 (5 of its blocks written): dropped"
	if rep.ExitCode() != Uncorrected || !hasLine(rep.Problems, want) {
		t.Fatalf("fsck -n: exit %d: %q", rep.ExitCode(), rep.Problems)
	}
	rep = run(t, fi, dev, true)
	if rep.ExitCode() != Corrected || !rep.Wrote || fi.checkpoints != 1 ||
		!hasLine(rep.Problems, want+" (fixed)") || !hasLine(rep.Problems, "inode 2 block count 8, its extents map 0 (fixed)") {
		t.Fatalf("fsck -y: exit %d, wrote %v: %q", rep.ExitCode(), rep.Wrote, rep.Problems)
	}
	if _, ok, err := fi.trees[0].Get(format.ExtentKey(2, 0)); err != nil || ok {
		t.Fatal("the extent is still there")
	}
	fi.edits = 0 // the block count went through Edit, which the fake does not apply
	rep = run(t, fi, dev, false)
	if len(rep.Problems) != 1 || !hasLine(rep.Problems, "inode 2 block count 8, its extents map 0") {
		t.Fatalf("after repair: %q", rep.Problems)
	}
}

// An extent spanning two zones without a gap must lie below the write
// pointers of both.
func TestCheckZonedSpanningZones(t *testing.T) {
	zl := fakeZones
	zl.ZoneCap = zl.ZoneSize
	fi, dev := newFakeImageOn(t, &zl)
	fi.addFile(3, "g", fi.sb.DataStart+250, 10) // zone 0's last 6 blocks, zone 1's first 4
	fi.setWP(0, 256)
	fi.setWP(1, 4)
	if rep := run(t, fi, dev, false); rep.ExitCode() != Clean || rep.Zones[0].Live != 14 || rep.Zones[1].Live != 4 {
		t.Fatalf("exit %d: %q, zones %+v", rep.ExitCode(), rep.Problems, rep.Zones[:2])
	}
	fi.setWP(1, 3)
	if rep := run(t, fi, dev, false); !hasLine(rep.Problems, "inode 3 extent 0+10 at block 8442 lies past the write pointer of zone 33 (3 of its blocks written)") {
		t.Fatalf("%q", rep.Problems)
	}
}

// Two files mapping one zone block cannot be repaired: reported, nothing
// written.
func TestCheckZonedOverlap(t *testing.T) {
	fi, dev := newFakeZoned(t)
	fi.addFile(3, "g", fi.sb.DataStart+6, 4)
	fi.setWP(0, 10)
	rep := run(t, fi, dev, true)
	if rep.ExitCode() != Uncorrected || rep.Wrote || fi.checkpoints != 0 ||
		!hasLine(rep.Problems, "blocks 8198+4 (inode 3) also belong to inode 2") {
		t.Fatalf("exit %d, wrote %v: %q", rep.ExitCode(), rep.Wrote, rep.Problems)
	}
}

// File data in the conventional (metadata) space is illegal on the zoned
// layout: dropped.
func TestCheckZonedExtentInConventionalSpace(t *testing.T) {
	fi, dev := newFakeZoned(t)
	fi.addFile(3, "g", fi.sb.MetaEnd()+fileBlk, 4)
	rep := run(t, fi, dev, false)
	want := "inode 3 extent 0+4 at block 632 outside the sequential zones: dropped"
	if rep.ExitCode() != Uncorrected || !hasLine(rep.Problems, want) {
		t.Fatalf("fsck -n: exit %d: %q", rep.ExitCode(), rep.Problems)
	}
	rep = run(t, fi, dev, true)
	if rep.ExitCode() != Corrected || !rep.Wrote || !hasLine(rep.Problems, want+" (fixed)") {
		t.Fatalf("fsck -y: exit %d: %q", rep.ExitCode(), rep.Problems)
	}
}

// The device's zones must be the superblock's.
func TestCheckZonedGeometry(t *testing.T) {
	fi, dev := newFakeZoned(t)
	fi.zones[len(fi.zones)-1].Cap -= 4096
	if rep := run(t, fi, dev, false); !hasLine(rep.Problems, "differs from the filesystem's geometry") || rep.Zones != nil {
		t.Fatalf("%q", rep.Problems)
	}
	fi.zones = nil
	if rep := run(t, fi, dev, false); !hasLine(rep.Problems, "the device has no zones") {
		t.Fatalf("%q", rep.Problems)
	}
}
