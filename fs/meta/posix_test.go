package meta

import (
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"

	"github.com/streamfs/streamfs/backend"
	"github.com/streamfs/streamfs/fs/crashtest/datatag"
)

// streamDev offers n streams and, like the NVMe backend, refuses a write
// tagged with a stream it does not have (metadata's backend.StreamMeta
// aside, which every device accepts).
type streamDev struct {
	backend.Device
	n    uint32
	mu   sync.Mutex
	seen map[uint32]int
}

func (d *streamDev) MaxStreams() uint32 { return d.n }

func (d *streamDev) WriteAt(p []byte, off int64, stream uint32) error {
	if stream > d.n && stream != backend.StreamMeta {
		return fmt.Errorf("stream %d of %d: %w", stream, d.n, syscall.EIO)
	}
	d.mu.Lock()
	d.seen[stream]++
	d.mu.Unlock()
	return d.Device.WriteAt(p, off, stream)
}

// A file whose stream id is above the device's stream count (an image
// moved to a device with fewer placement handles) still writes, remapped
// as ((id-1) mod N)+1, through every data-write path.
func TestStreamRemapFewerStreams(t *testing.T) {
	fd, _ := newTestImage(t, 64<<20, 1)
	dev := &streamDev{Device: fd, n: 2, seen: map[uint32]int{}}
	s, err := Open(dev, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	f := mustCreate(t, s, s.Root(), "f")
	if err := s.SetStream(f, 7); err != nil {
		t.Fatal(err)
	}
	data := datatag.Bytes(f.Ino(), 0, 3*4096+10, 1)
	mustWrite(t, s, f, data, 0)        // fills holes
	mustWrite(t, s, f, data[:100], 50) // in place
	mustWrite(t, s, f, data, 1<<20)    // past EOF: zeroes the gap's edge
	if err := s.Fallocate(f, 2<<20, 8192, 0); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, s, f, data[:4096], 2<<20) // unwritten extent
	if err := s.Fsync(f); err != nil {
		t.Fatal(err)
	}
	dev.mu.Lock()
	defer dev.mu.Unlock()
	if dev.seen[1] == 0 {
		t.Errorf("no data write carried stream 1 = ((7-1) mod 2)+1; seen %v", dev.seen)
	}
	for id := range dev.seen {
		if id != backend.StreamMeta && id != 1 {
			t.Errorf("a write carried stream %d; want only 1 (file data) and StreamMeta (metadata)", id)
		}
	}
	if got := f.Attr().Stream; got != 7 {
		t.Errorf("file's stream id changed to %d; the remap is for the device only", got)
	}
}

// FS_IOC_SHUTDOWN: LOGFLUSH commits first, then every change fails.
func TestShutdown(t *testing.T) {
	for _, c := range []struct {
		flags    uint32
		survives bool
	}{{ShutdownLogFlush, true}, {ShutdownDefault, true}, {ShutdownNoLogFlush, false}} {
		t.Run(fmt.Sprint(c.flags), func(t *testing.T) {
			fd, _ := newTestImage(t, 32<<20, 1)
			s, err := Open(fd, testOpts())
			if err != nil {
				t.Fatal(err)
			}
			mustCreate(t, s, s.Root(), "before")
			if err := s.Shutdown(c.flags); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Create(s.Root(), "after", NewInode{Mode: syscall.S_IFREG | 0o644}); !errors.Is(err, syscall.EIO) {
				t.Errorf("create after shutdown: %v, want EIO", err)
			}
			if err := s.Fsync(s.Root()); err == nil {
				t.Error("fsync after shutdown succeeded")
			}
			s.Close()
			s, err = Open(fd, testOpts())
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			_, err = s.Lookup(s.Root(), "before")
			if (err == nil) != c.survives {
				t.Errorf("after remount, lookup of a file created before the shutdown: %v (want it to survive: %v)", err, c.survives)
			}
			if _, err := s.Lookup(s.Root(), "after"); err == nil {
				t.Error("a file created after the shutdown exists")
			}
		})
	}
	fd, _ := newTestImage(t, 32<<20, 1)
	s, err := Open(fd, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Shutdown(9); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("Shutdown(9): %v, want EINVAL", err)
	}
}

