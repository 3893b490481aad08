package backend

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// File is a Device backed by a regular image file.
type File struct {
	c    *Claimed // the descriptor; a remount read-write replaces it
	path string
	size int64
}

var _ Device = (*File)(nil)

// OpenFile opens the image file at path and takes its exclusive lock. The
// lock is exclusive even for ro: a read-only mount still owns the device and
// must not see a writer change it underneath. A held lock gives ErrBusy.
func OpenFile(path string, ro bool) (*File, error) {
	flags := os.O_RDWR
	if ro {
		flags = os.O_RDONLY
	}
	f, err := os.OpenFile(path, flags|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open device %s: %w", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat device %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("device %s: not a regular file (%s)", path, st.Mode().Type())
	}
	if err := LockExclusive(f, path); err != nil {
		f.Close()
		return nil, err
	}
	return &File{c: NewClaimed(f, path, ro, 0), path: path, size: st.Size()}, nil
}

// ReadAt implements Device.
func (d *File) ReadAt(p []byte, off int64) error {
	if err := CheckRange("read", off, int64(len(p)), d.size); err != nil {
		return fmt.Errorf("device %s: %w", d.path, err)
	}
	if err := preadFull(d.c.File(), p, off); err != nil {
		return fmt.Errorf("device %s: %w", d.path, err)
	}
	return nil
}

// WriteAt implements Device; an image file has no hardware streams.
func (d *File) WriteAt(p []byte, off int64, _ uint32) error {
	if d.c.ReadOnly() {
		return errReadOnly(d.path)
	}
	if err := CheckRange("write", off, int64(len(p)), d.size); err != nil {
		return fmt.Errorf("device %s: %w", d.path, err)
	}
	if err := pwriteFull(d.c.File(), p, off); err != nil {
		return fmt.Errorf("device %s: %w", d.path, err)
	}
	return nil
}

// Flush implements Device with fdatasync.
func (d *File) Flush() error {
	if d.c.ReadOnly() {
		return nil
	}
	if err := fdatasync(d.c.File()); err != nil {
		return fmt.Errorf("device %s: fdatasync: %w", d.path, err)
	}
	return nil
}

// Discard punches a hole; filesystems without hole punching make it a no-op,
// which is allowed because callers never read discarded blocks.
func (d *File) Discard(off, length int64) error {
	if d.c.ReadOnly() {
		return errReadOnly(d.path)
	}
	if err := CheckRange("discard", off, length, d.size); err != nil {
		return fmt.Errorf("device %s: %w", d.path, err)
	}
	if length == 0 {
		return nil
	}
	err := WithFd(d.c.File(), func(fd int) error {
		for {
			err := unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, length)
			if err != unix.EINTR {
				return err
			}
		}
	})
	if err != nil && !isNotSupported(err) {
		return fmt.Errorf("device %s: punch hole %d bytes at %d: %w", d.path, length, off, err)
	}
	return nil
}

// Size implements Device: the file's size when it was opened.
func (d *File) Size() int64 { return d.size }

// SectorSize implements Device.
func (d *File) SectorSize() int { return 512 }

// MaxStreams implements Device.
func (d *File) MaxStreams() uint32 { return 0 }

// Kind implements Device.
func (d *File) Kind() string { return "file" }

// MakeWritable implements Reopener: an image opened read-only is opened
// again read-write, keeping its lock.
func (d *File) MakeWritable() error { return d.c.MakeWritable() }

// ReadOnly reports an image opened (and still) read-only.
func (d *File) ReadOnly() bool { return d.c.ReadOnly() }

// Close releases the file and, with it, the lock.
func (d *File) Close() error { return d.c.Close() }

// WriteBack starts writeback of [off, off+n) and waits for it, without the
// device cache flush of Flush. It lets a large background write go out in
// pieces, so that a concurrent Flush never finds much of it still dirty.
func (d *File) WriteBack(off, n int64) error {
	if d.c.ReadOnly() || n <= 0 {
		return nil
	}
	err := WithFd(d.c.File(), func(fd int) error {
		for {
			err := unix.SyncFileRange(fd, off, n,
				unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER)
			if err != unix.EINTR {
				return err
			}
		}
	})
	if err != nil && !isNotSupported(err) {
		return fmt.Errorf("device %s: sync_file_range %d bytes at %d: %w", d.path, n, off, err)
	}
	return nil
}
