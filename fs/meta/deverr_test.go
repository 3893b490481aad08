package meta

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/streamfs/streamfs/backend/faulty"
	"github.com/streamfs/streamfs/fs/crashtest/datatag"
	"github.com/streamfs/streamfs/fs/meta/fsck"
)

func mustCreate(t *testing.T, s *Store, dir *Inode, name string) *Inode {
	t.Helper()
	in, err := s.Create(dir, name, NewInode{Mode: syscall.S_IFREG | 0o644})
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	return in
}

func mustWrite(t *testing.T, s *Store, in *Inode, p []byte, off int64) {
	t.Helper()
	if n, err := s.Write(in, p, off, WriteOpts{}); err != nil || n != len(p) {
		t.Fatalf("write %d bytes at %d: %d, %v", len(p), off, n, err)
	}
}

func mustFsck(t *testing.T, dev *faulty.Device, orphansOK bool) *fsck.Report {
	t.Helper()
	rep, err := Fsck(dev, fsck.Options{})
	if err != nil {
		t.Fatalf("fsck: %v", err)
	}
	if len(rep.Problems) > 0 || (!orphansOK && rep.Orphans > 0) {
		t.Fatalf("fsck: %d orphans, problems:\n%s", rep.Orphans, strings.Join(rep.Problems, "\n"))
	}
	return rep
}

// crash cuts the power (losing everything unflushed), abandons the store
// and powers the device back on.
func crash(t *testing.T, s *Store, fd *faulty.Device) {
	t.Helper()
	if err := fd.PowerCut(faulty.CutOptions{}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	fd.Revive()
}

func observed() (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zapcore.InfoLevel)
	return zap.New(core), logs
}

