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

// realImageBlocks builds a real image — a populated filesystem whose last
// changes sit in the journal, not yet checkpointed — and returns its
// metadata blocks as the device holds them: both superblocks, both
// checkpoint slots' headers and payload, and every journal block in use.
func realImageBlocks(f *testing.F) (*format.Super, [][]byte) {
	fd, _ := newTestImage(f, 64<<20, 9)
	s, err := Open(fd, testOpts())
	if err != nil {
		f.Fatal(err)
	}
	d, _ := s.Create(s.Root(), "dir", NewInode{Mode: syscall.S_IFDIR | 0o755})
	for i, name := range []string{"a", "b", "c"} {
		in, _ := s.Create(d, name, NewInode{Mode: syscall.S_IFREG | 0o644})
		s.Write(in, make([]byte, 10000*(i+1)), int64(i)*4096, WriteOpts{})
		s.Setxattr(in, "user.n", []byte(name), 0)
		s.Fsync(in)
	}
	s.Rename(d, "a", s.Root(), "moved", 0)
	s.Create(s.Root(), "link", NewInode{Mode: syscall.S_IFLNK | 0o777, Target: "dir/b"})
	s.Fsync(s.Root())
	sb := s.sb
	bs := int64(sb.BlockSize)
	read := func(blk uint64, n int64) []byte {
		b := make([]byte, n)
		if err := fd.ReadAt(b, int64(blk)*bs); err != nil {
			f.Fatal(err)
		}
		return b
	}
	blocks := [][]byte{read(0, bs), read(sb.BackupBlock, bs)}
	for slot := uint64(0); slot < 2; slot++ {
		start := sb.CkptStart + slot*sb.CkptBlocks
		blocks = append(blocks, read(start, bs), read(start+1, 4*bs))
	}
	for b := uint64(0); b < s.j.head; b++ {
		blocks = append(blocks, read(sb.JournalStart+b, bs))
	}
	if err := s.Close(); err != nil {
		f.Fatal(err)
	}
	return sb, blocks
}

// FuzzImageBlocks feeds every on-disk decoder — superblock, checkpoint
// header, journal commit header, and the records of checkpoints and
// commits (directory entries, extents, inodes, xattrs) — with blocks of a
// real image and their mutations. Decoding must fail cleanly, never panic,
// and what decodes must validate.
func FuzzImageBlocks(f *testing.F) {
	sb, blocks := realImageBlocks(f)
	for _, b := range blocks {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if s, err := format.DecodeSuper(b); err == nil {
			if err := s.Validate(); err != nil {
				t.Fatalf("decoded superblock does not validate: %v", err)
			}
		}
		format.DecodeCkptHeader(b, sb.UUID, (sb.CkptBlocks-1)*uint64(sb.BlockSize))
		format.DecodeJournalHeader(b, sb.UUID, sb.BlockSize, sb.JournalBlocks)
		for _, off := range []int{0, format.CkptHeaderSize, format.JournalHdrSize} {
			if off <= len(b) {
				format.DecodeRecords(b[off:], func(*format.Record) error { return nil })
			}
		}
	})
}
