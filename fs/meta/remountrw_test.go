package meta

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/streamfs/streamfs/backend"
	"github.com/streamfs/streamfs/backend/faulty"
	"github.com/streamfs/streamfs/fs/crashtest/datatag"
)

// journaledImage leaves an image whose journal holds committed changes no
// checkpoint contains (files a and b, fsynced, then a crash), and returns
// it closed, with its path and the inode of a.
func journaledImage(t *testing.T) (path string, a uint64) {
	t.Helper()
	fd, path := newTestImage(t, 64<<20, 5)
	s, err := Open(fd, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	f := mustCreate(t, s, s.Root(), "a")
	mustWrite(t, s, f, datatag.Bytes(f.Ino(), 0, 256<<10, 1), 0)
	g := mustCreate(t, s, s.Root(), "b")
	mustWrite(t, s, g, datatag.Bytes(g.Ino(), 0, 4096, 1), 0)
	if err := s.Fsync(f); err != nil {
		t.Fatal(err)
	}
	crash(t, s, fd)
	fd.Close()
	return path, f.Ino()
}

// openRO opens the image read-only, as a read-only mount does (the file
// opened read-only, its lock taken), under the fault injector.
func openRO(t *testing.T, path string, opts Options) (*Store, *faulty.Device) {
	t.Helper()
	inner, err := backend.OpenFile(path, true)
	if err != nil {
		t.Fatal(err)
	}
	fd := faulty.New(inner, 7)
	t.Cleanup(func() { fd.Revive(); fd.Close() })
	opts.ReadOnly = true
	s, err := Open(fd, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s, fd
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustContain(t *testing.T, s *Store, name string, want []byte) {
	t.Helper()
	in, err := s.Lookup(s.Root(), name)
	if err != nil {
		t.Fatalf("lookup %s: %v", name, err)
	}
	got := make([]byte, len(want))
	if n, err := s.Read(in, got, 0); err != nil || n != len(want) || !bytes.Equal(got, want) {
		t.Fatalf("%s: read %d bytes, %v; contents differ: %v", name, n, err, !bytes.Equal(got, want))
	}
}

// A read-only mount that replayed the journal in memory goes read-write:
// the replayed state is made durable at once (a crash right after the
// remount, with nothing else written, keeps it even for a mount that does
// not replay), and from then on the store behaves as a read-write mount:
// changes, fsync, crash, recovery, a clean fsck.
func TestRemountRWAfterReplay(t *testing.T) {
	path, a := journaledImage(t)
	s, fd := openRO(t, path, testOpts())
	mustContain(t, s, "a", datatag.Bytes(a, 0, 256<<10, 1))
	if _, err := s.Create(s.Root(), "refused", NewInode{Mode: syscall.S_IFREG | 0o644}); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("create while read-only: %v, want EROFS", err)
	}
	before := readFile(t, path)
	if err := s.SetReadOnly(false); err != nil {
		t.Fatal(err)
	}
	if s.ReadOnly() {
		t.Fatal("still read-only after the remount read-write")
	}
	if bytes.Equal(before, readFile(t, path)) {
		t.Fatal("the remount read-write wrote nothing: the replayed state is not durable")
	}
	// Another mounter cannot take the device meanwhile.
	if _, err := backend.OpenFile(path, true); !errors.Is(err, backend.ErrBusy) {
		t.Fatalf("open by another mounter after the remount: %v, want ErrBusy", err)
	}
	// The replayed state alone survives a crash, even unreplayed.
	crash(t, s, fd)
	fd.Close()
	s, fd = openRO(t, path, Options{NoRecovery: true})
	mustContain(t, s, "a", datatag.Bytes(a, 0, 256<<10, 1))
	s.Close()
	fd.Close()

	// Read-only again, then read-write, then the ordinary life of a mount.
	s, fd = openRO(t, path, testOpts())
	if err := s.SetReadOnly(false); err != nil {
		t.Fatal(err)
	}
	c := mustCreate(t, s, s.Root(), "c")
	mustWrite(t, s, c, datatag.Bytes(c.Ino(), 0, 1<<20, 2), 0)
	if err := s.Fsync(c); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(s.Root(), "b", false); err != nil {
		t.Fatal(err)
	}
	if err := s.SetReadOnly(true); err != nil {
		t.Fatal(err)
	}
	ro := readFile(t, path)
	if _, err := s.Create(s.Root(), "refused", NewInode{Mode: syscall.S_IFREG | 0o644}); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("create after remount ro: %v, want EROFS", err)
	}
	if !bytes.Equal(ro, readFile(t, path)) {
		t.Fatal("a read-only remount wrote")
	}
	if err := s.SetReadOnly(false); err != nil {
		t.Fatal(err)
	}
	d := mustCreate(t, s, s.Root(), "d")
	mustWrite(t, s, d, datatag.Bytes(d.Ino(), 0, 8192, 3), 0)
	if err := s.Fsync(d); err != nil {
		t.Fatal(err)
	}
	crash(t, s, fd)
	if err := fd.Close(); err != nil {
		t.Fatal(err)
	}
	inner, err := backend.OpenFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	fd = faulty.New(inner, 8)
	defer fd.Close()
	if s, err = Open(fd, testOpts()); err != nil {
		t.Fatal(err)
	}
	mustContain(t, s, "a", datatag.Bytes(a, 0, 256<<10, 1))
	mustContain(t, s, "c", datatag.Bytes(c.Ino(), 0, 1<<20, 2))
	mustContain(t, s, "d", datatag.Bytes(d.Ino(), 0, 8192, 3))
	if _, err := s.Lookup(s.Root(), "b"); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("b, removed before the crash: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	mustFsck(t, fd, false)
}

// The free space after a remount read-write is a fresh read-write mount's:
// what the read-only replay held back comes back.
func TestRemountRWFreeSpace(t *testing.T) {
	path, _ := journaledImage(t)
	s, fd := openRO(t, path, testOpts())
	if err := s.SetReadOnly(false); err != nil {
		t.Fatal(err)
	}
	got := s.alloc.FreeBlocks()
	if err := s.alloc.Check(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	fd.Close()
	inner, err := backend.OpenFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	s2, err := Open(inner, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if want := s2.alloc.FreeBlocks(); got != want {
		t.Fatalf("%d blocks free after the remount read-write, %d after a read-write mount", got, want)
	}
}

// Refusals leave the mount read-only and working, and write nothing: a
// norecovery mount (the journal it did not replay would be overwritten), a
// shut-down one, a device that cannot be written.
func TestRemountRWRefused(t *testing.T) {
	path, a := journaledImage(t)
	check := func(s *Store, want error, how string) {
		t.Helper()
		before := readFile(t, path)
		if err := s.SetReadOnly(false); !errors.Is(err, want) {
			t.Fatalf("%s: remount read-write: %v, want %v", how, err, want)
		}
		if !s.ReadOnly() {
			t.Fatalf("%s: read-write after a refused remount", how)
		}
		if _, err := s.Lookup(s.Root(), "a"); err != nil && how != "norecovery" {
			t.Fatalf("%s: lookup after the refusal: %v", how, err)
		}
		if !bytes.Equal(before, readFile(t, path)) {
			t.Fatalf("%s: a refused remount wrote", how)
		}
	}

	s, fd := openRO(t, path, Options{NoRecovery: true})
	check(s, syscall.EINVAL, "norecovery")
	s.Close()
	fd.Close()

	s, fd = openRO(t, path, testOpts())
	if err := s.Shutdown(ShutdownNoLogFlush); err != nil {
		t.Fatal(err)
	}
	check(s, ErrJournalFailed, "shut down")
	s.Close()
	fd.Close()

	if os.Geteuid() == 0 {
		if err := exec.Command("chattr", "+i", path).Run(); err != nil {
			t.Logf("chattr +i not available (%v): write-protected case skipped", err)
		} else {
			s, fd = openRO(t, path, testOpts())
			check(s, backend.ErrWriteProtected, "immutable image")
			mustContain(t, s, "a", datatag.Bytes(a, 0, 256<<10, 1))
			s.Close()
			fd.Close()
			if err := exec.Command("chattr", "-i", path).Run(); err != nil {
				t.Fatal(err)
			}
		}
	}

	// A failed checkpoint write shuts the filesystem down: reads go on,
	// and nothing acknowledged is lost (the next mount replays again).
	s, fd = openRO(t, path, testOpts())
	fd.FailWrites(func(off, n int64) bool { return true })
	if err := s.SetReadOnly(false); err == nil {
		t.Fatal("remount read-write with every write failing succeeded")
	}
	if !s.ReadOnly() {
		t.Fatal("read-write after a failed remount")
	}
	mustContain(t, s, "a", datatag.Bytes(a, 0, 256<<10, 1))
	s.Close()
	fd.Revive()
	fd.Close()
	s, fd = openRO(t, path, testOpts())
	mustContain(t, s, "a", datatag.Bytes(a, 0, 256<<10, 1))
	s.Close()
}
