package meta

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/streamfs/streamfs/fs/format"
)

// A crafted image whose extent maps file data onto the superblock, the
// journal or past the data area: reads and writes of the file fail with
// EIO (ErrCorrupt), the metadata blocks are neither read into the file nor
// overwritten, and removing the file never hands metadata blocks to the
// free space.
func TestExtentOutsideDataArea(t *testing.T) {
	base := fsckImageN(t, 2)
	gName := strings.Repeat("n", 100) + "0"
	sb, _ := treeBlocks(t, base)
	cases := map[string]uint64{
		"superblock":   0,
		"journal":      sb.JournalStart + 1,
		"backup super": sb.BackupBlock,
		"past the end": sb.TotalBlocks + 10,
	}
	for name, pblk := range cases {
		t.Run(name, func(t *testing.T) {
			p := damagedCopy(t, base, false, func(s *Store) {
				// The first 4 blocks of f and of g (a file with one link)
				// now claim device blocks at pblk.
				for _, in := range []*Inode{lookupPath(t, s, "f"), lookupPath(t, s, "d", gName)} {
					if err := s.treeFor(in.Ino()).Put(format.ExtentKey(in.Ino(), 0), format.ExtentVal(4, pblk, 0, 0)); err != nil {
						t.Fatal(err)
					}
				}
			})
			fd := openImage(t, p)
			// The superblocks and the blocks the extent names (those on
			// the device): nothing may write them.
			meta := func() []byte {
				var out []byte
				for _, b := range []uint64{0, sb.BackupBlock, pblk, pblk + 1, pblk + 2, pblk + 3} {
					if b >= sb.TotalBlocks {
						continue
					}
					buf := make([]byte, sb.BlockSize)
					if err := fd.ReadAt(buf, int64(b)*int64(sb.BlockSize)); err != nil {
						t.Fatal(err)
					}
					out = append(out, buf...)
				}
				return out
			}
			before := meta()
			o := testOpts()
			log, logs := observed()
			o.Logger = log
			s, err := Open(fd, o)
			if err != nil {
				t.Fatal(err)
			}
			f, err := s.Lookup(s.Root(), "f")
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 8192)
			if n, err := s.Read(f, buf, 0); !errors.Is(err, format.ErrCorrupt) {
				t.Errorf("read of the crafted extent: %d bytes, %v; want ErrCorrupt", n, err)
			}
			if n, err := s.Write(f, bytes.Repeat([]byte{0xee}, 8192), 0, WriteOpts{}); !errors.Is(err, format.ErrCorrupt) {
				t.Errorf("write over the crafted extent: %d bytes, %v; want ErrCorrupt", n, err)
			}
			if _, err := s.ExtentRange(f, 0, 4); !errors.Is(err, format.ErrCorrupt) {
				t.Errorf("extent range: %v; want ErrCorrupt", err)
			}
			if n := logs.FilterMessageSnippet("corrupt extent").Len(); n != 1 {
				t.Errorf("%d log lines about the corrupt extent after three refusals, want 1", n)
			}
			// Removing the file must not free the metadata blocks: the
			// operation fails (the filesystem shuts down) instead.
			if err := s.Remove(lookupPath(t, s, "d"), gName, false); err == nil {
				t.Errorf("removing the file with the crafted extent succeeded")
			}
			if free := s.alloc.FreeBlocks(); free > s.sb.BackupBlock-s.sb.MetaEnd() {
				t.Errorf("%d blocks free, more than the data area", free)
			}
			s.Close()
			if after := meta(); !bytes.Equal(before, after) {
				t.Errorf("a superblock or a block the crafted extent names changed")
			}
			fd.Close()
			// fsck -y drops such extents (the files get holes).
			fsckRepairCycle(t, p, "outside the data area")
		})
	}
}

// lookupPath finds the inode at the path made of names from the root.
func lookupPath(t *testing.T, s *Store, names ...string) *Inode {
	t.Helper()
	in := s.Root()
	for _, n := range names {
		var err error
		if in, err = s.Lookup(in, n); err != nil {
			t.Fatalf("lookup %q: %v", n, err)
		}
	}
	return in
}
