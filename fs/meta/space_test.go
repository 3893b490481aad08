package meta

import (
	"errors"
	"math/rand/v2"
	"syscall"
	"testing"

	"github.com/streamfs/streamfs/fs/crashtest/datatag"
	"github.com/streamfs/streamfs/fs/meta/fsck"
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
		mustWrite(t, s, f, datatag.Bytes(f.Ino(), 0, 3000, 1), 0)
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
		mustWrite(t, s, f, datatag.Bytes(f.Ino(), 0, 5000, 1), 0)
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
	rep, err := Fsck(fd, fsck.Options{Repair: true})
	if err != nil {
		t.Fatalf("fsck -y on a full device (%d blocks free): %v", free, err)
	}
	if rep.ExitCode() != fsck.Corrected {
		t.Fatalf("fsck -y on a full device (%d blocks free): exit %d: %v", free, rep.ExitCode(), rep.Problems)
	}
	if rep := mustFsck(t, fd, false); len(rep.Problems) != 0 {
		t.Fatalf("fsck after repair: %v", rep.Problems)
	}
}

// TestFullDeviceRandom runs random operations on a small device kept at
// the edge of full: every error is ENOSPC (or what the operation may
// return anyway), the filesystem never shuts down, and the image checks
// clean. Seeded: the seed is in the test name.
func TestFullDeviceRandom(t *testing.T) {
	steps := 3000
	if testing.Short() {
		steps = 800
	}
	for seed := range uint64(2) {
		t.Run(itoa(seed), func(t *testing.T) {
			fd, _ := newTestImage(t, 48<<20, int64(seed))
			s, err := Open(fd, testOpts())
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(seed, 11))
			dirs := []*Inode{s.Root()}
			for i := 0; i < 3; i++ {
				d, err := s.Create(s.Root(), "d"+itoa(uint64(i)), NewInode{Mode: syscall.S_IFDIR | 0o755})
				if err != nil {
					t.Fatal(err)
				}
				dirs = append(dirs, d)
			}
			ok := func(op string, err error, also ...syscall.Errno) {
				t.Helper()
				if err == nil || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.EEXIST) {
					return
				}
				for _, e := range also {
					if errors.Is(err, e) {
						return
					}
				}
				t.Fatalf("%s: %v (shut down: %v, free %d, room %d)", op, err, s.j.Failed(), s.alloc.FreeBlocks(), s.room())
			}
			name := func() string { return "f" + itoa(uint64(r.IntN(300))) }
			for step := 0; step < steps; step++ {
				d := dirs[r.IntN(len(dirs))]
				n := name()
				switch k := r.IntN(20); {
				case k < 6:
					f, err := s.Lookup(d, n)
					if err != nil {
						f, err = s.Create(d, n, NewInode{Mode: syscall.S_IFREG | 0o644})
						ok("create "+n, err)
						if err != nil {
							continue
						}
					}
					if !f.IsReg() {
						continue
					}
					// Sometimes large, sometimes fragmenting small writes.
					ln := 1 + r.IntN(3<<20)
					if r.IntN(2) == 0 {
						ln = 1 + r.IntN(8192)
					}
					_, err = s.Write(f, make([]byte, ln), int64(r.IntN(8<<20)), WriteOpts{Writeback: r.IntN(2) == 0})
					ok("write "+n, err)
				case k < 9:
					ok("unlink "+n, s.Remove(d, n, false), syscall.EISDIR)
				case k < 11:
					if f, err := s.Lookup(d, n); err == nil && f.IsReg() {
						sz := uint64(r.IntN(4 << 20))
						ok("truncate "+n, s.Setattr(f, SetAttr{Size: &sz}))
					}
				case k < 13:
					if f, err := s.Lookup(d, n); err == nil {
						mode := uint32(r.IntN(0o777))
						ok("chmod "+n, s.Setattr(f, SetAttr{Mode: &mode}))
					}
				case k < 15:
					ok("rename "+n, s.Rename(d, n, dirs[r.IntN(len(dirs))], name(), 0), syscall.EISDIR, syscall.ENOTDIR, syscall.ENOTEMPTY, syscall.EINVAL)
				case k < 17:
					if f, err := s.Lookup(d, n); err == nil {
						if r.IntN(2) == 0 {
							ok("setxattr "+n, s.Setxattr(f, "user.x", make([]byte, r.IntN(4000)), 0))
						} else {
							ok("removexattr "+n, s.Removexattr(f, "user.x"), syscall.ENODATA)
						}
					}
				case k < 18:
					if f, err := s.Lookup(d, n); err == nil && f.IsReg() {
						off := int64(r.IntN(4 << 20))
						mode := uint32(0)
						if r.IntN(2) == 0 {
							mode = FallocPunchHole | FallocKeepSize
						}
						ok("fallocate "+n, s.Fallocate(f, off, int64(1+r.IntN(1<<20)), mode))
					}
				case k < 19:
					if f, err := s.Lookup(d, n); err == nil {
						ok("fsync "+n, s.Fsync(f))
					}
				default:
					ok("sync", s.SyncAll())
				}
				if s.j.Failed() {
					t.Fatalf("step %d: the filesystem shut down", step)
				}
			}
			t.Logf("%d steps, free %d blocks, reserve %d, checkpoints %d", steps, s.alloc.FreeBlocks(), s.metaReserve, s.stats.checkpoints.Load())
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if rep := mustFsck(t, fd, false); len(rep.Problems) != 0 {
				t.Fatalf("fsck: %v", rep.Problems)
			}
		})
	}
}
