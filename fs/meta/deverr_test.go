package meta

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/streamfs/streamfs/backend/faulty"
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

func mustFsck(t *testing.T, dev *faulty.Device, orphansOK bool) *FsckReport {
	t.Helper()
	rep, err := Fsck(dev, FsckOptions{})
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
	good := tagged(f.Ino(), 0, 5*4096+100, 1)
	mustWrite(t, s, f, good, 0)
	if err := s.Fsync(f); err != nil {
		t.Fatal(err)
	}
	ext0 := f.Extents()
	dataStart := int64(s.sb.MetaEnd() * s.bs)
	dataEnd := int64(s.sb.BackupBlock * s.bs)
	fd.FailWrites(func(off, n int64) bool { return off >= dataStart && off < dataEnd })
	for _, w := range []struct {
		off int64
		n   int
	}{{int64(len(good)), 3 * 4096}, {100 << 10, 8192}, {4096, 100}} { // append, hole past EOF, overwrite
		n, err := s.Write(f, tagged(f.Ino(), w.off, w.n, 2), w.off, WriteOpts{})
		if !errors.Is(err, syscall.EIO) || n != 0 {
			t.Fatalf("write at %d with failing device: %d, %v; want 0, EIO", w.off, n, err)
		}
	}
	if got := f.Extents(); fmt.Sprint(got) != fmt.Sprint(ext0) {
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
	mustWrite(t, s, g, tagged(g.Ino(), 0, 64<<10, 3), 0) // may reuse the blocks the failed writes had
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

// A journal flush or write that keeps failing turns the filesystem
// read-only with one error line after maxMetaFailures commits; what was
// acknowledged before survives.
func TestJournalFailureGoesReadOnly(t *testing.T) {
	for _, how := range []string{"flush", "write"} {
		t.Run(how, func(t *testing.T) {
			fd, _ := newTestImage(t, 32<<20, 2)
			log, logs := observed()
			opts := testOpts()
			opts.Logger = log
			s, err := Open(fd, opts)
			if err != nil {
				t.Fatal(err)
			}
			a := mustCreate(t, s, s.Root(), "a")
			mustWrite(t, s, a, []byte("acknowledged"), 0)
			if err := s.Fsync(a); err != nil {
				t.Fatal(err)
			}
			b := mustCreate(t, s, s.Root(), "b")
			mustWrite(t, s, b, []byte("lost"), 0)
			js, je := int64(s.sb.JournalStart*s.bs), int64(s.sb.MetaEnd()*s.bs)
			if how == "flush" {
				fd.FailFlushes(maxMetaFailures)
			} else {
				fd.FailWrites(func(off, n int64) bool { return off >= js && off < je })
			}
			for i := 0; i < maxMetaFailures; i++ {
				if err := s.Fsync(b); err == nil {
					t.Fatal("fsync succeeded although the journal failed")
				}
			}
			if _, err := s.Write(a, []byte("x"), 0, WriteOpts{}); !errors.Is(err, syscall.EROFS) {
				t.Fatalf("write after the journal failed: %v, want EROFS", err)
			}
			if _, err := s.Create(s.Root(), "c", NewInode{Mode: syscall.S_IFREG}); !errors.Is(err, syscall.EROFS) {
				t.Fatalf("create after the journal failed: %v, want EROFS", err)
			}
			if err := s.Fsync(a); err == nil {
				t.Fatal("fsync after the journal failed succeeded")
			}
			s.SyncAll()
			if !s.ReadOnly() {
				t.Fatal("store not read-only")
			}
			n := 0
			for _, e := range logs.All() {
				if e.Level >= zapcore.ErrorLevel {
					n++
					if !strings.Contains(e.Message, "read-only") {
						t.Errorf("error log line %q does not say read-only", e.Message)
					}
				}
			}
			if n != 1 {
				t.Fatalf("%d error log lines, want exactly 1: %v", n, logs.All())
			}
			s.Close()
			fd.FailWrites(nil)
			crash(t, s, fd)
			mustFsck(t, fd, false)
			if s, err = Open(fd, testOpts()); err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			a, err = s.Lookup(s.Root(), "a")
			if err != nil {
				t.Fatal(err)
			}
			if got := readAll(t, s, a); string(got) != "acknowledged" {
				t.Fatalf("acknowledged file holds %q", got)
			}
		})
	}
}

// A commit that fails once is retried by the next one (errors=remount-ro),
// or as often as it takes (errors=continue): nothing is lost and the
// sequence has no gap, so everything fsync acknowledged survives a crash.
func TestJournalFailureRetried(t *testing.T) {
	for _, mode := range []string{"remount-ro", "continue"} {
		t.Run(mode, func(t *testing.T) {
			fd, _ := newTestImage(t, 32<<20, 4)
			opts := testOpts()
			opts.ErrorsContinue = mode == "continue"
			s, err := Open(fd, opts)
			if err != nil {
				t.Fatal(err)
			}
			b := mustCreate(t, s, s.Root(), "b")
			mustWrite(t, s, b, []byte("retried"), 0)
			fails := 1
			if opts.ErrorsContinue {
				fails = 2 * maxMetaFailures
			}
			fd.FailFlushes(fails)
			for i := 0; i < fails; i++ {
				if err := s.Fsync(b); err == nil {
					t.Fatalf("fsync %d succeeded although the flush failed", i)
				}
			}
			if s.ReadOnly() {
				t.Fatal("read-only after failures that were retried")
			}
			if err := s.Fsync(b); err != nil {
				t.Fatalf("fsync after the device recovered: %v", err)
			}
			c := mustCreate(t, s, s.Root(), "c")
			mustWrite(t, s, c, []byte("later"), 0)
			if err := s.Fsync(c); err != nil {
				t.Fatal(err)
			}
			crash(t, s, fd)
			mustFsck(t, fd, false)
			if s, err = Open(fd, testOpts()); err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for name, want := range map[string]string{"b": "retried", "c": "later"} {
				in, err := s.Lookup(s.Root(), name)
				if err != nil {
					t.Fatalf("%s after the crash: %v", name, err)
				}
				if got := readAll(t, s, in); string(got) != want {
					t.Fatalf("%s holds %q, want %q", name, got, want)
				}
			}
		})
	}
}

// A torn journal commit ends the replay: neither it nor any commit after
// it is applied.
func TestTornCommitStopsReplay(t *testing.T) {
	for _, where := range []string{"payload", "header"} {
		t.Run(where, func(t *testing.T) {
			fd, _ := newTestImage(t, 32<<20, 3)
			s, err := Open(fd, testOpts())
			if err != nil {
				t.Fatal(err)
			}
			var pos []uint64
			for _, name := range []string{"a", "b", "c"} {
				pos = append(pos, s.j.head)
				in := mustCreate(t, s, s.Root(), name)
				mustWrite(t, s, in, bytes.Repeat([]byte(name), 5000), 0)
				if err := s.Fsync(in); err != nil {
					t.Fatal(err)
				}
			}
			crash(t, s, fd)
			// Tear commit "b": a payload sector (or its header) never landed.
			bs := int64(s.bs)
			off := int64(s.sb.JournalStart+pos[1]) * bs
			if where == "payload" {
				off += bs // the first payload sector
			}
			if err := fd.Inner().WriteAt(make([]byte, 512), off, 0); err != nil {
				t.Fatal(err)
			}
			mustFsck(t, fd, false)
			if s, err = Open(fd, testOpts()); err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if _, err := s.Lookup(s.Root(), "a"); err != nil {
				t.Fatalf("a: %v", err)
			}
			for _, name := range []string{"b", "c"} {
				if _, err := s.Lookup(s.Root(), name); err == nil {
					t.Fatalf("%s exists: replay went past a torn commit", name)
				}
			}
		})
	}
}

// A checkpoint taken while a transaction is open (another thread's commit
// filled the journal) must not leave that transaction to be replayed on
// top of the checkpoint: its records can refer to an inode it also freed.
func TestCheckpointDuringOpenTransaction(t *testing.T) {
	fd, _ := newTestImage(t, 32<<20, 4)
	s, err := Open(fd, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	f := mustCreate(t, s, s.Root(), "f")
	mustWrite(t, s, f, []byte("data"), 0)
	if err := s.Fsync(f); err != nil {
		t.Fatal(err)
	}
	// Open transaction: records for f, then f freed.
	if err := s.Setxattr(f, "user.x", []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(s.Root(), "f", false); err != nil {
		t.Fatal(err)
	}
	s.j.commitMu.Lock()
	err = s.j.checkpointLocked()
	s.j.commitMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	g := mustCreate(t, s, s.Root(), "g")
	if err := s.Fsync(g); err != nil {
		t.Fatal(err)
	}
	crash(t, s, fd)
	mustFsck(t, fd, false)
	if s, err = Open(fd, testOpts()); err != nil {
		t.Fatalf("mount after a checkpoint inside a transaction: %v", err)
	}
	defer s.Close()
	if _, err := s.Lookup(s.Root(), "g"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lookup(s.Root(), "f"); err == nil {
		t.Fatal("f came back")
	}
}

// Concurrent writers with frequent checkpoints, then a power cut at a
// random moment: the mount must succeed, fsck must be clean and every file
// fsync'd and not touched afterwards must be intact.
func TestPowerLossConcurrent(t *testing.T) {
	seed := envInt(t, "STREAMFS_POWERLOSS_SEED", time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 7))
	fd, _ := newTestImage(t, 32<<20, seed)
	rounds := 6
	if testing.Short() {
		rounds = 2
	}
	for round := 0; round < rounds; round++ {
		s, err := Open(fd, testOpts())
		if err != nil {
			t.Fatalf("round %d: mount: %v", round, err)
		}
		if round > 0 {
			checkAcked(t, s, round)
		}
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func(w int, seed uint64) {
				defer wg.Done()
				concurrentWorker(s, w, round, seed, stop)
			}(w, rng.Uint64())
		}
		time.Sleep(time.Duration(50+rng.IntN(250)) * time.Millisecond)
		if err := fd.PowerCut(faulty.CutOptions{KeepRandomPrefix: true, TearLast: rng.IntN(2) == 0}); err != nil {
			t.Fatal(err)
		}
		close(stop)
		wg.Wait()
		s.Close()
		fd.Revive()
		mustFsck(t, fd, true)
	}
	s, err := Open(fd, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	checkAcked(t, s, rounds)
	s.Close()
}

// Acknowledged files are named ack-<content length>-<byte>: created,
// written, fsync'd and renamed to that name, never touched again.
func checkAcked(t *testing.T, s *Store, round int) {
	t.Helper()
	var n int
	for _, d := range []string{"w0", "w1", "w2", "w3"} {
		dir, err := s.Lookup(s.Root(), d)
		if err != nil {
			continue
		}
		ents, _ := s.Readdir(dir)
		for _, e := range ents {
			var size, b int
			if _, err := fmt.Sscanf(e.Name, "ack-%d-%d", &size, &b); err != nil {
				continue
			}
			in := s.Get(e.Ino)
			if got := readAll(t, s, in); !bytes.Equal(got, bytes.Repeat([]byte{byte(b)}, size)) {
				t.Fatalf("round %d: %s/%s: acknowledged contents changed (%d bytes)", round, d, e.Name, len(got))
			}
			n++
		}
	}
	t.Logf("round %d: %d acknowledged files intact", round, n)
}

func concurrentWorker(s *Store, w, round int, seed uint64, stop chan struct{}) {
	rng := rand.New(rand.NewPCG(seed, 1))
	name := fmt.Sprintf("w%d", w)
	dir, err := s.Lookup(s.Root(), name)
	if err != nil {
		if dir, err = s.Create(s.Root(), name, NewInode{Mode: syscall.S_IFDIR | 0o755}); err != nil {
			return
		}
	}
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		tmp := fmt.Sprintf("tmp-%d-%d", round, i)
		in, err := s.Create(dir, tmp, NewInode{Mode: syscall.S_IFREG | 0o644})
		if err != nil {
			return
		}
		size, b := 1+rng.IntN(40000), 1+rng.IntN(250)
		if _, err := s.Write(in, bytes.Repeat([]byte{byte(b)}, size), 0, WriteOpts{}); err != nil {
			return
		}
		switch rng.IntN(4) {
		case 0: // an unacknowledged file, removed again
			if s.Setxattr(in, "user.a", []byte("b"), 0) != nil || s.Remove(dir, tmp, false) != nil {
				return
			}
		case 1: // overwritten and truncated: not acknowledged
			if _, err := s.Write(in, []byte("zz"), int64(rng.IntN(size)), WriteOpts{}); err != nil {
				return
			}
			sz := uint64(rng.IntN(size))
			if s.Setattr(in, SetAttr{Size: &sz}) != nil {
				return
			}
		default: // acknowledged: fsync, then a durable rename to its final name
			if s.Fsync(in) != nil {
				return
			}
			if s.Rename(dir, tmp, dir, fmt.Sprintf("ack-%d-%d", size, b), 0) != nil {
				return
			}
			if s.Fsync(dir) != nil {
				return
			}
		}
		// Remove some older acknowledged files to reuse their blocks.
		if rng.IntN(3) == 0 {
			ents, _ := s.Readdir(dir)
			for _, e := range ents {
				if strings.HasPrefix(e.Name, "ack-") {
					if s.Remove(dir, e.Name, false) != nil {
						return
					}
					break
				}
			}
		}
	}
}
