package fsck

import (
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/zap"

	"github.com/streamfs/streamfs/backend"
	"github.com/streamfs/streamfs/backend/faulty"
	"github.com/streamfs/streamfs/fs/format"
	"github.com/streamfs/streamfs/fs/meta/tree"
)

// These tests run the checks against a small image built in memory behind
// the package's interfaces, without package meta: what fsck decides rests
// on what the interfaces give it. The tests of fsck on real filesystem
// images (damaged by hand, power cuts, full devices) are in package meta.

// memPager keeps every node in memory (nothing is ever snapshot) and
// allocates the lowest data block that is neither taken nor withheld.
type memPager struct {
	lo, hi uint64
	used   map[uint64]bool
}

func (p *memPager) Read(blk uint64, buf []byte) error {
	return errors.New("memPager: every node is in memory")
}

func (p *memPager) Alloc(uint64) (uint64, error) {
	for b := p.lo; b < p.hi; b++ {
		if !p.used[b] {
			p.used[b] = true
			return b, nil
		}
	}
	return 0, syscall.ENOSPC
}

func (p *memPager) Free(uint64) {} // not reused before a checkpoint, as on a real image

// fakeImage is a one-AG filesystem: the root directory with file "f"
// (inode 2) of 8 blocks at fileBlk.
type fakeImage struct {
	t       *testing.T
	sb      *format.Super
	pager   *memPager
	cache   *tree.Cache
	trees   []*tree.Tree
	inodes  int64
	next    uint32
	streams map[StreamKey]int64
	l       Loader

	onLoad      func(l Loader) // damage the load reports
	zones       []backend.Zone // the device's zones (nil: not zoned)
	checkpoints int
	skipped     uint64
	edits       int
}

const fileBlk = 100 // from the start of the data area

var (
	_ = (Host)((*fakeImage)(nil))
	_ = (Image)((*fakeImage)(nil))
)

func newFakeImage(t *testing.T) (*fakeImage, backend.Device) {
	t.Helper()
	return newFakeImageOn(t, nil)
}

// newFakeImageOn makes the fake image, on the zoned layout when zl is set:
// the file's 8 blocks then lie at the start of the first sequential zone,
// whose write pointer is right after them.
func newFakeImageOn(t *testing.T, zl *format.ZoneLayout) (*fakeImage, backend.Device) {
	t.Helper()
	sb, err := format.NewSuper(format.MkfsParams{SizeBytes: 32 << 20, AGCount: 1, Zones: zl})
	if err != nil {
		t.Fatal(err)
	}
	dev, err := faulty.NewMem(int64(sb.TotalBlocks)*int64(sb.BlockSize), 512)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, sb.BlockSize)
	copy(b, sb.Encode())
	for _, blk := range []uint64{0, sb.BackupBlock} {
		if err := dev.WriteAt(b, int64(blk)*int64(sb.BlockSize), 0); err != nil {
			t.Fatal(err)
		}
	}
	fi := &fakeImage{t: t, sb: sb, pager: &memPager{lo: sb.MetaEnd(), hi: sb.BackupBlock, used: map[uint64]bool{}}, inodes: 2, next: 3}
	if fi.cache, err = tree.NewCache(1 << 20); err != nil {
		t.Fatal(err)
	}
	tr, err := tree.Open(fi.pager, fi.cache, tree.Config{NodeSize: int(sb.BlockSize), Owner: 1, UUID: sb.UUID}, 0)
	if err != nil {
		t.Fatal(err)
	}
	fi.trees = []*tree.Tree{tr}
	root := format.InodeRec{Ino: rootIno, Mode: syscall.S_IFDIR | 0o755, Nlink: 2, Parent: rootIno, Gen: 1}
	file := format.InodeRec{Ino: 2, Mode: syscall.S_IFREG | 0o644, Nlink: 1, Size: 8 * 4096, Blocks: 8, Gen: 2}
	fi.put(format.InodeKey(rootIno), format.InodeVal(&root))
	fi.put(format.InodeKey(2), format.InodeVal(&file))
	fi.put(format.DirentKey(rootIno, "f"), format.DirentVal(2, file.Mode))
	fileAt := sb.MetaEnd() + fileBlk
	if sb.Zoned() {
		fileAt = sb.DataStart
		bs := int64(sb.BlockSize)
		for off := int64(0); off < int64(sb.TotalBlocks)*bs; off += zl.ZoneSize {
			fi.zones = append(fi.zones, backend.Zone{Start: off, Len: zl.ZoneSize, Cap: zl.ZoneSize, WP: off, Type: backend.ZoneConventional, Cond: backend.ZoneNotWP})
		}
		for j := range int64(sb.DataZones) {
			off := zl.DataStart + j*zl.ZoneSize
			fi.zones = append(fi.zones, backend.Zone{Start: off, Len: zl.ZoneSize, Cap: zl.ZoneCap, WP: off, Type: backend.ZoneSeqWriteRequired, Cond: backend.ZoneEmpty})
		}
		fi.setWP(0, 8)
	}
	fi.put(format.ExtentKey(2, 0), format.ExtentVal(8, fileAt, 0, 0))
	h := format.AGHeader{NextAgino: 3, Inodes: 2}
	fi.put(format.AGHeaderKey(), h.Encode())
	fi.put(format.RotorKey(), binary.LittleEndian.AppendUint32(nil, 0))
	// Free space: the data area but the tree's node and the file.
	nodes := fi.nodes()
	if !slices.Equal(nodes, []uint64{sb.MetaEnd()}) {
		t.Fatalf("setup: tree nodes at %v, want one at %d", nodes, sb.MetaEnd())
	}
	if sb.Zoned() {
		fi.put(format.FreeKey(sb.MetaEnd()+1), format.FreeVal(sb.BackupBlock-sb.MetaEnd()-1))
	} else {
		fi.put(format.FreeKey(sb.MetaEnd()+1), format.FreeVal(fileBlk-1))
		fi.put(format.FreeKey(sb.MetaEnd()+fileBlk+8), format.FreeVal(sb.BackupBlock-sb.MetaEnd()-fileBlk-8))
	}
	if n := fi.nodes(); !slices.Equal(n, nodes) {
		t.Fatalf("setup: tree nodes moved to %v", n)
	}
	return fi, dev
}

