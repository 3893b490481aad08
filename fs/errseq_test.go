package fs

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"go.uber.org/zap"

	"github.com/streamfs/streamfs/backend"
	"github.com/streamfs/streamfs/backend/faulty"
	"github.com/streamfs/streamfs/fs/format"
	"github.com/streamfs/streamfs/fs/meta"
)

// mountFaulty mounts a fresh filesystem over a fault-injecting device, in
// this process, and returns the mount point and the device.
func mountFaulty(t *testing.T) (string, *faulty.Device, *format.Super) {
	return mountFaultySize(t, 256<<20)
}

// mountFaultySize is mountFaulty with an image of size bytes (sparse).
func mountFaultySize(t *testing.T, size int64) (string, *faulty.Device, *format.Super) {
	mnt, dev, sb, _ := mountFaultyWith(t, size, MountOptions{})
	return mnt, dev, sb
}

// mountFaultyWith is mountFaultySize with mount options o; it returns the
// server too.
func mountFaultyWith(t *testing.T, size int64, o MountOptions) (string, *faulty.Device, *format.Super, *Server) {
	t.Helper()
	return mountFaultyLog(t, size, o, zap.NewNop())
}

// mountFaultyLog is mountFaultyWith with the daemon's logger.
func mountFaultyLog(t *testing.T, size int64, o MountOptions, log *zap.Logger) (string, *faulty.Device, *format.Super, *Server) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting FUSE needs root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	dir := t.TempDir()
	img := filepath.Join(dir, "img")
	if err := os.WriteFile(img, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	dev, err := backend.OpenFile(img, false)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := meta.Mkfs(dev, format.MkfsParams{})
	if err != nil {
		t.Fatal(err)
	}
	fd := faulty.New(dev, 1)
	st, err := meta.Open(fd, meta.Options{Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	o.Source = img
	srv, err := Mount(&FS{Store: st, Log: log}, mnt, o)
	if err != nil {
		_ = st.Close()
		fd.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil && !errors.Is(err, syscall.EINVAL) {
			t.Errorf("unmount: %v", err)
		}
		srv.Wait()
		if err := st.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		fd.Close()
	})
	return mnt, fd, sb, srv
}

// A failed data write reaches the writer, and every file open at that time
// hears of it once at its next fsync, like the kernel's errseq.
func TestWriteErrorOncePerOpenFile(t *testing.T) {
	mnt, dev, sb := mountFaulty(t)
	name := filepath.Join(mnt, "f")
	f1, err := os.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f1.Close()
	f2, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	buf := make([]byte, 4096)
	if _, err := f1.WriteAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	// Fail data writes only: the journal must keep working.
	dataStart := int64(sb.MetaEnd()) * int64(sb.BlockSize)
	dev.FailWrites(func(off, n int64) bool { return off >= dataStart })
	if _, err := f1.WriteAt(buf, 0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("write with failing device: %v, want EIO", err)
	}
	dev.FailWrites(nil)
	f3, err := os.OpenFile(name, os.O_RDWR, 0) // opened after the error
	if err != nil {
		t.Fatal(err)
	}
	defer f3.Close()
	for _, f := range []*os.File{f1, f2} {
		if err := f.Sync(); !errors.Is(err, syscall.EIO) {
			t.Fatalf("first fsync of %v after the error: %v, want EIO", f.Fd(), err)
		}
		if err := f.Sync(); err != nil {
			t.Fatalf("second fsync: %v, want success", err)
		}
	}
	if err := f3.Sync(); err != nil {
		t.Fatalf("fsync of a file opened after the error: %v", err)
	}
}

// A buffered write whose writeback fails is reported by close(2) although
// the daemon asks for no FLUSH (the kernel writes the pages back and
// returns the error the WRITE got), and by fsync to every other file open
// at the time.
func TestCloseReportsWritebackError(t *testing.T) {
	// Large enough that writable opens go through the page cache (a
	// nearly full filesystem writes through).
	mnt, dev, sb := mountFaultySize(t, 4<<30)
	name := filepath.Join(mnt, "f")
	f1, err := os.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f2, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	// Close a file first so that the one FLUSH the kernel ever sends
	// (answered ENOSYS) is behind us.
	f0, err := os.OpenFile(filepath.Join(mnt, "g"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := f0.Close(); err != nil {
		t.Fatal(err)
	}
	dataStart := int64(sb.MetaEnd()) * int64(sb.BlockSize)
	dev.FailWrites(func(off, n int64) bool { return off >= dataStart })
	if _, err := f1.WriteAt(make([]byte, 64<<10), 0); err != nil {
		t.Fatalf("buffered write: %v (the page cache should take it)", err)
	}
	if err := f1.Close(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("close after a failed writeback: %v, want EIO", err)
	}
	dev.FailWrites(nil)
	if err := f2.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("fsync of another open file after the error: %v, want EIO", err)
	}
}
