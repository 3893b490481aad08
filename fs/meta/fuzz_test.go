package meta

import (
	"strings"
	"syscall"
	"testing"

	"github.com/streamfs/streamfs/fs/format"
)

// nullDevice is a device without I/O: checkpoint payloads are applied in
// memory only.
type nullDevice struct{ size int64 }

func (d nullDevice) ReadAt([]byte, int64) error          { return syscall.EIO }
func (d nullDevice) WriteAt([]byte, int64, uint32) error { return syscall.EIO }
func (d nullDevice) Flush() error                        { return syscall.EIO }
func (d nullDevice) Discard(int64, int64) error          { return syscall.EIO }
func (d nullDevice) Size() int64                         { return d.size }
func (d nullDevice) SectorSize() int                     { return 512 }
func (d nullDevice) MaxStreams() uint32                  { return 0 }
func (d nullDevice) Kind() string                        { return "null" }
func (d nullDevice) Close() error                        { return nil }

var fuzzSuper = func() *format.Super {
	sb, err := format.NewSuper(format.MkfsParams{SizeBytes: 64 << 20})
	if err != nil {
		panic(err)
	}
	return sb
}()

// fuzzStore is a fresh, unloaded, read-only Store over nothing.
func fuzzStore() *Store {
	return newStore(nullDevice{64 << 20}, fuzzSuper, Options{}, true)
}

// fsckState runs fsck's in-memory checks on a loaded store.
func fsckState(t testing.TB, s *Store, repair bool) *FsckReport {
	if err := s.newAllocator(); err != nil {
		t.Fatal(err)
	}
	defer s.alloc.Close()
	rep := &FsckReport{}
	(&fsck{s: s, rep: rep, repair: repair}).checkState()
	return rep
}

// FuzzApplyRecords loads arbitrary checkpoint payloads as a mount does
// (decode, apply, cross-record check) and as fsck does, which must never
// panic; what fsck -y repairs must then check clean.
func FuzzApplyRecords(f *testing.F) {
	var e format.Encoder
	e.AG(0, 2)
	e.Rotor(1)
	e.Inode(&format.InodeRec{Ino: RootIno, Mode: syscall.S_IFDIR | 0o755, Nlink: 2, Parent: RootIno})
	f.Add(append([]byte(nil), e.Buf...)) // what mkfs writes

	// A populated filesystem's checkpoint, and journal-style records.
	fd, _ := newTestImage(f, 32<<20, 1)
	s, err := Open(fd, testOpts())
	if err != nil {
		f.Fatal(err)
	}
	d, _ := s.Create(s.Root(), "d", NewInode{Mode: syscall.S_IFDIR | 0o755})
	a, _ := s.Create(d, "a", NewInode{Mode: syscall.S_IFREG | 0o644})
	s.Write(a, make([]byte, 20000), 5000, WriteOpts{})
	s.Fallocate(a, 100000, 10000, FallocKeepSize)
	s.Setxattr(a, "user.k", []byte("v"), 0)
	s.Link(s.Root(), "hard", a)
	s.Create(s.Root(), "sym", NewInode{Mode: syscall.S_IFLNK | 0o777, Target: "d/a"})
	s.opLock.Lock()
	f.Add(s.encodeState())
	s.opLock.Unlock()
	s.Close()
	e.Free(a.Ino())
	e.Unlink(RootIno, "hard")
	e.Punch(a.Ino(), 0, 3)
	e.XattrDel(a.Ino(), "user.k")
	e.Link(RootIno, d.Ino(), "loop")
	e.Map(d.Ino(), 0, 1, fuzzSuper.MetaEnd(), 0, 0)
	f.Add(e.Buf)

	f.Fuzz(func(t *testing.T, b []byte) {
		// As a mount loads it.
		s := fuzzStore()
		if err := format.DecodeRecords(b, s.apply); err == nil {
			s.check()
		}
		// As fsck -y loads and repairs it.
		s = fuzzStore()
		format.DecodeRecords(b, func(r *format.Record) error { s.apply(r); return nil })
		rep := fsckState(t, s, true)
		if rep.Fixed < len(rep.Problems) {
			return // something fsck cannot repair: no convergence to check
		}
		// The repaired state, written and loaded again, is clean.
		payload := s.encodeState()
		s2 := fuzzStore()
		if err := format.DecodeRecords(payload, s2.apply); err != nil {
			t.Fatalf("repaired state does not load: %v\nproblems: %s", err, strings.Join(rep.Problems, "; "))
		}
		if err := s2.check(); err != nil {
			t.Fatalf("repaired state fails the mount check: %v\nproblems: %s", err, strings.Join(rep.Problems, "; "))
		}
		if rep2 := fsckState(t, s2, false); len(rep2.Problems) > 0 {
			t.Fatalf("after repair of\n  %s\nfsck still finds\n  %s", strings.Join(rep.Problems, "\n  "), strings.Join(rep2.Problems, "\n  "))
		}
	})
}