// norecovery mounts the last checkpoint without replaying the journal, and
// only read-only.
func TestNoRecovery(t *testing.T) {
	fd, _ := newTestImage(t, 32<<20, 1)
	s, err := Open(fd, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, s.Root(), "journaled")
	if err := s.Fsync(s.Root()); err != nil {
		t.Fatal(err)
	}
	crash(t, s, fd) // committed to the journal, no checkpoint after it
	if _, err := Open(fd, Options{NoRecovery: true}); err == nil {
		t.Fatal("norecovery without ro mounted")
	}
	o := testOpts()
	o.ReadOnly, o.NoRecovery = true, true
	s, err = Open(fd, o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lookup(s.Root(), "journaled"); err == nil {
		t.Error("norecovery replayed the journal")
	}
	s.Close()
	s, err = Open(fd, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Lookup(s.Root(), "journaled"); err != nil {
		t.Errorf("after a normal mount: %v", err)
	}
}

// A remount read-only refuses changes and read-write allows them again; a
// filesystem mounted read-only goes read-write too (remountrw_test.go).
func TestSetReadOnly(t *testing.T) {
	fd, _ := newTestImage(t, 32<<20, 1)
	s, err := Open(fd, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetReadOnly(true); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(s.Root(), "x", NewInode{Mode: syscall.S_IFREG | 0o644}); !errors.Is(err, syscall.EROFS) {
		t.Errorf("create after remount ro: %v, want EROFS", err)
	}
	if err := s.SetReadOnly(false); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, s.Root(), "x")
	s.Close()
	o := testOpts()
	o.ReadOnly = true
	s, err = Open(fd, o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Create(s.Root(), "y", NewInode{Mode: syscall.S_IFREG | 0o644}); !errors.Is(err, syscall.EROFS) {
		t.Errorf("create on a read-only mount: %v, want EROFS", err)
	}
	if err := s.SetReadOnly(false); err != nil {
		t.Fatalf("remount read-write of a read-only mount: %v", err)
	}
	mustCreate(t, s, s.Root(), "y")
}

// Blocks preallocated past EOF (KEEP_SIZE) are freed by a truncate to the
// same size and by a hole punched past EOF, and come back as free space;
// the data before EOF stays. RocksDB preallocates each table past its size
// and gives the tail back so when it closes the file.
func TestPreallocPastEOFFreed(t *testing.T) {
	fd, _ := newTestImage(t, 64<<20, 1)
	s, err := Open(fd, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	f := mustCreate(t, s, s.Root(), "table")
	const size = 520<<10 + 100
	if err := s.Fallocate(f, 0, 576<<10, FallocKeepSize); err != nil {
		t.Fatal(err)
	}
	data := datatag.Bytes(f.Ino(), 0, size, 1)
	mustWrite(t, s, f, data, 0)
	free0 := s.Statfs().Free
	sz := uint64(size)
	if err := s.Setattr(f, SetAttr{Size: &sz}); err != nil {
		t.Fatal(err)
	}
	if got, want := f.Blocks(), uint64((size+4095)/4096); got != want {
		t.Errorf("after a truncate to the same size the file maps %d blocks, want %d", got, want)
	}
	if got, want := s.Statfs().Free, free0+(576<<10)/4096-(size+4095)/4096; got < want {
		t.Errorf("free blocks %d after the truncate, want at least %d", got, want)
	}
	if err := s.Fallocate(f, 1<<20, 256<<10, FallocKeepSize); err != nil {
		t.Fatal(err)
	}
	if err := s.Fallocate(f, size, 1<<20+256<<10-size, FallocKeepSize|FallocPunchHole); err != nil {
		t.Fatal(err)
	}
	if got, want := f.Blocks(), uint64((size+4095)/4096); got != want {
		t.Errorf("after a hole punched past EOF the file maps %d blocks, want %d", got, want)
	}
	if f.Attr().Size != size {
		t.Errorf("size %d, want %d", f.Attr().Size, size)
	}
	got := make([]byte, size)
	if n, err := s.Read(f, got, 0); err != nil || n != size || string(got) != string(data) {
		t.Errorf("read back %d bytes (%v), equal %v", n, err, string(got) == string(data))
	}
}