func (fi *fakeImage) put(k, v []byte) {
	fi.t.Helper()
	if err := fi.trees[0].Put(k, v); err != nil {
		fi.t.Fatal(err)
	}
}

func (fi *fakeImage) nodes() []uint64 {
	var blks []uint64
	for _, err := range fi.trees[0].Check(func(blk uint64, _ int) { blks = append(blks, blk) }) {
		fi.t.Fatal(err)
	}
	slices.Sort(blks)
	return blks
}

// setFree replaces the free-space records with the extents start, n pairs.
func (fi *fakeImage) setFree(ext ...uint64) {
	fi.t.Helper()
	var old [][]byte
	fi.trees[0].Ascend(format.FreePrefix(), func(k, _ []byte) bool {
		old = append(old, slices.Clone(k))
		return true
	})
	for _, k := range old {
		if _, err := fi.trees[0].Delete(k); err != nil {
			fi.t.Fatal(err)
		}
	}
	for i := 0; i < len(ext); i += 2 {
		fi.put(format.FreeKey(ext[i]), format.FreeVal(ext[i+1]))
	}
}

// setWP moves sequential zone j's write pointer to blocks from its start.
func (fi *fakeImage) setWP(j int, blocks uint64) {
	z := &fi.zones[len(fi.zones)-int(fi.sb.DataZones)+j]
	z.WP = z.Start + int64(blocks)*int64(fi.sb.BlockSize)
	z.Cond = backend.ZoneClosed
	switch {
	case blocks == 0:
		z.Cond = backend.ZoneEmpty
	case z.WP == z.Start+z.Cap:
		z.Cond = backend.ZoneFull
	}
}

// Zones.
func (fi *fakeImage) ZoneReport() ([]backend.Zone, bool, error) {
	return slices.Clone(fi.zones), fi.zones != nil, nil
}

// Host.
func (fi *fakeImage) ReadSuper(backend.Device) (*format.Super, error) { return fi.sb, nil }
func (fi *fakeImage) WriteSuper(backend.Device, *format.Super) error {
	return errors.New("no superblock is damaged here")
}
func (fi *fakeImage) Open(_ backend.Device, _ *format.Super, _ bool, _ *zap.Logger, l Loader) Image {
	fi.l = l
	return fi
}

