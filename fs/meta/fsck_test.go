package meta

import (
	"bytes"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/streamfs/streamfs/backend"
	"github.com/streamfs/streamfs/backend/faulty"
	"github.com/streamfs/streamfs/fs/crashtest/datatag"
	"github.com/streamfs/streamfs/fs/format"
	"github.com/streamfs/streamfs/fs/meta/fsck"
	"github.com/streamfs/streamfs/fs/meta/wal"
)

// fsckImage makes a populated filesystem (directories, files with data,
// a hard link, a symlink, xattrs, a big directory spanning tree nodes) and
// returns its image path, cleanly unmounted.
func fsckImage(t *testing.T) string { t.Helper(); return fsckImageN(t, 300) }

// fsckImageN is fsckImage with n files in the big directory.
func fsckImageN(t *testing.T, n int) string {
	t.Helper()
	fd, path, s, d := openWithDir(t, 1, 0)
	for i := 0; i < n; i++ {
		f := mustCreate(t, s, d, strings.Repeat("n", 100)+itoa(uint64(i)))
		mustWrite(t, s, f, datatag.Bytes(f.Ino(), 0, 5000, 1), 0)
	}
	f := mustCreate(t, s, s.Root(), "f")
	mustWrite(t, s, f, datatag.Bytes(f.Ino(), 0, 1<<20, 1), 0)
	if err := s.Link(d, "hard", f); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(s.Root(), "sym", NewInode{Mode: syscall.S_IFLNK | 0o777, Target: strings.Repeat("t", 1500)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Setxattr(f, "user.big", make([]byte, 3000), 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	fd.Close() // releases the device lock for the checks
	return path
}

// openWithDir makes a 64 MiB filesystem and opens it with a directory "d"
// in the root (with write stream stream unless 0).
func openWithDir(t *testing.T, seed int64, stream uint32) (fd *faulty.Device, path string, s *Store, d *Inode) {
	t.Helper()
	fd, path = newTestImage(t, 64<<20, seed)
	s, err := Open(fd, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	if d, err = s.Create(s.Root(), "d", NewInode{Mode: syscall.S_IFDIR | 0o755}); err != nil {
		t.Fatal(err)
	}
	if stream != 0 {
		if err := s.SetStream(d, stream); err != nil {
			t.Fatal(err)
		}
	}
	return fd, path, s, d
}

func itoa(v uint64) string { return strconv.FormatUint(v, 10) }

// openImage opens an image file through a faulty device (for Fsck/Open).
func openImage(t *testing.T, path string) *faulty.Device {
	t.Helper()
	inner, err := backend.OpenFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	fd := faulty.New(inner, 1)
	t.Cleanup(func() { fd.Close() })
	return fd
}

// copyFile copies the image src, keeping it sparse: only its data
// regions are written (SEEK_DATA/SEEK_HOLE), so a copy of a mostly empty
// 64 MiB image does not make the next device flush write 64 MiB.
func copyFile(t *testing.T, src string) string {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir() + "/img"
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if err := out.Truncate(st.Size()); err != nil {
		t.Fatal(err)
	}
	fd := int(in.Fd())
	for off := int64(0); off < st.Size(); {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if err != nil { // ENXIO: no data after off
			break
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(io.NewOffsetWriter(out, data), io.NewSectionReader(in, data, hole-data)); err != nil {
			t.Fatal(err)
		}
		off = hole
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return dst
}

func fsckRun(t *testing.T, path string, repair bool) *fsck.Report {
	t.Helper()
	return fsckOn(t, openImage(t, path), repair)
}

// fsckOn runs fsck on dev and closes it.
func fsckOn(t *testing.T, dev backend.Device, repair bool) *fsck.Report {
	t.Helper()
	defer dev.Close()
	rep, err := Fsck(dev, fsck.Options{Repair: repair})
	if err != nil {
		t.Fatalf("fsck: %v", err)
	}
	return rep
}

// treeBlocks lists the tree node blocks of a clean image.
func treeBlocks(t *testing.T, path string) (*format.Super, []uint64) {
	sb, blks, _ := imageLayout(t, path)
	return sb, blks
}

// imageLayout returns the superblock, the tree node blocks and the
// namespace (readTree) of a clean image.
func imageLayout(t *testing.T, path string) (*format.Super, []uint64, map[string]uint64) {
	t.Helper()
	fd := openImage(t, path)
	defer fd.Close()
	s, err := Open(fd, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var blks []uint64
	for _, tr := range s.trees {
		if err := tr.Blocks(func(b uint64) { blks = append(blks, b) }); err != nil {
			t.Fatal(err)
		}
	}
	return s.sb, blks, readTree(t, s)
}

// fsckRepairCycle runs fsck -n (errors left: exit 4, and one problem
// containing want), fsck -y (every error corrected: exit 1, a checkpoint
// written) and fsck -n again (clean) on the damaged image p.
func fsckRepairCycle(t *testing.T, p, want string) {
	t.Helper()
	rep := fsckRun(t, p, false)
	if rep.ExitCode() != fsck.Uncorrected || !strings.Contains(strings.Join(rep.Problems, "\n"), want) {
		t.Fatalf("fsck -n: exit %d, want %d and a problem with %q: %q", rep.ExitCode(), fsck.Uncorrected, want, rep.Problems)
	}
	rep = fsckRun(t, p, true)
	if rep.ExitCode() != fsck.Corrected || !rep.Wrote {
		t.Fatalf("fsck -y: exit %d (wrote %v): %q", rep.ExitCode(), rep.Wrote, rep.Problems)
	}
	if rep = fsckRun(t, p, false); len(rep.Problems) != 0 {
		t.Fatalf("fsck after repair: %q", rep.Problems)
	}
}

func corruptAt(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	fh, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if _, err := fh.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// Damage to any tree node or checkpoint slot is reported (exit 4), never a
// panic or "clean"; a mount of the damaged image fails with an error or
// works read-only without panicking.
func TestFsckReportsDamagedStructures(t *testing.T) {
	img := fsckImage(t)
	if rep := fsckRun(t, img, false); len(rep.Problems) != 0 {
		t.Fatalf("fresh image: %v", rep.Problems)
	}
	sb, blks := treeBlocks(t, img)
	if len(blks) < 4 {
		t.Fatalf("only %d tree nodes", len(blks))
	}
	bs := int64(sb.BlockSize)
	cases := map[string]func(string){
		"checkpoint slot 0": func(p string) { corruptAt(t, p, int64(sb.CkptStart)*bs+9, []byte{0xff}) },
		"checkpoint slot 1": func(p string) { corruptAt(t, p, int64(sb.CkptStart+sb.CkptBlocks)*bs+9, []byte{0xff}) },
	}
	for i, b := range blks {
		if i%max(1, len(blks)/sized(6, 3)) != 0 {
			continue
		}
		blk := b
		cases["tree node "+itoa(blk)+" header"] = func(p string) { corruptAt(t, p, int64(blk)*bs+20, []byte{0x5a}) }
		cases["tree node "+itoa(blk)+" body"] = func(p string) { corruptAt(t, p, int64(blk)*bs+bs/2, []byte{0x5a, 0xa5}) }
	}
	for name, damage := range cases {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			p := copyFile(t, img)
			damage(p)
			rep := fsckRun(t, p, false)
			if len(rep.Problems) == 0 {
				t.Fatalf("fsck says clean after damage to %s", name)
			}
			if rep.ExitCode() != fsck.Uncorrected {
				t.Fatalf("exit %d, want %d: %v", rep.ExitCode(), fsck.Uncorrected, rep.Problems)
			}
			fd := openImage(t, p)
			defer fd.Close()
			if s, err := Open(fd, Options{ReadOnly: true}); err == nil {
				s.Close()
			}
		})
	}
	// Roots that do not verify under a valid header are what a crash in
	// the middle of a checkpoint leaves: fsck says so (a note, not an
	// error) as long as the checkpoint in use and the journal hold
	// everything, and the filesystem mounts.
	// The slot not in use is the one a checkpoint was writing.
	p := copyFile(t, img)
	pfd := openImage(t, p)
	found, err := wal.ReadCheckpoint(pfd, wal.GeometryOf(sb))
	pfd.Close()
	if err != nil {
		t.Fatal(err)
	}
	corruptAt(t, p, int64(sb.CkptStart+uint64(1-found.Slot)*sb.CkptBlocks+1)*bs+3, []byte{0xff})
	rep := fsckRun(t, p, false)
	if len(rep.Notes) == 0 || len(rep.Problems) != 0 {
		t.Fatalf("checkpoint roots damaged: notes %v, problems %v; want a note only", rep.Notes, rep.Problems)
	}
	fd := openImage(t, p)
	defer fd.Close()
	s, err := Open(fd, testOpts())
	if err != nil {
		t.Fatalf("mount with one checkpoint slot's roots damaged: %v", err)
	}
	s.Close()
}

// Logical damage that fsck -y can repair: link counts, block counts,
// dangling entries, a directory's parent pointer. The second run is clean.
func TestFsckRepairs(t *testing.T) {
	cases := map[string]func(s *Store){
		"link count": func(s *Store) {
			f, _ := s.Lookup(s.Root(), "f")
			a := f.attr
			a.Nlink = 7
			s.applyInode(&a)
		},
		"block count": func(s *Store) {
			f, _ := s.Lookup(s.Root(), "f")
			a := f.attr
			a.Blocks = 3
			s.applyInode(&a)
		},
		"dangling entry": func(s *Store) {
			tx := &txn{s: s}
			tx.link(RootIno, 0x4242, syscall.S_IFREG, "ghost")
		},
		"parent pointer": func(s *Store) {
			d, _ := s.Lookup(s.Root(), "d")
			a := d.attr
			a.Parent = 0x777
			s.applyInode(&a)
		},
	}
	for name, damage := range cases {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			p := fsckImage(t)
			fd := openImage(t, p)
			s, err := Open(fd, testOpts())
			if err != nil {
				t.Fatal(err)
			}
			// Damage the trees directly (no journal record) and checkpoint.
			s.opLock.Lock()
			damage(s)
			s.opLock.Unlock()
			s.itab = newInodeTable() // forget cached attributes
			if err := s.checkpoint(); err != nil {
				t.Fatal(err)
			}
			s.Close()
			fd.Close()
			fsckRepairCycle(t, p, "")
			fd = openImage(t, p)
			s, err = Open(fd, testOpts())
			if err != nil {
				t.Fatalf("mount after repair: %v", err)
			}
			readTree(t, s)
			s.Close()
		})
	}
}

// Free-space records that disagree with what is in use: fsck -n reports
// them, fsck -y rebuilds the records from the files' extents and the tree
// nodes, a second fsck is clean, and after the repair the filesystem fills
// its free space without touching a file's blocks.
func TestFsckRebuildsFreeSpace(t *testing.T) {
	base := fsckImageN(t, 20)
	// lastFree returns the last free extent of AG ag of at least 8
	// blocks. Data comes from the front of free space and tree nodes from
	// its top, so records planted below start stay out of the way of the
	// nodes the damaging session's own checkpoint allocates.
	lastFree := func(t *testing.T, s *Store, ag int) (uint64, uint64) {
		var start, n uint64
		s.trees[ag].Ascend(format.FreePrefix(), func(k, v []byte) bool {
			fs, fn, err := format.DecodeFree(k, v)
			if err == nil && fn >= 8 {
				start, n = fs, fn
			}
			return err == nil
		})
		if n == 0 {
			t.Fatalf("no free extent in AG %d", ag)
		}
		return start, n
	}
	cases := map[string]struct {
		damage func(t *testing.T, s *Store)
		want   string
	}{
		"free over a file": {func(t *testing.T, s *Store) {
			f, _ := s.Lookup(s.Root(), "f")
			exts, err := s.Extents(f)
			if err != nil || len(exts) == 0 {
				t.Fatal(exts, err)
			}
			if err := s.spaceFree(exts[0].PBlk, 1); err != nil {
				t.Fatal(err)
			}
		}, "also belong to free space"},
		"leaked blocks": {func(t *testing.T, s *Store) {
			start, n := lastFree(t, s, 0)
			if err := s.spaceUse(start+n-6, 5); err != nil {
				t.Fatal(err)
			}
		}, "leaked"},
		"overlapping free records": {func(t *testing.T, s *Store) {
			start, _ := lastFree(t, s, 1)
			s.trees[1].Put(format.FreeKey(start-2), format.FreeVal(3))
		}, "(free space) also belong to free space"},
		"free record in another AG": {func(t *testing.T, s *Store) {
			start, n := lastFree(t, s, 1)
			s.trees[0].Put(format.FreeKey(start+n-5), format.FreeVal(4))
		}, "recorded in AG 0's tree"},
		"free record over the metadata area": {func(t *testing.T, s *Store) {
			s.trees[0].Put(format.FreeKey(s.sb.MetaEnd()-2), format.FreeVal(1))
		}, "also belong to the metadata area"},
		"malformed free record": {func(t *testing.T, s *Store) {
			start, _ := lastFree(t, s, 2)
			s.trees[2].Put(format.FreeKey(start-1), []byte{1})
		}, "free-space entry"},
	}
	for name, c := range cases {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			p := damagedCopy(t, base, false, func(s *Store) { c.damage(t, s) })
			fsckRepairCycle(t, p, c.want)
			// Fill the free space: no new data may land on f's blocks.
			fd := openImage(t, p)
			s, err := Open(fd, testOpts())
			if err != nil {
				t.Fatalf("mount after repair: %v", err)
			}
			f, _ := s.Lookup(s.Root(), "f")
			want := datatag.Bytes(f.Ino(), 0, 1<<20, 1)
			// Preallocation takes the space without writing it: the fsck
			// below finds any extent that overlaps f's.
			for i := 0; ; i++ {
				g, err := s.Create(s.Root(), "fill"+itoa(uint64(i)), NewInode{Mode: syscall.S_IFREG | 0o644})
				if err != nil {
					break
				}
				if err := s.Fallocate(g, 0, 4<<20, 0); err != nil {
					break
				}
			}
			if free := s.alloc.FreeBlocks(); free > s.sb.TotalBlocks/10 {
				t.Fatalf("filling left %d of %d blocks free", free, s.sb.TotalBlocks)
			}
			if err := s.SyncAll(); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, len(want))
			if n, err := s.Read(f, got, 0); err != nil || n != len(want) || !bytes.Equal(got, want) {
				t.Fatalf("f after filling the repaired filesystem: %d bytes, %v, equal %v", n, err, bytes.Equal(got, want))
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			fd.Close()
			if rep := fsckRun(t, p, false); len(rep.Problems) != 0 {
				t.Fatalf("fsck after filling the repaired filesystem: %q", rep.Problems)
			}
		})
	}
}

// fsck -y rebuilds a tree with a damaged node from the entries reachable
// through valid nodes, whether the damage stops the load or not: the
// second run is clean, and the filesystem mounts and reads; what the lost
// node held is dropped or reattached under lost+found.
func TestFsckRebuildsDamagedTrees(t *testing.T) {
	base := fsckImageN(t, 150)
	sb, blks, before := imageLayout(t, base)
	bs := int64(sb.BlockSize)
	for i, blk := range blks {
		if i%max(1, len(blks)/sized(8, 4)) != 0 {
			continue
		}
		t.Run("node_"+itoa(blk), func(t *testing.T) {
			p := copyFile(t, base)
			corruptAt(t, p, int64(blk)*bs+bs/2, []byte{0x5a, 0xa5})
			if rep := fsckRun(t, p, false); rep.ExitCode() != fsck.Uncorrected {
				t.Fatalf("fsck -n: exit %d: %q", rep.ExitCode(), rep.Problems)
			}
			rep := fsckRun(t, p, true)
			t.Logf("fsck -y: %q", rep.Problems)
			if rep.ExitCode() != fsck.Corrected || !rep.Wrote {
				t.Fatalf("fsck -y: exit %d (wrote %v): %q", rep.ExitCode(), rep.Wrote, rep.Problems)
			}
			if rep := fsckRun(t, p, false); len(rep.Problems) != 0 {
				t.Fatalf("fsck after rebuild: %q", rep.Problems)
			}
			fd := openImage(t, p)
			defer fd.Close()
			s, err := Open(fd, testOpts())
			if err != nil {
				t.Fatalf("mount after rebuild: %v", err)
			}
			after := readTree(t, s)
			for name, ino := range after {
				if strings.HasPrefix(name, "lost+found") {
					continue
				}
				if before[name] != ino {
					t.Errorf("%s is inode %d after the rebuild, %d before", name, ino, before[name])
				}
			}
			// The rebuilt filesystem takes changes.
			g := mustCreate(t, s, s.Root(), "after-rebuild")
			mustWrite(t, s, g, datatag.Bytes(g.Ino(), 0, 100000, 2), 0)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			fd.Close()
			if rep := fsckRun(t, p, false); len(rep.Problems) != 0 {
				t.Fatalf("fsck after using the rebuilt filesystem: %q", rep.Problems)
			}
		})
	}
}
