package meta

import (
	"strings"
	"syscall"
	"testing"

	"github.com/streamfs/streamfs/backend/faulty"
)

// fsckTree is a small tree: /a, /a/b, /a/f1 (with a second link /h),
// /a/b/f2 and /x, each file with data.
type fsckTree struct {
	a, b, f1, f2, x *Inode
}

func makeFsckTree(t *testing.T, s *Store) fsckTree {
	t.Helper()
	mkdir := func(d *Inode, name string) *Inode {
		in, err := s.Create(d, name, NewInode{Mode: syscall.S_IFDIR | 0o755})
		if err != nil {
			t.Fatal(err)
		}
		return in
	}
	var tr fsckTree
	tr.a = mkdir(s.Root(), "a")
	tr.b = mkdir(tr.a, "b")
	tr.f1 = mustCreate(t, s, tr.a, "f1")
	tr.f2 = mustCreate(t, s, tr.b, "f2")
	tr.x = mustCreate(t, s, s.Root(), "x")
	for _, f := range []*Inode{tr.f1, tr.f2, tr.x} {
		mustWrite(t, s, f, tagged(f.Ino(), 0, 3*4096, 1), 0)
	}
	if err := s.Link(s.Root(), "h", tr.f1); err != nil {
		t.Fatal(err)
	}
	if err := s.SyncAll(); err != nil {
		t.Fatal(err)
	}
	return tr
}

// corruptAndCrash applies corrupt to the in-memory state, writes it as a
// checkpoint and crashes.
func corruptAndCrash(t *testing.T, s *Store, fd *faulty.Device, corrupt func()) {
	t.Helper()
	s.opLock.Lock()
	corrupt()
	s.opLock.Unlock()
	s.j.commitMu.Lock()
	err := s.j.checkpointLocked()
	s.j.commitMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	crash(t, s, fd)
}

