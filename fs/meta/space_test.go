package meta

import (
	"errors"
	"syscall"
	"testing"
)

// fillDevice writes one file until the allocator refuses, then commits and
// checkpoints: what is left is the reserve the filesystem keeps.
func fillDevice(t *testing.T, s *Store, name string) *Inode {
	t.Helper()
	big := mustCreate(t, s, s.Root(), name)
	buf := make([]byte, 1<<20)
	var off int64
	for {
		w, err := s.Write(big, buf, off, WriteOpts{})
		off += int64(w)
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling: %v", err)
			}
			break
		}
	}
	if err := s.Fsync(big); err != nil {
		t.Fatal(err)
	}
	if err := s.checkpoint(); err != nil {
		t.Fatal(err)
	}
	return big
}

// fragmented writes every other block of a and b, so each has n extents.
func fragmented(t *testing.T, s *Store, a, b *Inode, n int) {
	t.Helper()
	blk := make([]byte, s.bs)
	for i := 0; i < n; i++ {
		mustWrite(t, s, a, blk, int64(2*i)*int64(s.bs))
		mustWrite(t, s, b, blk, int64(2*i)*int64(s.bs))
	}
	if ea, _ := s.Extents(a); len(ea) != n {
		t.Fatalf("%d extents in a file written to have %d", len(ea), n)
	}
}

// TestFullDeviceOperations: on a device filled to the last block data may
// use, every operation that frees space or keeps the metadata's size works
// — chmod, utimes, setxattr's removal, rename, truncate, unlink of small
// and of fragmented files (freed a few extents per transaction), rmdir —
// operations that need new space fail with ENOSPC, and nothing shuts the
// filesystem down. The image is clean afterwards and fsck -y works on it.
func TestFullDeviceOperations(t *testing.T) {
	fd, _ := newTestImage(t, 64<<20, 1)
	s, err := Open(fd, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.Create(s.Root(), "d", NewInode{Mode: syscall.S_IFDIR | 0o755})
	if err != nil {
		t.Fatal(err)
	}
	n := 2000
	if testing.Short() {
		n = 600
	}
	var files []*Inode
	for i := 0; i < n; i++ {
		f := mustCreate(t, s, d, "f"+itoa(uint64(i)))
		mustWrite(t, s, f, tagged(f.Ino(), 0, 3000, 1), 0)
		if i%10 == 0 {
			if err := s.Setxattr(f, "user.x", make([]byte, 700), 0); err != nil {
				t.Fatal(err)
			}
		}
		files = append(files, f)
	}
	fa, fb := mustCreate(t, s, s.Root(), "fa"), mustCreate(t, s, s.Root(), "fb")
	fragmented(t, s, fa, fb, 300)
	fillDevice(t, s, "big")
	t.Logf("full: %d blocks free, reserve %d, tree height %d", s.alloc.FreeBlocks(), s.metaReserve, s.treeHeight.Load())

	// Growth is refused with ENOSPC, and nothing else happens.
	if _, err := s.Create(s.Root(), "more", NewInode{Mode: syscall.S_IFREG | 0o644}); err != nil && !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("create on a full device: %v", err)
	}
	if _, err := s.Write(fb, make([]byte, 1<<20), 1<<30, WriteOpts{}); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write on a full device: %v, want ENOSPC", err)
	}

	must := func(what string, i int, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s of file %d on a full device: %v (shut down: %v, free %d)", what, i, err, s.j.Failed(), s.alloc.FreeBlocks())
		}
	}
	mode, ts := uint32(0o600), int64(12345)
	for i, f := range files {
		must("chmod", i, s.Setattr(f, SetAttr{Mode: &mode}))
		must("utimes", i, s.Setattr(f, SetAttr{Atime: &ts, Mtime: &ts}))
		if i%10 == 0 {
			must("removexattr", i, s.Removexattr(f, "user.x"))
		}
		must("rename", i, s.Rename(d, "f"+itoa(uint64(i)), d, "g"+itoa(uint64(i)), 0))
	}
	half := uint64(150) * s.bs
	must("truncate of a fragmented file", 0, s.Setattr(fa, SetAttr{Size: &half}))
	for i := range files {
		must("unlink", i, s.Remove(d, "g"+itoa(uint64(i)), false))
	}
	must("unlink of a fragmented file", 0, s.Remove(s.Root(), "fa", false))
	must("unlink of a fragmented file", 1, s.Remove(s.Root(), "fb", false))
	must("rmdir", 0, s.Remove(s.Root(), "d", true))
	must("unlink of the big file", 0, s.Remove(s.Root(), "big", false))
	if s.j.Failed() {
		t.Fatal("the filesystem shut down")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if rep := mustFsck(t, fd, false); len(rep.Problems) != 0 {
		t.Fatalf("fsck after the full-device operations: %v", rep.Problems)
	}
}

// TestFsckRepairOnFullDevice: fsck -y rewrites the trees of a device whose
// data area is full (a repair copies the nodes it changes, from the
// reserve).
func TestFsckRepairOnFullDevice(t *testing.T) {
	fd, _ := newTestImage(t, 64<<20, 1)
	s, err := Open(fd, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200; i++ {
		f := mustCreate(t, s, s.Root(), "f"+itoa(uint64(i)))
		mustWrite(t, s, f, tagged(f.Ino(), 0, 5000, 1), 0)
	}
	fillDevice(t, s, "big")
	// Damage: every inode's block count is off by one, which fsck -y
	// rewrites: a change to every inode record.
	s.opLock.Lock()
	for i := 0; i < 200; i++ {
		in, err := s.Lookup(s.Root(), "f"+itoa(uint64(i)))
		if err != nil {
			s.opLock.Unlock()
			t.Fatal(err)
		}
		in.attr.Blocks++
		if err := s.applyInode(&in.attr); err != nil {
			s.opLock.Unlock()
			t.Fatal(err)
		}
	}
	s.opLock.Unlock()
	if err := s.checkpoint(); err != nil {
		t.Fatal(err)
	}
	free := s.alloc.FreeBlocks()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := Fsck(fd, FsckOptions{Repair: true})
	if err != nil {
		t.Fatalf("fsck -y on a full device (%d blocks free): %v", free, err)
	}
	if rep.ExitCode() != FsckCorrected {
		t.Fatalf("fsck -y on a full device (%d blocks free): exit %d: %v", free, rep.ExitCode(), rep.Problems)
	}
	if rep := mustFsck(t, fd, false); len(rep.Problems) != 0 {
		t.Fatalf("fsck after repair: %v", rep.Problems)
	}
}