// Loading.
func (fi *fakeImage) Load() (*format.CkptHeader, int, error) {
	fi.l.BeforeReplay()
	if fi.onLoad != nil {
		fi.onLoad(fi.l)
	}
	return &format.CkptHeader{Seq: 5}, 0, nil
}
func (fi *fakeImage) LoadDamaged() (*format.CkptHeader, error) {
	return nil, errors.New("not damaged")
}
func (fi *fakeImage) LoadAGs() error                                { return nil }
func (fi *fakeImage) SkipJournal(*format.CkptHeader) (int, error)   { return 0, nil }
func (fi *fakeImage) SlotDamage() (bool, error)                     { return false, nil }
func (fi *fakeImage) FlushInodes() []error                          { return nil }
func (fi *fakeImage) FoldNodeSpace() error                          { return nil }
func (fi *fakeImage) SkipSeq(n uint64)                              { fi.skipped += n }
func (fi *fakeImage) Checkpoint() error                             { fi.checkpoints++; return nil }
func (fi *fakeImage) Close()                                        {}
func (fi *fakeImage) Super() *format.Super                          { return fi.sb }
func (fi *fakeImage) Trees() []*tree.Tree                           { return fi.trees }
func (fi *fakeImage) ReplaceTree(ag int, keys, vals [][]byte) error { return errors.New("not damaged") }

// Space.
func (fi *fakeImage) Withhold(start, n uint64) {
	for b := start; b < start+n; b++ {
		fi.pager.used[b] = true
	}
}

// Counters.
func (fi *fakeImage) AGCounters(int) (int64, map[StreamKey]int64) {
	return fi.inodes, fi.streams
}
func (fi *fakeImage) SetAGInodes(_ int, n int64)                { fi.inodes = n }
func (fi *fakeImage) SetAGStreams(_ int, m map[StreamKey]int64) { fi.streams = m }
func (fi *fakeImage) NextAgino(int) uint32                      { return fi.next }
func (fi *fakeImage) SetNextAgino(_ int, v uint32)              { fi.next = v }
func (fi *fakeImage) Rotor() uint32                             { return 0 }

// Repairs: none of these images needs a namespace repair.
func (fi *fakeImage) Edit() Edit                          { return fi }
func (fi *fakeImage) NewGen() uint32                      { return 7 }
func (fi *fakeImage) Inode(*format.InodeRec)              { fi.edits++ }
func (fi *fakeImage) Link(uint64, uint64, uint32, string) { fi.edits++ }
func (fi *fakeImage) Unlink(uint64, string)               { fi.edits++ }
func (fi *fakeImage) Done() (bool, error)                 { return fi.edits > 0, nil }

