package meta

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"github.com/streamfs/streamfs/alloc"
	"github.com/streamfs/streamfs/backend"
	"github.com/streamfs/streamfs/fs/format"
)

// New directories rotate across AGs and files follow their directory; an
// AG whose inode numbers are spent passes new inodes to the next AG instead
// of wrapping onto the root.
func TestInodeNumbers(t *testing.T) {
	fd, _ := newTestImage(t, 128<<20, 7)
	s, err := Open(fd, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ags := map[uint32]bool{}
	for i := 0; i < int(s.sb.AGCount); i++ {
		d, err := s.Create(s.Root(), fmt.Sprintf("d%d", i), NewInode{Mode: syscall.S_IFDIR | 0o755})
		if err != nil {
			t.Fatal(err)
		}
		ags[alloc.InoAG(d.Ino())] = true
		f := mustCreate(t, s, d, "f")
		if alloc.InoAG(f.Ino()) != alloc.InoAG(d.Ino()) {
			t.Fatalf("file %#x not in its directory's AG (%#x)", f.Ino(), d.Ino())
		}
	}
	if len(ags) != int(s.sb.AGCount) {
		t.Fatalf("directories used AGs %v of %d", ags, s.sb.AGCount)
	}
	s.agNext[0].Store(^uint32(0) - 1)
	a := mustCreate(t, s, s.Root(), "a")
	b := mustCreate(t, s, s.Root(), "b")
	if alloc.InoAG(a.Ino()) != 0 || alloc.InoAG(b.Ino()) == 0 || b.Ino() <= RootIno {
		t.Fatalf("after AG 0 ran out: %#x then %#x", a.Ino(), b.Ino())
	}
	if !s.Root().IsDir() {
		t.Fatal("root overwritten")
	}
}

// BenchmarkUnlink measures Remove alone, as rm -rf meets it: b.N empty
// files made beforehand in one directory, then each unlinked.
func BenchmarkUnlink(b *testing.B) {
	s := benchStore(b)
	d, err := s.Create(s.Root(), "d", NewInode{Mode: syscall.S_IFDIR | 0o755})
	if err != nil {
		b.Fatal(err)
	}
	// The inodes stay referenced, as the kernel's cached inodes keep them
	// in the daemon: rm -rf unlinks names it has just listed.
	names, ins := make([]string, b.N), make([]*Inode, b.N)
	for i := range names {
		names[i] = fmt.Sprintf("f%d", i)
		if ins[i], err = s.Create(d, names[i], NewInode{Mode: syscall.S_IFREG | 0o644}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for _, name := range names {
		if err := s.Remove(d, name, false); err != nil {
			b.Fatal(err)
		}
	}
	runtime.KeepAlive(ins)
}

// benchStore opens a store on a sparse 8 GiB image (a 128 MiB checkpoint
// slot, far from full), without the fault-injecting wrapper's bookkeeping.
func benchStore(b *testing.B) *Store {
	path := filepath.Join(b.TempDir(), "img")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.Truncate(path, 8<<30); err != nil {
		b.Fatal(err)
	}
	dev, err := backend.OpenFile(path, false)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { dev.Close() })
	if _, err := Mkfs(dev, format.MkfsParams{}); err != nil {
		b.Fatal(err)
	}
	s, err := Open(dev, testOpts())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// BenchmarkDirOps measures create, lookup and unlink in a directory that
// already holds 100 or 100,000 entries: directories are hash maps, so the
// cost per operation should not grow with the directory.
func BenchmarkDirOps(b *testing.B) {
	for _, size := range []int{100, 100000} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			s := benchStore(b)
			d, err := s.Create(s.Root(), "d", NewInode{Mode: syscall.S_IFDIR | 0o755})
			if err != nil {
				b.Fatal(err)
			}
			for i := 0; i < size; i++ {
				if _, err := s.Create(d, fmt.Sprintf("f%d", i), NewInode{Mode: syscall.S_IFREG | 0o644}); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				name := fmt.Sprintf("n%d", i)
				if _, err := s.Create(d, name, NewInode{Mode: syscall.S_IFREG | 0o644}); err != nil {
					b.Fatal(err)
				}
				if _, err := s.Lookup(d, name); err != nil {
					b.Fatal(err)
				}
				if err := s.Remove(d, name, false); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