func TestFsckFindsAndRepairs(t *testing.T) {
	cases := []struct {
		name    string
		corrupt func(s *Store, tr fsckTree)
		after   func(t *testing.T, s *Store, tr fsckTree)
	}{
		{name: "dangling entry", corrupt: func(s *Store, tr fsckTree) { s.Root().dir["ghost"] = 0x4242 }},
		{name: "file link count", corrupt: func(s *Store, tr fsckTree) { tr.f1.attr.Nlink = 5 },
			after: func(t *testing.T, s *Store, tr fsckTree) {
				if n := s.Get(tr.f1.Ino()).Attr().Nlink; n != 2 {
					t.Fatalf("f1 nlink %d, want 2", n)
				}
			}},
		{name: "directory link count", corrupt: func(s *Store, tr fsckTree) { tr.a.attr.Nlink = 7 }},
		{name: "parent pointer", corrupt: func(s *Store, tr fsckTree) { tr.b.attr.Parent = RootIno },
			after: func(t *testing.T, s *Store, tr fsckTree) {
				if p := s.Get(tr.b.Ino()).Attr().Parent; p != tr.a.Ino() {
					t.Fatalf("b parent %d, want %d", p, tr.a.Ino())
				}
			}},
		{name: "unreachable directory", corrupt: func(s *Store, tr fsckTree) { delete(s.Root().dir, "a") },
			after: func(t *testing.T, s *Store, tr fsckTree) {
				lf, err := s.Lookup(s.Root(), "lost+found")
				if err != nil {
					t.Fatal(err)
				}
				ents, _ := s.Readdir(lf)
				if len(ents) != 1 || ents[0].Ino != tr.a.Ino() {
					t.Fatalf("lost+found holds %v, want a (%d)", ents, tr.a.Ino())
				}
				if _, err := s.Lookup(s.Get(tr.a.Ino()), "b"); err != nil {
					t.Fatal("a lost its subtree")
				}
			}},
		{name: "directory cycle", corrupt: func(s *Store, tr fsckTree) { tr.b.dir["loop"] = tr.a.Ino() },
			after: func(t *testing.T, s *Store, tr fsckTree) {
				if _, err := s.Lookup(s.Get(tr.b.Ino()), "loop"); err == nil {
					t.Fatal("cycle entry kept")
				}
			}},
		{name: "unreachable cycle", corrupt: func(s *Store, tr fsckTree) {
			delete(s.Root().dir, "a")
			tr.b.dir["loop"] = tr.a.Ino()
		}},
		{name: "file without entry", corrupt: func(s *Store, tr fsckTree) { delete(s.Root().dir, "x") },
			after: func(t *testing.T, s *Store, tr fsckTree) {
				lf, err := s.Lookup(s.Root(), "lost+found")
				if err != nil {
					t.Fatal(err)
				}
				in, err := s.Lookup(lf, "#"+itoa(tr.x.Ino()))
				if err != nil || in.Ino() != tr.x.Ino() {
					t.Fatalf("x not in lost+found: %v", err)
				}
				if got := readAll(t, s, in); len(got) != 3*4096 {
					t.Fatalf("x lost data: %d bytes", len(got))
				}
			}},
		{name: "overlapping extents", corrupt: func(s *Store, tr fsckTree) {
			x := tr.f1.ext.ext[0]
			tr.f2.ext.set(Extent{LBlk: 100, Len: 2, PBlk: x.PBlk})
		}, after: func(t *testing.T, s *Store, tr fsckTree) {
			// The inode checked later (the higher number) loses the extent.
			if tr.f1.Ino() < tr.f2.Ino() {
				if got := readAll(t, s, s.Get(tr.f1.Ino())); !tagsOK(tr.f1.Ino(), got) {
					t.Fatal("f1 (the lower inode) lost its data")
				}
				if n := len(s.Get(tr.f2.Ino()).Extents()); n != 1 {
					t.Fatalf("f2 has %d extents, want its 1", n)
				}
			} else if got := s.Get(tr.f2.Ino()).Extents(); len(got) != 2 {
				t.Fatalf("f2 (the lower inode) has extents %v, want 2", got)
			}
		}},
		{name: "extent in the metadata area", corrupt: func(s *Store, tr fsckTree) {
			tr.f2.ext.set(Extent{LBlk: 100, Len: 1, PBlk: 20})
		}},
		{name: "extents on a directory", corrupt: func(s *Store, tr fsckTree) {
			x := tr.x.ext.ext[0]
			tr.x.ext.ext = nil
			tr.b.ext.set(x)
		}},
		{name: "root not a directory", corrupt: func(s *Store, tr fsckTree) {
			s.Root().attr.Mode = syscall.S_IFREG | 0o644
		}},
		{name: "primary superblock", corrupt: func(s *Store, tr fsckTree) {}},
		{name: "backup superblock", corrupt: func(s *Store, tr fsckTree) {}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fd, _ := newTestImage(t, 32<<20, int64(i))
			s, err := Open(fd, testOpts())
			if err != nil {
				t.Fatal(err)
			}
			tr := makeFsckTree(t, s)
			corruptAndCrash(t, s, fd, func() { c.corrupt(s, tr) })
			switch c.name {
			case "primary superblock":
				fd.Inner().WriteAt(make([]byte, 4096), 0, 0)
			case "backup superblock":
				fd.Inner().WriteAt([]byte("garbage"), fd.Size()-4096+100, 0)
			}
			writes := fd.Stats().Writes
			rep, err := Fsck(fd, FsckOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if rep.ExitCode() != FsckUncorrected || fd.Stats().Writes != writes {
				t.Fatalf("fsck -n: exit %d, %d writes; problems %q", rep.ExitCode(), fd.Stats().Writes-writes, rep.Problems)
			}
			t.Logf("found: %s", strings.Join(rep.Problems, "; "))
			rep, err = Fsck(fd, FsckOptions{Repair: true})
			if err != nil {
				t.Fatal(err)
			}
			if rep.ExitCode() != FsckCorrected || !rep.Wrote {
				t.Fatalf("fsck -y: exit %d; problems %q", rep.ExitCode(), rep.Problems)
			}
			rep = mustFsck(t, fd, false)
			if s, err = Open(fd, testOpts()); err != nil {
				t.Fatalf("mount after repair: %v", err)
			}
			defer s.Close()
			if c.after != nil {
				c.after(t, s, tr)
			}
		})
	}
}

func itoa(v uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(b[i:])
		}
	}
}

func tagsOK(ino uint64, data []byte) bool {
	for off, b := range data {
		if b == 0 || !tagOK(ino, int64(off), b) {
			return false
		}
	}
	return true
}

// Orphans (unlinked while open) are no error: the next mount frees them.
func TestFsckOrphanIsNoError(t *testing.T) {
	fd, _ := newTestImage(t, 32<<20, 9)
	s, err := Open(fd, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	f := mustCreate(t, s, s.Root(), "f")
	mustWrite(t, s, f, make([]byte, 10000), 0)
	s.OpenFile(f)
	if err := s.Remove(s.Root(), "f", false); err != nil {
		t.Fatal(err)
	}
	if err := s.Fsync(f); err != nil {
		t.Fatal(err)
	}
	crash(t, s, fd)
	rep := mustFsck(t, fd, true)
	if rep.Orphans != 1 || rep.ExitCode() != FsckClean {
		t.Fatalf("orphans %d, exit %d", rep.Orphans, rep.ExitCode())
	}
	if s, err = Open(fd, testOpts()); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if rep := mustFsck(t, fd, false); rep.Orphans != 0 {
		t.Fatal("the mount did not free the orphan")
	}
}