func run(t *testing.T, fi *fakeImage, dev backend.Device, repair bool) *Report {
	t.Helper()
	rep, err := Check(dev, Options{Repair: repair}, fi)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestCheckCleanImage(t *testing.T) {
	fi, dev := newFakeImage(t)
	for _, repair := range []bool{false, true} {
		rep := run(t, fi, dev, repair)
		if rep.ExitCode() != Clean || len(rep.Problems) != 0 || rep.Wrote || fi.checkpoints != 0 {
			t.Fatalf("repair %v: exit %d, wrote %v, %d checkpoints: %q", repair, rep.ExitCode(), rep.Wrote, fi.checkpoints, rep.Problems)
		}
		if rep.Inodes != 2 || rep.Dirs != 1 || rep.Files != 1 || rep.Checkpoint != 5 {
			t.Fatalf("counted %+v", rep)
		}
		// Every data block is accounted for: the node, the file, free space.
		if rep.UsedBlocks != 9 || rep.UsedBlocks+rep.FreeBlocks != fi.sb.BackupBlock-fi.sb.MetaEnd() {
			t.Fatalf("used %d free %d of %d data blocks", rep.UsedBlocks, rep.FreeBlocks, fi.sb.BackupBlock-fi.sb.MetaEnd())
		}
	}
	if fi.edits != 0 {
		t.Fatalf("%d namespace repairs on a clean image", fi.edits)
	}
}

// TestCheckRebuildsFreeSpace: free-space records that leak blocks or cover
// a file are reported by -n and rebuilt by -y, the allocator never offering
// the file's blocks meanwhile, and the next run is clean.
func TestCheckRebuildsFreeSpace(t *testing.T) {
	cases := map[string]struct {
		free func(sb *format.Super) []uint64
		want string
	}{
		"leaked": {
			free: func(sb *format.Super) []uint64 { return []uint64{sb.MetaEnd() + 1, fileBlk - 1} },
			want: "neither free nor in use (leaked): made free",
		},
		"over the file": {
			free: func(sb *format.Super) []uint64 { return []uint64{sb.MetaEnd() + 1, sb.BackupBlock - sb.MetaEnd() - 1} },
			want: "also belong to free space: free space rebuilt",
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			fi, dev := newFakeImage(t)
			fi.setFree(c.free(fi.sb)...)
			rep := run(t, fi, dev, false)
			if rep.ExitCode() != Uncorrected || !strings.Contains(strings.Join(rep.Problems, "\n"), c.want) {
				t.Fatalf("fsck -n: exit %d, want %d and %q: %q", rep.ExitCode(), Uncorrected, c.want, rep.Problems)
			}
			if fi.checkpoints != 0 {
				t.Fatal("fsck -n wrote a checkpoint")
			}
			// Before replay could place a node, the allocator was told the
			// file's blocks are in use, whatever the records say.
			file := fi.sb.MetaEnd() + fileBlk
			for b := file; b < file+8; b++ {
				if !fi.pager.used[b] {
					t.Fatalf("the file's block %d is not withheld from the allocator", b)
				}
			}
			rep = run(t, fi, dev, true)
			if rep.ExitCode() != Corrected || !rep.Wrote || fi.checkpoints != 1 {
				t.Fatalf("fsck -y: exit %d, wrote %v, %d checkpoints: %q", rep.ExitCode(), rep.Wrote, fi.checkpoints, rep.Problems)
			}
			if rep := run(t, fi, dev, false); rep.ExitCode() != Clean {
				t.Fatalf("fsck after repair: %q", rep.Problems)
			}
		})
	}
}

// TestCheckCrossLinkedWritesNothing: two files claiming one block cannot
// be repaired, so -y withdraws its other repairs (here, leaked blocks) and
// writes nothing.
func TestCheckCrossLinkedWritesNothing(t *testing.T) {
	fi, dev := newFakeImage(t)
	other := format.InodeRec{Ino: 3, Mode: syscall.S_IFREG | 0o644, Nlink: 1, Blocks: 1, Gen: 3}
	fi.put(format.InodeKey(3), format.InodeVal(&other))
	fi.put(format.DirentKey(rootIno, "g"), format.DirentVal(3, other.Mode))
	fi.put(format.ExtentKey(3, 0), format.ExtentVal(1, fi.sb.MetaEnd()+fileBlk+3, 0, 0))
	fi.inodes, fi.next = 3, 4
	fi.setFree(fi.sb.MetaEnd()+1, fileBlk-1) // the blocks after the file leak
	rep := run(t, fi, dev, true)
	if rep.ExitCode() != Uncorrected || rep.Wrote || fi.checkpoints != 0 {
		t.Fatalf("exit %d, wrote %v, %d checkpoints: %q", rep.ExitCode(), rep.Wrote, fi.checkpoints, rep.Problems)
	}
	if !strings.Contains(strings.Join(rep.Problems, "\n"), "(inode 3) also belong to inode 2") ||
		!strings.Contains(strings.Join(rep.Problems, "\n"), "(leaked): made free (repairable, not written)") ||
		!strings.Contains(strings.Join(rep.Notes, "\n"), "nothing written") {
		t.Fatalf("problems %q, notes %q", rep.Problems, rep.Notes)
	}
}