// A failed data write returns EIO and leaves nothing mapped: after a
// remount the file holds exactly what was written successfully.
func TestDataWriteErrorMapsNothing(t *testing.T) {
	fd, _ := newTestImage(t, 32<<20, 1)
	s, err := Open(fd, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	f := mustCreate(t, s, s.Root(), "f")
	good := datatag.Bytes(f.Ino(), 0, 5*4096+100, 1)
	mustWrite(t, s, f, good, 0)
	if err := s.Fsync(f); err != nil {
		t.Fatal(err)
	}
	ext0, _ := s.Extents(f)
	dataStart := int64(s.sb.MetaEnd() * s.bs)
	dataEnd := int64(s.sb.BackupBlock * s.bs)
	fd.FailWrites(func(off, n int64) bool { return off >= dataStart && off < dataEnd })
	for _, w := range []struct {
		off int64
		n   int
	}{{int64(len(good)), 3 * 4096}, {100 << 10, 8192}, {4096, 100}} { // append, hole past EOF, overwrite
		n, err := s.Write(f, datatag.Bytes(f.Ino(), w.off, w.n, 2), w.off, WriteOpts{})
		if !errors.Is(err, syscall.EIO) || n != 0 {
			t.Fatalf("write at %d with failing device: %d, %v; want 0, EIO", w.off, n, err)
		}
	}
	if got, _ := s.Extents(f); fmt.Sprint(got) != fmt.Sprint(ext0) {
		t.Fatalf("failed writes changed the extent map:\n%v\nwas\n%v", got, ext0)
	}
	if f.Attr().Size != uint64(len(good)) {
		t.Fatalf("size %d after failed writes, want %d", f.Attr().Size, len(good))
	}
	if err := s.Fsync(f); err != nil { // the journal still works
		t.Fatal(err)
	}
	fd.FailWrites(nil)
	g := mustCreate(t, s, s.Root(), "g")
	mustWrite(t, s, g, datatag.Bytes(g.Ino(), 0, 64<<10, 3), 0) // may reuse the blocks the failed writes had
	if err := s.Fsync(g); err != nil {
		t.Fatal(err)
	}
	crash(t, s, fd)
	mustFsck(t, fd, false)
	if s, err = Open(fd, testOpts()); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	f, _ = s.Lookup(s.Root(), "f")
	if got := readAll(t, s, f); !bytes.Equal(got, good) {
		t.Fatalf("after remount the file holds %d bytes, not what was written successfully", len(got))
	}
}

// A failed journal write shuts the filesystem down: one log line, every
// later change and fsync gets EIO, reads go on, and the next mount recovers
// everything fsync acknowledged before the failure.
func TestJournalWriteErrorShutsDown(t *testing.T) {
	fd, _ := newTestImage(t, 32<<20, 1)
	log, logs := observed()
	o := testOpts()
	o.Logger = log
	s, err := Open(fd, o)
	if err != nil {
		t.Fatal(err)
	}
	var acked []string
	for i := 0; i < 20; i++ {
		name := fmt.Sprintf("f%d", i)
		f := mustCreate(t, s, s.Root(), name)
		mustWrite(t, s, f, []byte(name), 0)
		if err := s.Fsync(f); err != nil {
			t.Fatal(err)
		}
		acked = append(acked, name)
	}
	jStart := int64(s.sb.JournalStart * s.bs)
	jEnd := int64(s.sb.MetaEnd() * s.bs)
	fd.FailWrites(func(off, n int64) bool { return off >= jStart && off < jEnd })
	g := mustCreate(t, s, s.Root(), "lost")
	if err := s.Fsync(g); !errors.Is(err, syscall.EIO) && !errors.Is(err, ErrJournalFailed) {
		t.Fatalf("fsync with a failing journal: %v, want EIO", err)
	}
	fd.FailWrites(nil) // the device recovers; the filesystem stays down
	if _, err := s.Create(s.Root(), "after", NewInode{Mode: syscall.S_IFREG | 0o644}); !errors.Is(err, syscall.EIO) {
		t.Fatalf("create after shutdown: %v, want EIO", err)
	}
	if err := s.Fsync(g); err == nil {
		t.Fatal("fsync after shutdown succeeded")
	}
	f0, err := s.Lookup(s.Root(), "f0")
	if err != nil {
		t.Fatalf("lookup after shutdown: %v", err)
	}
	if got := readAll(t, s, f0); string(got) != "f0" {
		t.Fatalf("read after shutdown: %q", got)
	}
	if n := logs.FilterMessageSnippet("shut down").Len(); n != 1 {
		t.Fatalf("%d shutdown log lines, want 1", n)
	}
	crash(t, s, fd)
	mustFsck(t, fd, true)
	if s, err = Open(fd, testOpts()); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, name := range acked {
		f, err := s.Lookup(s.Root(), name)
		if err != nil {
			t.Fatalf("%s lost after shutdown and remount: %v", name, err)
		}
		if got := readAll(t, s, f); string(got) != name {
			t.Fatalf("%s holds %q", name, got)
		}
	}
}

// Shutdown(NOLOGFLUSH) drops what was not committed; LOGFLUSH keeps it.
func TestShutdownFlags(t *testing.T) {
	for _, tc := range []struct {
		flags uint32
		keep  bool
	}{{ShutdownNoLogFlush, false}, {ShutdownLogFlush, true}, {ShutdownDefault, true}} {
		fd, _ := newTestImage(t, 32<<20, 1)
		o := testOpts()
		o.CommitInterval = time.Hour
		s, err := Open(fd, o)
		if err != nil {
			t.Fatal(err)
		}
		mustCreate(t, s, s.Root(), "x")
		if err := s.Shutdown(tc.flags); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Create(s.Root(), "y", NewInode{Mode: syscall.S_IFREG | 0o644}); !errors.Is(err, syscall.EIO) {
			t.Fatalf("flags %d: create after shutdown: %v", tc.flags, err)
		}
		crash(t, s, fd)
		if s, err = Open(fd, testOpts()); err != nil {
			t.Fatal(err)
		}
		_, err = s.Lookup(s.Root(), "x")
		if got := err == nil; got != tc.keep {
			t.Fatalf("flags %d: file kept %v, want %v", tc.flags, got, tc.keep)
		}
		s.Close()
	}
}

// Filling the device gives ENOSPC on every growth path, and the full
// filesystem still unmounts, checks clean and mounts.
func TestENOSPCEveryGrowthPath(t *testing.T) {
	fd, _ := newTestImage(t, 32<<20, 1)
	s, err := Open(fd, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	f := mustCreate(t, s, s.Root(), "fill")
	buf := make([]byte, 1<<20)
	var off int64
	for {
		n, err := s.Write(f, buf, off, WriteOpts{})
		off += int64(n)
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling: %v", err)
			}
			break
		}
	}
	// Namespace growth still works from the reserve, until that is spent.
	var sawENOSPC bool
	for i := 0; i < 200000 && !sawENOSPC; i++ {
		_, err := s.Create(s.Root(), fmt.Sprintf("n%06d-%s", i, strings.Repeat("x", 200)), NewInode{Mode: syscall.S_IFREG | 0o644})
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("create on a full device: %v", err)
			}
			sawENOSPC = true
		}
	}
	if !sawENOSPC {
		t.Fatal("creates never ran out of space")
	}
	if err := s.Link(s.Root(), "zz-link", f); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("link on a full device: %v", err)
	}
	if err := s.Setxattr(f, "user.big", make([]byte, 4000), 0); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("setxattr on a full device: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("unmounting a full filesystem: %v", err)
	}
	mustFsck(t, fd, false)
	s, err = Open(fd, testOpts())
	if err != nil {
		t.Fatalf("mounting a full filesystem: %v", err)
	}
	if err := s.Remove(s.Root(), "fill", false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(s.Root(), "after", NewInode{Mode: syscall.S_IFREG | 0o644}); err != nil {
		t.Fatalf("create after freeing space: %v", err)
	}
	s.Close()
	mustFsck(t, fd, false)
}
