package meta

import (
	"fmt"
	"syscall"
	"testing"

	"github.com/streamfs/streamfs/fs/meta/fsck"
)

// The sequence of scripts/bench/meta.sh at a small N, at the meta layer,
// with an fsck after every Close: a clean unmount must leave no leaked
// blocks.
func TestCloseLeavesNoLeak(t *testing.T) {
	n := int(scaleEnvInt("STREAMFS_LEAK_FILES", sized[int64](10000, 2000)))
	dev := newPlainImage(t, "", 32<<30, 4)
	fsck := func(when string) {
		t.Helper()
		rep, err := Fsck(dev, fsck.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Problems) > 0 {
			t.Errorf("fsck %s: %d problems: %v", when, len(rep.Problems), rep.Problems)
		} else {
			t.Logf("fsck %s: clean", when)
		}
	}
	s, err := Open(dev, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	mk := func(dir *Inode, name string, mode uint32) *Inode {
		in, err := s.Create(dir, name, NewInode{Mode: mode})
		if err != nil {
			t.Fatal(err)
		}
		return in
	}
	d := mk(s.Root(), "d", syscall.S_IFDIR|0o755)
	a := mk(s.Root(), "a", syscall.S_IFDIR|0o755)
	st := mk(s.Root(), "storm", syscall.S_IFDIR|0o755)
	for i := 0; i < n; i++ {
		mk(d, fmt.Sprintf("f%d", i), syscall.S_IFREG|0o644)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	fsck("after creates")
	if s, err = Open(dev, testOpts()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	fsck("after a clean mount+umount")
	if s, err = Open(dev, testOpts()); err != nil {
		t.Fatal(err)
	}
	d, _ = s.Lookup(s.Root(), "d")
	a, _ = s.Lookup(s.Root(), "a")
	st, _ = s.Lookup(s.Root(), "storm")
	wal := mk(a, "wal", syscall.S_IFREG|0o644)
	buf := make([]byte, 4096)
	for i := 0; i < sized(4096, 1024); i++ {
		if _, err := s.Write(wal, buf, int64(i)*4096, WriteOpts{}); err != nil {
			t.Fatal(err)
		}
		if err := s.Fsync(wal); err != nil {
			t.Fatal(err)
		}
	}
	w := mk(a, "writer", syscall.S_IFREG|0o644)
	for i := 0; i < n; i++ {
		mk(st, fmt.Sprintf("s%d", i), syscall.S_IFREG|0o644)
		if _, err := s.Write(w, buf, int64(i%2048)*4096, WriteOpts{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		if err := s.Rename(d, fmt.Sprintf("f%d", i), d, fmt.Sprintf("g%d", i), 0); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		if err := s.Remove(d, fmt.Sprintf("g%d", i), false); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	fsck("after the whole sequence")
}