// TestCheckBadCommit: a commit the load reports as undecodable is a
// problem; -y moves the journal's sequence past it and writes a checkpoint.
func TestCheckBadCommit(t *testing.T) {
	fi, dev := newFakeImage(t)
	fi.onLoad = func(l Loader) { l.BadCommit(errors.New("commit 9 does not decode")) }
	rep := run(t, fi, dev, false)
	if rep.ExitCode() != Uncorrected || fi.skipped != 0 ||
		!slices.Contains(rep.Problems, "commit 9 does not decode: the journal ends before it") {
		t.Fatalf("fsck -n: exit %d, skipped %d: %q", rep.ExitCode(), fi.skipped, rep.Problems)
	}
	rep = run(t, fi, dev, true)
	if rep.ExitCode() != Corrected || fi.skipped != 1<<32 || fi.checkpoints != 1 {
		t.Fatalf("fsck -y: exit %d, skipped %d, %d checkpoints: %q", rep.ExitCode(), fi.skipped, fi.checkpoints, rep.Problems)
	}
}

// TestCheckRecountsAGHeader: a header the load could not decode is one
// problem (the load's), and -y writes the counts the tree holds.
func TestCheckRecountsAGHeader(t *testing.T) {
	fi, dev := newFakeImage(t)
	fi.onLoad = func(l Loader) {
		fi.inodes, fi.next = 0, 0 // the load starts such an AG from zero
		l.BadAGHeader(0, errors.New("AG 0 header missing"))
	}
	rep := run(t, fi, dev, false)
	if rep.ExitCode() != Uncorrected || len(rep.Problems) != 1 {
		t.Fatalf("fsck -n: exit %d: %q", rep.ExitCode(), rep.Problems)
	}
	rep = run(t, fi, dev, true)
	if rep.ExitCode() != Corrected || fi.checkpoints != 1 || fi.inodes != 2 || fi.next != 3 {
		t.Fatalf("fsck -y: exit %d, %d checkpoints, counters %d/%d: %q", rep.ExitCode(), fi.checkpoints, fi.inodes, fi.next, rep.Problems)
	}
}

// aclVal encodes ACL entries (tag, perm, id each) in the xattr form.
func aclVal(e ...uint32) []byte {
	b := binary.LittleEndian.AppendUint32(nil, format.ACLVersion)
	for i := 0; i+2 < len(e); i += 3 {
		b = binary.LittleEndian.AppendUint16(b, uint16(e[i]))
		b = binary.LittleEndian.AppendUint16(b, uint16(e[i+1]))
		b = binary.LittleEndian.AppendUint32(b, e[i+2])
	}
	return b
}

// TestCheckACLs: a stored ACL the kernel would refuse (a named entry after
// the owning group, which its permission check would misread) is reported
// by -n and removed by -y; a valid one is left alone, and the next run is
// clean.
func TestCheckACLs(t *testing.T) {
	fi, dev := newFakeImage(t)
	const none = 0xffffffff
	good := aclVal(format.ACLUserObj, 7, none, format.ACLUser, 5, 65534, format.ACLGroupObj, 5, none,
		format.ACLMask, 5, none, format.ACLOther, 0, none)
	bad := aclVal(format.ACLUserObj, 7, none, format.ACLGroupObj, 5, none, format.ACLUser, 5, 65534,
		format.ACLMask, 5, none, format.ACLOther, 0, none)
	fi.put(format.XattrKey(rootIno, format.ACLDefaultXattr, 0), good)
	fi.put(format.XattrKey(2, format.ACLAccessXattr, 0), bad)
	fi.put(format.XattrKey(2, "user.other", 0), []byte("not an ACL"))
	rep := run(t, fi, dev, false)
	if len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], "inode 2: stored system.posix_acl_access") || rep.Wrote {
		t.Fatalf("-n: %q, wrote %v", rep.Problems, rep.Wrote)
	}
	rep = run(t, fi, dev, true)
	if rep.ExitCode() != Corrected || fi.checkpoints != 1 {
		t.Fatalf("-y: exit %d, %d checkpoints: %q", rep.ExitCode(), fi.checkpoints, rep.Problems)
	}
	if _, ok, _ := fi.trees[0].Get(format.XattrKey(2, format.ACLAccessXattr, 0)); ok {
		t.Error("-y kept the bad ACL")
	}
	for _, k := range [][]byte{format.XattrKey(rootIno, format.ACLDefaultXattr, 0), format.XattrKey(2, "user.other", 0)} {
		if _, ok, _ := fi.trees[0].Get(k); !ok {
			t.Errorf("-y removed % x", k)
		}
	}
	if rep := run(t, fi, dev, false); len(rep.Problems) != 0 {
		t.Fatalf("after -y: %q", rep.Problems)
	}
}
